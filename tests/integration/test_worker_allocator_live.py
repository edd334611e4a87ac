"""The worker's allocator on real processes (squall.worker.allocator): under `auto` (the default)
a worker of a topology with windows re-executes itself once with jemalloc preloaded as soon as it
has read its topology, keeps its pid, processes tuples on it and gives its own children the
environment it was started with; a plain topology's workers keep CPython's allocator;
`SQUALL_WORKER_ALLOCATOR` overrides both ways; an unknown value stops the worker with an error
naming the variable. jemalloc is Debian's libjemalloc2, installed by scripts/setup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from squall.worker.allocator import ENV, MARK
from squall_operator.local import LocalCluster
from helpers import id_pipeline, logs_tail, stop_topology, totals, wait_for, wait_running

pytestmark = pytest.mark.integration

HAS_JEMALLOC = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout.count("libjemalloc.so.2") > 0

# what a re-executed process sees: its pid (the first run writes it down), whether jemalloc is
# mapped, and the environment its own children would get
PROBE = """
import json, os, sys
first = sys.argv[1]
if not os.path.exists(first):
    open(first, "w").write(str(os.getpid()))
from squall.worker import allocator
allocator.select(windowed=True)
print(json.dumps({
    "pid": os.getpid(), "first": int(open(first).read()),
    "mapped": "libjemalloc" in open("/proc/self/maps").read(),
    "child_env": {k: os.environ.get(k) for k in ("LD_PRELOAD", "PYTHONMALLOC", "%s")},
    "message": allocator.active.message,
}))
""" % MARK


def probe(tmp_path: Path, **env: str) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC", ENV, MARK)}
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "first-pid")], env={**base, **env},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_a_process_re_executes_itself_once_on_jemalloc_and_its_children_start_as_it_did(tmp_path: Path) -> None:
    assert HAS_JEMALLOC, "libjemalloc.so.2 is not installed (scripts/setup installs Debian's libjemalloc2)"
    got = probe(tmp_path)
    assert got["mapped"] is True, got
    assert got["pid"] == got["first"], "the re-executed process has another pid"
    assert got["child_env"] == {"LD_PRELOAD": None, "PYTHONMALLOC": None, MARK: None}, got
    assert "jemalloc (re-executed" in str(got["message"])


def test_a_preload_of_the_users_own_is_kept_for_the_children(tmp_path: Path) -> None:
    assert HAS_JEMALLOC, "libjemalloc.so.2 is not installed (scripts/setup installs Debian's libjemalloc2)"
    # a library every process has: preloading it again changes nothing but the variable
    own = "libc.so.6"
    got = probe(tmp_path, LD_PRELOAD=own)
    assert got["mapped"] is True, got
    assert got["child_env"] == {"LD_PRELOAD": own, "PYTHONMALLOC": None, MARK: None}, got


def test_pymalloc_asked_for_is_not_re_executed(tmp_path: Path) -> None:
    got = probe(tmp_path, **{ENV: "pymalloc"})
    assert got["mapped"] is False, got
    assert "CPython's own" in str(got["message"])


def worker_maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


WINDOWED = {"name": "win", "class": "window_components:RecordWindows", "parallelism": 2,
            "inputs": [{"component": "ids", "grouping": "shuffle"}],
            "window": {"windowLength": "1s", "slidingInterval": "500ms"}}


@pytest.mark.parametrize(("windowed", "setting", "jemalloc", "line"), [
    (True, None, True, "allocator: jemalloc (re-executed with it preloaded)"),
    (False, None, False, "allocator: CPython's own (auto: the topology has no windowed bolt)"),
    (False, "jemalloc", True, "allocator: jemalloc (re-executed with it preloaded)"),
    (True, "pymalloc", False, f"allocator: CPython's own ({ENV}=pymalloc)"),
], ids=["auto-windowed", "auto-plain", "jemalloc-plain", "pymalloc-windowed"])
def test_workers_process_tuples_on_the_allocator_chosen(
    windowed: bool, setting: str | None, jemalloc: bool, line: str,
    make_cluster: Callable[..., LocalCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert HAS_JEMALLOC, "libjemalloc.so.2 is not installed (scripts/setup installs Debian's libjemalloc2)"
    for var in ("LD_PRELOAD", "PYTHONMALLOC", MARK, ENV):
        monkeypatch.delenv(var, raising=False)
    if setting is not None:
        monkeypatch.setenv(ENV, setting)
    cluster = make_cluster(nodes=1, slots=2)
    topo = id_pipeline("alloc", tmp_path / "out", 0, workers=2, rate=500, timeout=10,
                       middle=WINDOWED if windowed else None)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > 200, 30, "tuples acked", cluster)
    pids = cluster.worker_pids(topo.name)
    assert len(pids) == 2
    for slot, pid in pids.items():
        # the pid the cluster started is the worker, alive, on the allocator chosen
        assert Path(f"/proc/{pid}").exists(), f"worker {slot.key()} is gone" + logs_tail(cluster)
        mapped = "libjemalloc" in worker_maps(pid)
        assert mapped is jemalloc, f"worker {slot.key()}: jemalloc mapped: {mapped}" + logs_tail(cluster)
    logs = cluster.worker_logs()
    assert all(line in text for text in logs.values()), logs_tail(cluster)
    assert not cluster.crashes
    stop_topology(cluster, topo.name)


def test_an_unknown_allocator_stops_the_worker_with_an_error_naming_the_variable(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "tcmalloc")
    cluster = make_cluster(nodes=1, slots=1)
    topo = id_pipeline("badalloc", tmp_path / "out", 0, workers=1, rate=100, timeout=10)
    cluster.submit(topo)
    wait_for(lambda: any("exited with 2" in c for c in cluster.crashes), 60, "the worker to exit with 2", cluster)
    logs = "\n".join(cluster.worker_logs().values())
    assert f"{ENV}='tcmalloc': expected one of auto, jemalloc, pymalloc" in logs, logs_tail(cluster)
    assert not cluster.state.get_worker_heartbeats(topo.name), "a worker ran with an unknown allocator"
    stop_topology(cluster, topo.name)
