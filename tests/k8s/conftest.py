"""Fixtures for the Kubernetes acceptance tests (marker `k8s`).

`k8s_cluster` starts one control plane and a 3-node process kubelet for the
whole session (only when a test asks for it) and, at the end, checks that no
process of it is left. `real_cluster` starts one with 2 real nodes (real
kubelets over containerd, kube-proxy, CoreDNS; realnode.py) running the
images of scripts/k8s-images, and checks at the end that no process, mount,
network namespace or cgroup of it is left. Before the first test, when a test
uses `real_cluster`, scripts/k8s-images runs (outside any test's timeout): it
rebuilds any image whose inputs (this checkout's sources, Dockerfiles, bases)
changed and takes seconds when none did, so a stale image is never tested. If
the binaries are not built the tests FAIL with
how to build them: run scripts/k8s-build first.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from .cluster import REPO, Cluster, find_bin_dir
from .realnode import RealNodeCluster, images_dir, missing_prerequisites


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


def refresh_images(log: Path) -> tuple[float, str]:
    """Runs scripts/k8s-images (images rebuilt only where their inputs changed; its own process
    group, killed with it if this is interrupted). Returns the seconds it took and, if it failed,
    why (the end of its log)."""
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen([str(REPO / "scripts" / "k8s-images")], stdout=subprocess.DEVNULL, stderr=f,
                             start_new_session=True)
        try:
            rc = p.wait()
        except BaseException:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            raise
    took = time.monotonic() - t0
    return took, "" if rc == 0 else f"scripts/k8s-images failed ({rc}):\n{log.read_text()[-4000:]}"


_images: dict[str, Any] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """scripts/k8s-images runs here, before the first test, when a collected test uses the
    real-node cluster: a cold build takes minutes, more than one test's timeout."""
    if session.config.option.collectonly or not any(
            "real_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    log = session.config._tmp_path_factory.mktemp("k8s-images") / "k8s-images.log"  # type: ignore[attr-defined]
    _images["took"], _images["error"] = refresh_images(log)
    print(f"\nscripts/k8s-images: {_images['took']:.1f}s (log: {log})")


@pytest.fixture(scope="session")
def real_cluster(k8s_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNodeCluster]:
    """The control plane with 2 real nodes (node-1, node-2), for the whole session, running the
    images of this checkout (scripts/k8s-images first)."""
    if _images.get("error"):
        pytest.fail(_images["error"], pytrace=False)
    missing = missing_prerequisites(k8s_bin, images_dir())
    if missing:
        pytest.fail("the real-node cluster needs: " + "; ".join(missing), pytrace=False)
    before = set(_descendants(os.getpid()))
    netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    workdir = tmp_path_factory.mktemp("k8s-real")
    cluster = RealNodeCluster(k8s_bin, workdir, nodes=2)
    cluster.start(timeout=300)
    cgroups = [n.cgroup_root for n in cluster.nodes.values()]
    try:
        yield cluster
    finally:
        cluster.stop()
        time.sleep(0.5)
        stray = [p for p in _descendants(os.getpid()) if p not in before]
        stray += [p for p in _processes_mentioning(str(workdir)) if p not in stray]
        assert not stray, f"processes left after the cluster stopped: {stray}"
        mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                  if ln.split()[4].startswith(str(workdir))]
        assert not mounts, f"mounts left after the cluster stopped: {mounts}"
        netns_after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        assert not netns_after - netns_before, f"network namespaces left: {netns_after - netns_before}"
        left = [str(p) for c in cgroups for p in Path("/sys/fs/cgroup").glob("*" + c) if p.exists()]
        assert not left, f"cgroups left: {left}"


_ns_counter = itertools.count(1)


def _namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t{next(_ns_counter)}-{request.node.name.lower().replace('_', '-')}"[:50].rstrip("-")
    cluster.kubectl("create", "namespace", name)
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
             30, what=f"the default service account in {name}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def ns(k8s_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (not waited for)."""
    yield from _namespace(k8s_cluster, request)


@pytest.fixture
def real_ns(real_cluster: RealNodeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the real-node cluster, deleted afterwards (not waited for)."""
    yield from _namespace(real_cluster, request)


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


def assert_refused_alike(c: Cluster, ns: str, doc: dict[str, Any], path: str, what: str) -> None:
    """One file, one meaning: the API server (`kubectl apply --dry-run=server`) and `squall
    validate`'s parser both refuse `doc`, each naming `path`."""
    import yaml

    from squall.errors import TopologyError
    from squall.validation import parse_topology

    wrong = yaml.safe_dump(doc)
    r = c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=wrong, check=False)
    assert r.returncode != 0, f"the API server accepted {what}"
    assert path in r.stderr, (path, r.stderr)
    with pytest.raises(TopologyError) as info:
        parse_topology(wrong)
    assert path in {p.path for p in info.value.problems}, str(info.value)
