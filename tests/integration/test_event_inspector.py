"""The event inspector on a real local cluster (Storm's `storm debug` and its event log):
`squall debug` turns sampling of a component's emits on for a while, every worker applies it,
`squall events` shows the sampled tuples (values, stream, task, message id), and the setting
lapses by itself; bad settings are one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import id_pipeline, one_line_error, squall, totals, wait_for, wait_running  # same directory

from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration


def test_debug_samples_a_components_emits_in_every_worker_until_it_lapses(
        make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    topo = id_pipeline("inspected", tmp_path / "out", 0, rate=200, workers=2,
                       extra={"topology.disable.loadaware.messaging": True})
    cluster = make_cluster(nodes=2, slots=1)
    zk = ["--zookeeper", cluster.connect_string]
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["pass"]["executed"] > 50, 60, "the bolt to run", cluster)

    quiet = squall("events", "inspected", *zk)
    assert quiet.returncode == 0 and "no sampled tuples yet" in quiet.stdout, quiet.stdout + quiet.stderr

    on = squall("debug", "inspected", "pass", "--sample", "50", "--secs", "5", *zk)
    assert on.returncode == 0, on.stderr
    assert "sampling 50% of pass's emits for 5s" in on.stdout, on.stdout

    def pass_samples() -> dict[str, int]:
        """worker -> tuples of `pass` it published"""
        return {slot: len(s.tuples) for slot, s in cluster.state.samples("inspected").items()}

    # both workers run a `pass` executor (a uniform shuffle feeds both): both sample, and publish
    # with each heartbeat, so the five asked for below may take a second one
    wait_for(lambda: (len(got := pass_samples()) == 2 and sum(got.values()) >= 5) or None, 30,
             "5 samples, from both workers", cluster)
    shown = squall("events", "inspected", "pass", "-n", "5", *zk)
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["TIME", "COMPONENT", "TASK", "STREAM", "MSG-ID", "VALUES"]
    assert len(rows) == 5 and all(" pass " in r and " default " in r for r in rows), shown.stdout
    everything = [t for s in cluster.state.samples("inspected").values() for t in s.tuples]
    assert {t.component for t in everything} == {"pass"}  # only the component asked for
    assert all(t.msg_id is None and len(t.values) == 1 and t.values[0].isdigit() for t in everything)

    # lapsed after 5 s: no new samples
    wait_for(lambda: all("no longer sampled" in text for text in cluster.worker_logs().values()) or None, 30,
             "the sampling to lapse in both workers", cluster)
    newest = max(t.time_secs for s in cluster.state.samples("inspected").values() for t in s.tuples)
    time.sleep(2.5)
    assert max(t.time_secs for s in cluster.state.samples("inspected").values() for t in s.tuples) == newest

    # a spout's samples carry its message ids; --secs 0 samples until --off
    on = squall("debug", "inspected", "ids", "-s", "100", "--secs", "0", *zk)
    assert on.returncode == 0 and "until `squall debug --off`" in on.stdout, on.stdout + on.stderr
    wait_for(lambda: sum(t.component == "ids" and t.msg_id is not None
                         for s in cluster.state.samples("inspected").values() for t in s.tuples) >= 3 or None,
             30, "the spout's samples", cluster)
    off = squall("debug", "inspected", "ids", "--off", *zk)
    assert off.returncode == 0 and "no longer sampled" in off.stdout, off.stdout + off.stderr
    assert cluster.state.get_sampling("inspected").components == {}  # type: ignore[union-attr]

    # what `kubectl squall debug|events` run inside a worker pod: the same, as JSON
    def in_pod(*args: str) -> dict[str, object]:
        proc = subprocess.run([sys.executable, "-m", "squall.worker.eventlog", "--zookeeper", str(cluster.zk_connect),
                               "--root", cluster.root, "--topology", "inspected", *args],
                              capture_output=True, text=True, timeout=60)
        got: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert proc.returncode == (1 if "error" in got else 0), proc.stderr
        return got

    shown_in_pod = in_pod("--component", "ids", "--tail", "3")["events"]
    assert isinstance(shown_in_pod, list) and len(shown_in_pod) == 3
    assert all(e["component"] == "ids" and e["msg_id"] is not None for e in shown_in_pod)
    assert "sampling 5% of sink's emits for 60s" in str(in_pod("--component", "sink", "--sample", "5", "--secs", "60")["message"])
    assert in_pod("--component", "sink", "--sample", "500") == {
        "error": "debug: sink: the sample percentage must be a number above 0 and at most 100 (got 500.0)", "usage": True}
    assert in_pod("--component", "nosuch", "--tail", "1")["usage"] is False
    assert "no longer sampled" in str(in_pod("--component", "sink", "--off")["message"])

    one_line_error(squall("debug", "inspected", "pass", "--sample", "0", *zk), 2, "above 0 and at most 100")
    one_line_error(squall("debug", "inspected", "pass", *zk), 2, "give --sample PCT or --off")
    one_line_error(squall("debug", "inspected", "nosuch", "-s", "5", *zk), 1, "has no component 'nosuch'")
    # an unknown topology is said as every verb says it: where it was looked for
    where = f"no topology named 'nosuch' is running at {cluster.connect_string}"
    one_line_error(squall("debug", "nosuch", "-s", "5", *zk), 1, where)
    one_line_error(squall("events", "nosuch", *zk), 1, where)
    assert not cluster.crashes
