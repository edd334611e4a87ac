"""Backpressure per task, and acking that cannot deadlock (issue 9, defect 5).

Real worker processes on the session's ZooKeeper, talking zmq on loopback, scheduled by nimbus.
Rates come from the workers' heartbeats in ZooKeeper; assertions are on ratios of rates measured
in the same run, never on absolute times.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_engine import (
    COMPONENTS,
    component_slots,
    latest_beat_time,
    logs_tail,
    make_cluster,  # noqa: F401  (the fixture)
    stop_topology,
    topology,
    totals,
    wait_for,
    wait_running,
)

from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration


def _rates(cluster: LocalCluster, topo: str, comps: list[str], secs: float) -> dict[str, float]:
    """Executed tuples per second of each component in `comps`, between two heartbeats about
    `secs` apart."""
    wait_for(lambda: latest_beat_time(cluster, topo) > 0, 30, "heartbeats", cluster)
    t1 = latest_beat_time(cluster, topo)
    c1 = totals(cluster, topo)
    wait_for(lambda: latest_beat_time(cluster, topo) >= t1 + secs, secs + 30, "a later heartbeat", cluster)
    t2 = latest_beat_time(cluster, topo)
    c2 = totals(cluster, topo)
    return {c: (c2[c]["executed"] - c1[c]["executed"]) / (t2 - t1) for c in comps}


# -- 1. one slow bolt task does not starve its worker's other executors -----------------------
def test_slow_bolt_task_does_not_starve_its_workers_other_executors(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """Two independent pipelines whose bolts share a worker and whose spouts share the other:
    a slow one (5 ms a tuple) and a fast one (acks at once). The fast bolt must run far above
    the slow one's pace: the slow task's full inbox may hold back its own spout, not the
    receive thread, the transfer thread, or the fast spout of the same worker."""
    # names chosen so that the even scheduler puts both bolts on one slot, both spouts on the
    # other (sorted executors, round robin); checked below
    spec = {
        "numWorkers": 2,
        "messageTimeoutSecs": 60,
        "spouts": [
            {"name": "b-fast-ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1},
            {"name": "d-slow-ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1},
        ],
        "bolts": [
            {"name": "a-fast", "class": f"{COMPONENTS}:SinkBolt", "parallelism": 1,
             "inputs": [{"component": "b-fast-ids", "grouping": "shuffle"}]},
            {"name": "c-slow", "class": f"{COMPONENTS}:SlowBolt", "parallelism": 1,
             "config": {"test.sleep_ms": 5},
             "inputs": [{"component": "d-slow-ids", "grouping": "shuffle"}]},
        ],
    }
    topo = topology("bp-share", spec, {"test.count": 0})
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    slots = component_slots(cluster, topo)
    assert slots["a-fast"] == slots["c-slow"] and slots["b-fast-ids"] == slots["d-slow-ids"], slots
    assert slots["a-fast"] != slots["b-fast-ids"], slots
    wait_for(lambda: totals(cluster, topo.name)["c-slow"]["executed"] > 200, 60, "the slow bolt to run", cluster)
    rates = _rates(cluster, topo.name, ["a-fast", "c-slow"], 5.0)
    fast, slow = rates["a-fast"], rates["c-slow"]
    print("RATES", rates)
    assert slow > 0, f"the slow bolt stopped: {rates}" + logs_tail(cluster)
    # the slow task alone can do at most 200/s; the fast one is held back only by CPU
    assert fast >= 10 * slow, f"the fast bolt ran at {fast:.0f}/s, the slow one at {slow:.0f}/s" + logs_tail(cluster)
    stop_topology(cluster, topo.name)
    assert not cluster.crashes
