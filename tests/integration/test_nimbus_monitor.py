"""Nimbus's monitor round on a real ZooKeeper with an injected clock (no worker processes).

The tests write what workers and supervisors would (heartbeats, `supervisors/<node>`) straight
into ZooKeeper and drive `Nimbus.tick()` on fake time, so a skewed worker clock, a kill wait or a
ZooKeeper outage is checked deterministically, without sleeps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from squall.models.cluster import ExecutorStats, SupervisorInfo, WorkerHeartbeat, WorkerSlot, executor_key
from squall.models.v1alpha1 import Topology
from squall.state import ClusterState
from squall.validation import parse_topology
from squall.zkserver import EmbeddedZooKeeper, java_available
from squall_operator.monitor import LOCAL_TIMEOUTS
from squall_operator.nimbus import Nimbus

from helpers import FakeClock

pytestmark = pytest.mark.integration

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "topology.yaml"


def one_worker_topology(name: str) -> Topology:
    import yaml

    data = yaml.safe_load(WORDCOUNT.read_text())
    data["metadata"]["name"] = name
    data["spec"]["numWorkers"] = 1
    return parse_topology(data, source=name)


def slots_of(state: ClusterState, topo: str) -> set[WorkerSlot]:
    assignment = state.get_assignment(topo)
    return set(assignment.slots().values()) if assignment is not None else set()


def beat(state: ClusterState, topo: str, slot: WorkerSlot, worker_time: float) -> None:
    """What the worker on `slot` writes: every executor assigned to it, at its own clock."""
    assignment = state.get_assignment(topo)
    assert assignment is not None
    execs = {executor_key(e): ExecutorStats(component="x") for e in assignment.executors_of(slot)}
    state.worker_heartbeat(topo, slot, WorkerHeartbeat(time_secs=worker_time, uptime_secs=1.0, executors=execs))


@pytest.fixture
def nimbus(cluster_state: ClusterState) -> Nimbus:
    return Nimbus(cluster_state, clock=FakeClock(), timeouts=LOCAL_TIMEOUTS)


def register(state: ClusterState, node: str, ports: list[int]) -> None:
    state.register_supervisor(node, SupervisorInfo(host="127.0.0.1", ports=ports, time_secs=0.0))


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_skewed_worker_clock_is_neither_dead_nor_immortal(nimbus: Nimbus, cluster_state: ClusterState,
                                                          skew: float) -> None:
    """Freshness is judged by when nimbus saw the heartbeat change, not by the worker's clock."""
    clock = nimbus.clock
    assert isinstance(clock, FakeClock)
    register(cluster_state, "node1", [6700, 6701])
    nimbus.submit(one_worker_topology("skew"))
    [slot] = slots_of(cluster_state, "skew")
    # the worker beats every second, its clock `skew` seconds off nimbus's
    for _ in range(30):
        clock.now += 1.0
        beat(cluster_state, "skew", slot, clock.now + skew)
        nimbus.tick()
        assert slots_of(cluster_state, "skew") == {slot}, f"beating worker declared dead at skew {skew}"
    # it stops beating: dead after the task timeout, whatever time its last beat claimed
    clock.now += LOCAL_TIMEOUTS.task_timeout + 1.0
    nimbus.tick()
    assert slots_of(cluster_state, "skew") not in ({slot}, set()), "a silent worker stayed alive"


def test_killed_topology_keeps_its_slots_during_the_kill_wait(nimbus: Nimbus,
                                                              cluster_state: ClusterState) -> None:
    """One slot; kill A (30 s wait) and submit B at once: B waits for A, whose worker drains."""
    clock = nimbus.clock
    assert isinstance(clock, FakeClock)
    register(cluster_state, "node1", [6700])
    nimbus.submit(one_worker_topology("a"))
    [slot] = slots_of(cluster_state, "a")
    nimbus.kill("a", 30.0)
    nimbus.submit(one_worker_topology("b"))
    for _ in range(29):
        clock.now += 1.0
        beat(cluster_state, "a", slot, clock.now)  # A's worker drains its in-flight tuples
        nimbus.tick()
        assert slots_of(cluster_state, "b") == set(), "B got a slot whose worker is still draining"
    clock.now += 2.0
    nimbus.tick()  # the kill wait is over: A is removed and B gets the slot
    assert cluster_state.get_storm("a") is None
    nimbus.tick()
    assert slots_of(cluster_state, "b") == {slot}


@pytest.mark.skipif(not java_available(), reason="no java on PATH")
def test_nothing_is_declared_dead_for_an_outage_nimbus_could_not_observe(tmp_path: Path) -> None:
    """ZooKeeper away for 30 s (fake time; the real server stopped and started
    again with its data): after it is back, workers get a fresh heartbeat window, plus the time
    their clients need to reconnect (`reconnect_grace`)."""
    zk = EmbeddedZooKeeper(tick_time_ms=500, min_session_timeout_ms=1000, max_session_timeout_ms=10_000)
    zk.start()
    state = ClusterState.connect(zk.connect_string, root="/outage")
    try:
        clock = FakeClock()
        nimbus = Nimbus(state, clock=clock, timeouts=LOCAL_TIMEOUTS)
        register(state, "node1", [6700, 6701])
        nimbus.submit(one_worker_topology("wc"))
        [slot] = slots_of(state, "wc")
        for _ in range(3):
            clock.now += 1.0
            beat(state, "wc", slot, clock.now)
            nimbus.tick()
        zk.stop(keep_data=True)
        clock.now += 30.0  # nimbus saw nothing for 30 s
        zk.start()
        assert state.wait_ready(30)
        clock.now += 1.0
        nimbus.tick()  # the workers have not written since: their staleness was not observable
        assert slots_of(state, "wc") == {slot}, f"declared dead after the outage: {nimbus.events}"
        clock.now += LOCAL_TIMEOUTS.task_timeout + 1.0
        nimbus.tick()  # a worker's client may still be reconnecting (back-off, a new session)
        assert slots_of(state, "wc") == {slot}, f"declared dead while reconnecting: {nimbus.events}"
        clock.now += LOCAL_TIMEOUTS.reconnect_grace
        nimbus.tick()  # ...but a worker that stays silent past that is dead
        assert slots_of(state, "wc") not in ({slot}, set())
    finally:
        state.close()
        zk.stop()
