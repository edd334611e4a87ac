"""Fixtures for the Kubernetes acceptance tests (marker `k8s`).

`k8s_cluster` starts one control plane and a 3-node process kubelet for the
whole session (only when a test asks for it) and, at the end, checks that no
process of it is left. If the binaries are not built the tests FAIL with how
to build them: run scripts/k8s-build first.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from .cluster import Cluster, find_bin_dir


def wait_for(fn: Callable[[], Any], timeout: float = 60, interval: float = 0.3, what: str = "condition") -> Any:
    """Calls fn until it returns something truthy; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except (subprocess.CalledProcessError, KeyError, IndexError, OSError) as e:
            last = e
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def _descendants(pid: int) -> list[int]:
    """Every live process whose ancestry leads to pid."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue
        parents[int(d.name)] = int(fields[1])
    out = []
    for p in parents:
        q = p
        while q > 1 and q in parents:
            q = parents[q]
            if q == pid:
                out.append(p)
                break
    return out


def _processes_mentioning(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    try:
        return find_bin_dir()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def k8s_cluster(k8s_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    before = set(_descendants(os.getpid()))
    workdir = tmp_path_factory.mktemp("k8s")
    cluster = Cluster(k8s_bin, workdir, nodes=3)
    cluster.start(timeout=240)
    try:
        yield cluster
    finally:
        cluster.stop()
        time.sleep(0.5)
        stray = [p for p in _descendants(os.getpid()) if p not in before]
        stray += [p for p in _processes_mentioning(str(workdir)) if p not in stray]
        assert not stray, f"processes left after the cluster stopped: {stray}"


_ns_counter = itertools.count(1)


@pytest.fixture
def ns(k8s_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (not waited for)."""
    name = f"t{next(_ns_counter)}-{request.node.name.lower().replace('_', '-')}"[:50].rstrip("-")
    k8s_cluster.kubectl("create", "namespace", name)
    wait_for(lambda: k8s_cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
             30, what=f"the default service account in {name}")
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def kget(cluster: Cluster, *args: str) -> Any:
    """kubectl get ... -o json, parsed."""
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def apply(cluster: Cluster, manifest: str, namespace: str) -> str:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest).stdout


def container_pid(pod: dict[str, Any], index: int = 0) -> int:
    cid = pod["status"]["containerStatuses"][index].get("containerID", "")
    assert cid.startswith("process://"), cid
    return int(cid[len("process://"):])


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"
