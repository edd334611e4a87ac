"""The peer bench's harness end to end on Squall's own case (the peers need Maven and Bytewax,
which the tests do not install): bench/peers.py runs a real local cluster for a few seconds,
prints the table and writes JSON with a rate and complete latency."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from squall.zkserver import java_available

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not java_available(), reason="the embedded ZooKeeper needs java")
def test_peers_harness_runs_squalls_noop_case(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "peers.py"), "--only", "squall-noop",
         "--seconds", "2", "--warmup", "1", "--pending", "200", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Squall (defaults)" in proc.stdout
    case = json.loads(out.read_text())["cases"]["squall-noop"]
    assert "error" not in case, case
    assert case["rate"] > 0 and case["acked_per_sec"] == case["rate"]
    assert 0 < case["p50_ms"] <= case["p99_ms"]
    assert case["cpu_s"] > 0


@pytest.mark.skipif(not java_available(), reason="the embedded ZooKeeper needs java")
def test_profile_workers_names_the_busy_threads(tmp_path: Path) -> None:
    """bench/profile_workers.py on a real local cluster (without perf: a few seconds): both
    workers' threads with their CPU, the engine loop (which steps every executor) among them, and
    the word count's rate."""
    out = tmp_path / "profile.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "profile_workers.py"), "--seconds", "2", "--warmup", "1",
         "--pending", "200", "--no-perf", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["words_per_sec"] > 0
    workers = result["workers"]
    assert len(workers) == 2
    hosts = sorted(c for w in workers.values() for c in w["hosts"])
    assert hosts.count("sentences") == 1 and hosts.count("count") == 2, hosts
    for w in workers.values():
        assert w["cores"] > 0
        assert all(t["cores"] > 0 and t["voluntary_per_s"] >= 0 for t in w["threads"])
        assert sum(t["cores"] for t in w["threads"]) <= w["cores"] * 1.5 + 0.05
    # threads by the kernel's names the worker gives them (squall.worker.threads), no py-spy needed
    names = {t["thread"].rsplit(" (", 1)[0] for w in workers.values() for t in w["threads"]}
    assert "engine" in names, names
    assert max((t for w in workers.values() for t in w["threads"]), key=lambda t: t["cores"])["thread"].startswith(
        "engine"), "the busiest thread is not the engine loop"


def test_hotpath_replays_every_per_tuple_path_of_the_real_executors() -> None:
    """bench/hotpath.py drives the real executors' and the worker's per-tuple functions in one
    thread: it broke once unnoticed when the executors' flush was renamed, so it runs here, a
    few calls per case."""
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "hotpath.py"), "--calls", "2", "--rounds", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.rstrip().endswith(" us")]
    assert len(lines) == 8, proc.stdout
    assert all(float(line.split()[-2]) > 0 for line in lines), proc.stdout
