"""Backpressure per task, and acking that cannot deadlock.

Real worker processes on the session's ZooKeeper, talking zmq on loopback, scheduled by nimbus.
Rates come from the workers' heartbeats in ZooKeeper; assertions are on ratios of rates measured
in the same run, never on absolute times.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import (  # the integration tests' helpers (same directory)
    COMPONENTS,
    assigned_slots,
    component_slots,
    id_pipeline,
    latest_beat_time,
    logs_tail,
    read_spout,
    stop_topology,
    topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
)

from squall.models.cluster import TopologyStatus, WorkerSlot
from squall.plan import ACKER
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


def _rate_on(cluster: LocalCluster, topo: str, comp: str, slot: WorkerSlot, secs: float) -> float:
    """Executed tuples per second of `comp` in the worker on `slot`, from that worker's own
    heartbeats about `secs` apart (other workers may be frozen)."""
    def beat() -> tuple[float, int] | None:
        b = cluster.state.get_worker_heartbeats(topo).get(slot)
        if b is None:
            return None
        return b.time_secs, sum(e.executed for e in b.executors.values() if e.component == comp)

    t1, n1 = wait_for(beat, 30, f"a heartbeat of {slot.key()}", cluster)
    t2, n2 = wait_for(lambda: (b := beat()) is not None and b[0] >= t1 + secs and b, secs + 30,
                      f"a later heartbeat of {slot.key()}", cluster)
    return (n2 - n1) / (t2 - t1)


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


# -- 2. a rebalance from 2 to 4 workers under full load -----------------------------------------
def test_rebalance_2_to_4_workers_under_full_load_acks_every_id(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """The spout emits as fast as it can (maxSpoutPending 500) while the topology goes from 2 to
    4 workers. numAckers is unset, so the ackers follow the worker count (one per worker, as at
    submit): no worker is left without an acker, acking never deadlocks, every id is acked.
    The source is ended (its `stop` file) only after the 4 workers acked 10,000 more ids: a
    fixed count could be done before the rebalance took effect on a fast, idle machine."""
    n = 1_000_000_000
    out = tmp_path / "out"
    topo = id_pipeline("bp-rebalance", out, n, workers=2, timeout=10, extra={"test.stoppable": True})
    assert topo.spec.num_ackers is None
    cluster = make_cluster(nodes=2, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 10_000, 60, "the first acks", cluster)
    cluster.nimbus.rebalance(topo.name, num_workers=4, wait_secs=0)
    wait_for(lambda: len(assigned_slots(cluster, topo.name)) == 4, 30, "an assignment on 4 slots", cluster)
    wait_for(lambda: cluster.nimbus.status(topo.name) is TopologyStatus.ACTIVE, 30, "ACTIVE again", cluster)
    wait_running(cluster, topo)
    # the move happened under load: the spout still had most of its ids to go
    assert not list(out.glob("spout-*.done")), "the spout finished before the rebalance took effect"
    base = cluster.state.get_storm(topo.name)
    assert base is not None and base.num_workers == 4 and base.component_executors[ACKER] == 4, base
    ackers = component_slots(cluster, topo)[ACKER]
    print("ACKER SLOTS", sorted(s.key() for s in ackers), "of", sorted(s.key() for s in assigned_slots(cluster, topo.name)))
    assert len(ackers) == 4, f"ackers on {ackers} only"
    acked = totals(cluster, topo.name)["ids"]["acked"]
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= acked + 10_000, 60,
             "acks on 4 workers", cluster)
    (out / "stop").write_text("stop")
    wait_spout_done(out, cluster, 240)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    print("SPOUT failed", spout["failed"], "opens", spout["opens"], "ids", spout["limit"])
    assert spout["limit"] is not None and spout["limit"] > 10_000, spout["limit"]
    assert spout["acked"] == list(range(spout["limit"]))
    assert not cluster.crashes


# -- 3. a frozen peer does not stop sends to the other peers ------------------------------------
def test_a_frozen_peer_does_not_stop_sends_to_the_other_peers(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """Both spouts run in one worker, each feeding a sink in its own worker, as fast as they can
    (no maxSpoutPending; d-ids's tuples carry 10 kB each, so the frozen peer's sockets fill in
    well under a second). One sink's worker is frozen (SIGSTOP, for less than the ZooKeeper
    session and nimbus's heartbeat timeout, so it stays registered and assigned):
    the spouts' worker must keep sending to the other sink at its pace; only the spout whose
    sink is frozen holds back."""
    # three workers, one acker each; sorted executors go round robin: a-ids and d-ids on one
    # slot, b-sink and c-sink on one each (checked below)
    spec = {
        "numWorkers": 3,
        "numAckers": 3,
        "messageTimeoutSecs": 60,
        "spouts": [
            {"name": "a-ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1},
            {"name": "d-ids", "class": "flow_components:PaddedIdSpout", "parallelism": 1},
        ],
        "bolts": [
            {"name": "b-sink", "class": f"{COMPONENTS}:SinkBolt", "parallelism": 1,
             "inputs": [{"component": "a-ids", "grouping": "shuffle"}]},
            {"name": "c-sink", "class": f"{COMPONENTS}:SinkBolt", "parallelism": 1,
             "inputs": [{"component": "d-ids", "grouping": "shuffle"}]},
        ],
    }
    topo = topology("bp-frozen", spec, {"test.count": 0})
    cluster = make_cluster(nodes=3, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    slots = component_slots(cluster, topo)
    assert slots["a-ids"] == slots["d-ids"], slots
    assert len(slots["a-ids"] | slots["b-sink"] | slots["c-sink"]) == 3, slots
    wait_for(lambda: totals(cluster, topo.name)["b-sink"]["executed"] > 5000, 60, "the sinks to run", cluster)
    (sink_slot,) = slots["b-sink"]
    before = _rate_on(cluster, topo.name, "b-sink", sink_slot, 2.0)
    (frozen_slot,) = slots["c-sink"]
    pid = cluster.worker_pids(topo.name)[frozen_slot]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(1.0)  # let the frozen worker's sockets and its peer queue fill
        during = _rate_on(cluster, topo.name, "b-sink", sink_slot, 2.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    print("B-SINK", {"before": before, "during": during})
    assert during >= 0.3 * before, f"b-sink ran at {during:.0f}/s while c-sink's worker was frozen, {before:.0f}/s before" + logs_tail(cluster)
    wait_for(lambda: totals(cluster, topo.name)["c-sink"]["executed"] > 0, 30, "the frozen sink to run again", cluster)
    stop_topology(cluster, topo.name)


# -- 4. per-pair order across a slow peer -------------------------------------------------------
FREEZES = 6


def test_a_tasks_tuples_arrive_in_order_across_a_slow_peer(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """A spout task in one worker emits sequence numbers (1 kB each, unanchored: no pending
    limit, no replays) as fast as it can to a bolt task in the other worker, whose worker is
    frozen (SIGSTOP) for a second, FREEZES times: with no backpressure signal from the frozen
    worker the spout's sockets to it reach their high-water mark each time, and the thawed
    worker reads whatever its connections hold at once. Every tuple the bolt gets must come after the ones
    its task emitted before it (Storm keeps per-connection order; stateful windows rely on it):
    a batch must never overtake earlier ones still waiting for the slow peer on another path."""
    out = tmp_path / "out"
    spec = {
        "numWorkers": 2,
        "numAckers": 0,
        "spouts": [{"name": "a-seq", "class": "flow_components:SeqSpout", "parallelism": 1}],
        "bolts": [
            {"name": "b-check", "class": "flow_components:OrderCheckBolt", "parallelism": 1,
             "inputs": [{"component": "a-seq", "grouping": "shuffle"}]},
        ],
    }
    topo = topology("bp-order", spec, {"test.pad_bytes": 1000, "test.sleep_ms": 0, "test.out": str(out)})
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    slots = component_slots(cluster, topo)
    assert slots["a-seq"] != slots["b-check"], slots
    wait_for(lambda: totals(cluster, topo.name)["b-check"]["executed"] > 2000, 60, "the checking bolt to run", cluster)
    (check_slot,) = slots["b-check"]
    pid = cluster.worker_pids(topo.name)[check_slot]
    for _ in range(FREEZES):
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        executed = totals(cluster, topo.name)["b-check"]["executed"]
        wait_for(lambda: totals(cluster, topo.name)["b-check"]["executed"] > executed + 5000, 60,
                 "the checking bolt to go on", cluster)
    stop_topology(cluster, topo.name)
    (path,) = out.glob("order-*.json")
    seen = json.loads(path.read_text())
    print("ORDER", seen)
    assert seen["received"] > FREEZES * 5000, seen
    assert seen["out_of_order"] == 0, f"tuples overtook earlier ones: {seen}"
    assert not cluster.crashes
