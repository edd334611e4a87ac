"""Windowed bolts on real workers: processing-time windows fired by the executor's timer, every
tuple acked when it leaves its last window (and not before: no replays), emits anchored to the
window's tuples (docs/topology.md, "Windowed bolts"). Event time, watermarks and the late stream
run end to end in test_trending.py."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from squall_operator.local import LocalCluster
from helpers import (  # the integration tests' helpers (same directory)
    id_pipeline,
    read_spout,
    stop_topology,
    wait_running,
    wait_spout_done,
)

pytestmark = pytest.mark.integration



def test_sliding_time_windows_ack_each_tuple_when_it_leaves_its_last_window(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    n = 1500
    out = tmp_path / "out"
    middle = {"name": "win", "class": "window_components:RecordWindows", "parallelism": 2,
              "inputs": [{"component": "ids", "grouping": "shuffle"}],
              "window": {"windowLength": "1s", "slidingInterval": "500ms"}}
    # a tuple waits at most 1.5 s in the windows; a 10 s timeout replays only what is lost
    topo = id_pipeline("windows", out, n, rate=1000, timeout=10, middle=middle)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_spout_done(out, cluster, 60)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert spout["failed"] == 0, "a tuple was failed or timed out: acked too late, or never"

    per_task = [json.loads(f.read_text()) for f in sorted(out.glob("windows-*.json"))]
    assert len(per_task) == 2
    windows = [w for ws in per_task for w in ws]
    in_windows = collections.Counter(i for w in windows for i in w["ids"])
    new = collections.Counter(i for w in windows for i in w["new"])
    expired = collections.Counter(i for w in windows for i in w["expired"])
    # length = 2 x sliding interval: every tuple is in exactly two windows, new in the first
    assert set(in_windows) == set(range(n))
    assert set(in_windows.values()) == {2}, [i for i, c in in_windows.items() if c != 2][:10]
    assert new == collections.Counter(range(n))
    # expired once, reported with a later window (the last ones have no later window)
    assert max(expired.values()) == 1 and len(expired) > n // 2
    for w in windows:
        assert w["end"] - w["start"] == pytest.approx(1.0)
        assert set(w["new"]) <= set(w["ids"]) and not set(w["expired"]) & set(w["ids"])
    for ws in per_task:  # each task's windows end every 500 ms from its start (or skip empty ones)
        ends = [w["end"] for w in ws]
        steps = [round((b - a) / 0.5, 6) for a, b in zip(ends, ends[1:])]
        assert all(s >= 1 and s == int(s) for s in steps), steps
    assert not cluster.crashes
