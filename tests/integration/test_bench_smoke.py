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
