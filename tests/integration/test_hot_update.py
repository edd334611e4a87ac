"""Hot update under load: rebalances and executor moves must not stall,
silence heartbeats, or cost replays.

Real worker processes on the session's ZooKeeper, zmq on loopback, nimbus scheduling. The spout
is a durable finite source (IdSpout): it counts every failed (replayed) id and writes the count
when it closes, so "no replays" is read from what the spout itself saw.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import (  # the integration tests' helpers (same directory)
    COMPONENTS,
    assigned_slots,
    component_slots,
    logs_tail,
    read_spout,
    stop_topology,
    topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
)

from squall.models.cluster import TopologyStatus
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration

HEARTBEAT_SECS = 1.0
# the tests share a loaded 2-core machine, where a heartbeat (a ZooKeeper write) is sometimes
# more than a second late with nothing wrong in the worker; a gap of 3 intervals is a worker
# whose main thread stalled (nimbus declares a worker dead after 5 s locally)
GAP_LIMIT_SECS = 3 * HEARTBEAT_SECS


@contextmanager
def heartbeat_gaps(cluster: LocalCluster, topo: str) -> Iterator[dict[str, float]]:
    """While the block runs, read every worker's heartbeat from ZooKeeper every 50 ms; yields
    slot -> the longest time between two consecutive heartbeats of that worker (its own
    `time_secs`) while its slot is in the assignment (a worker whose slot left it is stopped, and
    its last heartbeat is written on the way out), filled in when the block ends."""
    gaps: dict[str, float] = {}
    last: dict[str, float] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            try:
                beats = cluster.state.get_worker_heartbeats(topo)
                assignment = cluster.state.get_assignment(topo)
            except Exception:
                continue
            assigned = set(assignment.slots().values()) if assignment else set()
            for slot, beat in beats.items():
                if slot not in assigned:
                    continue
                key = slot.key()
                prev = last.get(key)
                if prev is not None and beat.time_secs > prev:
                    gaps[key] = max(gaps.get(key, 0.0), beat.time_secs - prev)
                last[key] = beat.time_secs

    t = threading.Thread(target=sample, name="heartbeat-sampler", daemon=True)
    t.start()
    try:
        yield gaps
    finally:
        stop.set()
        t.join(5)


def moved_components(before: dict[str, set[object]], after: dict[str, set[object]]) -> set[str]:
    return {c for c in after if before.get(c) != after[c]}


def hot_pipeline(name: str, out: Path, n: int, rate: float, sleep_ms: float) -> Topology:
    """ids -> pass (SlowPassBolt, 2 executors over 4 tasks, shuffle) -> sink (fields on id)."""
    spec = {
        "numWorkers": 2,
        "numAckers": 2,
        "messageTimeoutSecs": 30,
        "maxSpoutPending": 500,
        "spouts": [{"name": "ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1}],
        "bolts": [
            {"name": "pass", "class": "flow_components:SlowPassBolt", "parallelism": 2, "numTasks": 4,
             "config": {"test.sleep_ms": sleep_ms},
             "inputs": [{"component": "ids", "grouping": "shuffle"}]},
            {"name": "sink", "class": f"{COMPONENTS}:SinkBolt", "parallelism": 2, "numTasks": 4,
             "inputs": [{"component": "pass", "grouping": "fields", "fields": ["id"]}]},
        ],
    }
    return topology(name, spec, {"test.count": n, "test.rate": rate, "test.out": str(out)})


def test_rebalances_and_moves_under_load_lose_nothing_and_keep_heartbeats(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    n = 5000
    out = tmp_path / "out"
    topo = hot_pipeline("hot", out, n, rate=300, sleep_ms=2)
    cluster = make_cluster(nodes=2, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 300, 60, "the first acks", cluster)

    def acked_more(k: int) -> None:
        start = totals(cluster, topo.name)["ids"]["acked"]
        wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= start + k, 30,
                 f"{k} more acks", cluster)

    def settle(workers: int) -> None:
        wait_for(lambda: len(assigned_slots(cluster, topo.name)) == workers, 30,
                 f"an assignment on {workers} slots", cluster)
        wait_for(lambda: cluster.nimbus.status(topo.name) is TopologyStatus.ACTIVE, 30, "ACTIVE again", cluster)
        wait_running(cluster, topo)

    moves: list[set[str]] = []
    with heartbeat_gaps(cluster, topo.name) as gaps:
        before = component_slots(cluster, topo)
        # 1. more workers: executors move to the new slot
        cluster.nimbus.rebalance(topo.name, num_workers=3, wait_secs=0)
        settle(3)
        moves.append(moved_components(before, component_slots(cluster, topo)))
        acked_more(300)
        # 2. more executors: every executor of pass and sink is replaced by new ranges
        before = component_slots(cluster, topo)
        cluster.nimbus.rebalance(topo.name, executors={"pass": 4, "sink": 1}, wait_secs=0)
        wait_for(lambda: build_plan(topo, {}, cluster.state.get_storm(topo.name).component_executors)  # type: ignore[union-attr]
                 .component_executors["pass"] == ((4, 4), (5, 5), (6, 6), (7, 7)), 30, "4 pass executors", cluster)
        settle(3)
        moves.append(moved_components(before, component_slots(cluster, topo)))
        acked_more(300)
        # 3. back to 2 workers: the third slot's executors move back
        before = component_slots(cluster, topo)
        cluster.nimbus.rebalance(topo.name, num_workers=2, wait_secs=0)
        settle(2)
        moves.append(moved_components(before, component_slots(cluster, topo)))
        wait_spout_done(out, cluster, 120)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    print("MOVES", moves, "GAPS", gaps, "SPOUT failed", spout["failed"], "opens", spout["opens"])
    assert spout["acked"] == list(range(n))
    assert all(moves), f"a rebalance moved nothing: {moves}"
    assert spout["failed"] == 0, f"{spout['failed']} ids were replayed after moves of {moves}" + logs_tail(cluster)
    assert gaps, "no heartbeats were sampled"
    worst = max(gaps.values())
    assert worst < GAP_LIMIT_SECS, f"heartbeat gaps {gaps} (interval {HEARTBEAT_SECS} s)" + logs_tail(cluster)
    assert not cluster.crashes


def test_removing_busy_executors_does_not_stop_heartbeats(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """Executors removed while they are busy in a slow `execute` (2.5 s a tuple) must not hold
    up the worker's main thread: its heartbeats keep their
    interval and nimbus does not declare it dead, and nothing is replayed."""
    n = 24
    out = tmp_path / "out"
    topo = hot_pipeline("busy", out, n, rate=0.7, sleep_ms=2500)
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["pass"]["executed"] >= 2, 60, "the slow bolt to run", cluster)
    pids = cluster.worker_pids(topo.name)
    with heartbeat_gaps(cluster, topo.name) as gaps:
        cluster.nimbus.rebalance(topo.name, executors={"pass": 4}, wait_secs=0)
        wait_for(lambda: build_plan(topo, {}, cluster.state.get_storm(topo.name).component_executors)  # type: ignore[union-attr]
                 .component_executors["pass"] == ((4, 4), (5, 5), (6, 6), (7, 7)), 30, "4 pass executors", cluster)
        start = totals(cluster, topo.name)["pass"]["executed"]
        wait_for(lambda: totals(cluster, topo.name)["pass"]["executed"] >= start + 3, 60, "the new executors to run", cluster)
        time.sleep(3 * HEARTBEAT_SECS)
    print("GAPS", gaps)
    assert cluster.worker_pids(topo.name) == pids, "the worker was replaced" + logs_tail(cluster)
    assert gaps and max(gaps.values()) < GAP_LIMIT_SECS, f"heartbeat gaps {gaps}" + logs_tail(cluster)
    wait_spout_done(out, cluster, 90)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["failed"] == 0, f"{spout['failed']} ids were replayed" + logs_tail(cluster)
    assert not cluster.crashes


def test_a_spout_executor_replaced_by_a_rebalance_finishes_its_trees(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """A rebalance that splits the spout's executor: the old one stops emitting, keeps taking
    the completions of the trees it started (the acker routes them to it although its tasks now
    belong to new executors), then closes; every id is acked in the end."""
    n = 3000
    out = tmp_path / "out"
    topo = hot_pipeline("spout-move", out, n, rate=150, sleep_ms=1)
    spec = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec["spec"]["spouts"][0]["numTasks"] = 2
    topo = Topology.model_validate(spec)
    cluster = make_cluster(nodes=1, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 300, 60, "the first acks", cluster)
    cluster.nimbus.rebalance(topo.name, executors={"ids": 2}, wait_secs=0)
    wait_for(lambda: cluster.nimbus.status(topo.name) is TopologyStatus.ACTIVE, 30, "ACTIVE again", cluster)
    logs = lambda: "\n".join(cluster.worker_logs().values())  # noqa: E731
    wait_for(lambda: "of ids retired" in logs(), 60, "the old spout executor to retire", cluster)
    wait_for(lambda: len(list(out.glob("spout-*.done"))) == 2, 120, "every id to be acked", cluster)
    stop_topology(cluster, topo.name)
    acked = sorted(i for f in out.glob("spout-*.json") for i in json.loads(f.read_text())["acked"])
    assert acked == list(range(n))
    assert "did not finish in time" not in logs()
    assert not cluster.crashes
