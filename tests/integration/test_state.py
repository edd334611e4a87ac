"""ClusterState against a real ZooKeeper: payload round trips, watches, ephemerals, teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any
from collections.abc import Callable, Iterator

import pytest
from childproc import die_with_this_process

from squall.models.cluster import (
    Assignment,
    Endpoint,
    ErrorInfo,
    ExecutorStats,
    StormBase,
    SupervisorInfo,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.state import MAX_ERRORS, ClusterState, PayloadVersionError, StateError
from squall.zkserver import EmbeddedZooKeeper

pytestmark = pytest.mark.integration

SLOT = WorkerSlot("node-a", 6700)
SLOT2 = WorkerSlot("node-b", 6701)


def storm(name: str = "wc", status: TopologyStatus = TopologyStatus.ACTIVE) -> StormBase:
    return StormBase(
        name=name,
        status=status,
        launch_time_secs=1700000000.5,
        num_workers=2,
        component_executors={"spout": 2, "split": 4},
        topology={"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "spec": {"x": [1, 2]}},
    )


def assignment(**extra: str) -> Assignment:
    slots = {"1-2": SLOT.key(), "3-4": SLOT2.key(), **extra}
    return Assignment(
        executor_slots=slots,
        node_host={"node-a": "10.0.0.1", "node-b": "10.0.0.2"},
        executor_start_time_secs={k: 1700000001.0 for k in slots},
    )


def heartbeat(t: float = 10.0) -> WorkerHeartbeat:
    stats = ExecutorStats(component="split", emitted=5, executed=3, acked=2, latency_ms_p99=1.5)
    return WorkerHeartbeat(time_secs=t, uptime_secs=3.0, executors={"3-4": stats})


def error(i: int, component: str = "split") -> ErrorInfo:
    return ErrorInfo(component=component, task=3, time_secs=float(i), error=f"boom {i}", port=6700)


def supervisor() -> SupervisorInfo:
    return SupervisorInfo(host="10.0.0.1", ports=[6700, 6701], time_secs=5.0, labels={"z": "a"})


class Flag:
    """A zero-argument watch callback that records that it fired."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def fired(self, timeout: float = 5.0) -> bool:
        return self.event.wait(timeout)


@pytest.fixture
def other_state(
    zookeeper: EmbeddedZooKeeper, zk_root: str
) -> Iterator[Callable[..., ClusterState]]:
    """Factory for more ClusterStates (own sessions) on the test's root; closed afterwards."""
    made: list[ClusterState] = []

    def make(**kwargs: float) -> ClusterState:
        state = ClusterState.connect(zookeeper.connect_string, root=zk_root, **kwargs)
        made.append(state)
        return state

    yield make
    for state in made:
        state.close()


# --- round trips and missing nodes ----------------------------------------------------------


def test_round_trip_of_every_payload(cluster_state: ClusterState) -> None:
    cs = cluster_state
    cs.set_storm("wc", storm())
    assert cs.get_storm("wc") == storm()
    assert cs.storm_ids() == ["wc"]

    assert cs.set_assignment("wc", assignment()) is True
    got = cs.get_assignment("wc")
    assert got == assignment()
    assert got is not None and got.slots()[(3, 4)] == SLOT2
    assert cs.assignment_ids() == ["wc"]

    cs.worker_heartbeat("wc", SLOT, heartbeat(10))
    cs.worker_heartbeat("wc", SLOT, heartbeat(11))  # set over create
    cs.worker_heartbeat("wc", SLOT2, heartbeat(12))
    assert cs.get_worker_heartbeats("wc") == {SLOT: heartbeat(11), SLOT2: heartbeat(12)}

    cs.register_endpoint("wc", SLOT, Endpoint(host="127.0.0.1", port=40001))
    assert cs.get_endpoints("wc") == {SLOT: Endpoint(host="127.0.0.1", port=40001)}

    cs.report_error("wc", "split", error(1))
    assert cs.errors("wc", "split") == [error(1)]
    assert cs.last_error("wc", "split") == error(1)

    cs.register_supervisor("node-a", supervisor())
    assert cs.supervisors() == {"node-a": supervisor()}

    # stored as the model's JSON, carrying v
    raw = json.loads(cs.client.get(f"{cs.root}/storms/wc")[0])
    assert raw["v"] == 1 and raw["status"] == "ACTIVE"


def test_missing_reads(cluster_state: ClusterState) -> None:
    cs = cluster_state
    assert cs.get_storm("nope") is None
    assert cs.get_assignment("nope") is None
    assert cs.storm_ids() == [] and cs.assignment_ids() == []
    assert cs.get_worker_heartbeats("nope") == {}
    assert cs.get_endpoints("nope") == {}
    assert cs.errors("nope", "split") == []
    assert cs.last_error("nope", "split") is None
    assert cs.supervisors() == {}
    # removing what is not there is fine
    cs.remove_storm("nope")
    cs.remove_assignment("nope")
    cs.remove_worker_heartbeat("nope", SLOT)
    cs.remove_endpoint("nope", SLOT)
    cs.remove_supervisor("nope")
    cs.teardown_topology("nope")


def test_removes(cluster_state: ClusterState) -> None:
    cs = cluster_state
    cs.set_storm("wc", storm())
    cs.set_assignment("wc", assignment())
    cs.worker_heartbeat("wc", SLOT, heartbeat())
    cs.register_endpoint("wc", SLOT, Endpoint(host="h", port=1))
    cs.register_supervisor("node-a", supervisor())
    cs.remove_storm("wc")
    cs.remove_assignment("wc")
    cs.remove_worker_heartbeat("wc", SLOT)
    cs.remove_endpoint("wc", SLOT)
    cs.remove_supervisor("node-a")
    assert cs.get_storm("wc") is None and cs.get_assignment("wc") is None
    assert cs.get_worker_heartbeats("wc") == {} and cs.get_endpoints("wc") == {}
    assert cs.supervisors() == {}


def test_bad_names_are_refused(cluster_state: ClusterState) -> None:
    with pytest.raises(ValueError):
        cluster_state.set_storm("a/b", storm())
    with pytest.raises(ValueError):
        cluster_state.report_error("wc", "", error(1))


# --- watches --------------------------------------------------------------------------------


def test_watch_fires_on_set(cluster_state: ClusterState) -> None:
    cs = cluster_state
    cs.set_storm("wc", storm())
    flag = Flag()
    assert cs.get_storm("wc", watch=flag) == storm()
    assert not flag.fired(0.3)
    cs.set_storm("wc", storm(status=TopologyStatus.INACTIVE))
    assert flag.fired()
    assert cs.get_storm("wc") == storm(status=TopologyStatus.INACTIVE)
    # one-shot: a later change does not fire it again unless re-registered
    cs.set_storm("wc", storm())
    assert not _fires_again(flag)


def _fires_again(flag: Flag) -> bool:
    flag.event.clear()
    return flag.fired(0.5)


def test_watch_fires_on_create(cluster_state: ClusterState) -> None:
    cs = cluster_state
    flag = Flag()
    assert cs.get_assignment("wc", watch=flag) is None
    cs.set_assignment("wc", assignment())
    assert flag.fired()
    assert flag.count == 1


def test_watch_fires_on_delete(cluster_state: ClusterState) -> None:
    cs = cluster_state
    cs.set_storm("wc", storm())
    flag = Flag()
    cs.get_storm("wc", watch=flag)
    cs.remove_storm("wc")
    assert flag.fired()


def test_children_watches(cluster_state: ClusterState) -> None:
    cs = cluster_state
    storms, assignments, supervisors, endpoints = Flag(), Flag(), Flag(), Flag()
    assert cs.storm_ids(watch=storms) == []
    assert cs.assignment_ids(watch=assignments) == []
    assert cs.supervisors(watch=supervisors) == {}
    # the topology's endpoints dir does not exist yet: fires on its creation
    assert cs.get_endpoints("wc", watch=endpoints) == {}
    cs.set_storm("wc", storm())
    cs.set_assignment("wc", assignment())
    cs.register_supervisor("node-a", supervisor())
    cs.register_endpoint("wc", SLOT, Endpoint(host="h", port=1))
    for flag in (storms, assignments, supervisors, endpoints):
        assert flag.fired()
    # and on an added endpoint once the dir exists
    again = Flag()
    assert set(cs.get_endpoints("wc", watch=again)) == {SLOT}
    cs.register_endpoint("wc", SLOT2, Endpoint(host="h", port=2))
    assert again.fired()


def test_assignment_write_is_skipped_when_unchanged(cluster_state: ClusterState) -> None:
    cs = cluster_state
    assert cs.set_assignment("wc", assignment()) is True
    version = cs.client.exists(f"{cs.root}/assignments/wc").version
    flag = Flag()
    cs.get_assignment("wc", watch=flag)
    # equal, even with the dicts built in another order
    reordered = Assignment(
        executor_slots=dict(reversed(list(assignment().executor_slots.items()))),
        node_host=assignment().node_host,
        executor_start_time_secs=assignment().executor_start_time_secs,
    )
    assert cs.set_assignment("wc", reordered) is False
    assert cs.set_assignment("wc", assignment()) is False
    assert cs.client.exists(f"{cs.root}/assignments/wc").version == version
    assert not flag.fired(0.5)
    assert cs.set_assignment("wc", assignment(**{"5-6": SLOT.key()})) is True
    assert flag.fired()
    assert cs.client.exists(f"{cs.root}/assignments/wc").version == version + 1


# --- errors ---------------------------------------------------------------------------------


def test_errors_keep_the_newest_ten(cluster_state: ClusterState) -> None:
    cs = cluster_state
    for i in range(MAX_ERRORS + 3):
        cs.report_error("wc", "split", error(i))
    cs.report_error("wc", "count", error(100, "count"))
    kept = cs.errors("wc", "split")
    assert [e.time_secs for e in kept] == [float(i) for i in range(3, MAX_ERRORS + 3)]
    assert cs.last_error("wc", "split") == error(MAX_ERRORS + 2)
    assert cs.errors("wc", "count") == [error(100, "count")]
    assert len(cs.client.get_children(f"{cs.root}/errors/wc/split")) == MAX_ERRORS


# --- ephemerals -----------------------------------------------------------------------------


def test_endpoint_vanishes_when_its_session_closes(
    cluster_state: ClusterState, other_state: Callable[..., ClusterState]
) -> None:
    worker = other_state()
    worker.register_endpoint("wc", SLOT, Endpoint(host="127.0.0.1", port=40001))
    worker.register_supervisor("node-a", supervisor())
    endpoints, supervisors = Flag(), Flag()
    assert cluster_state.get_endpoints("wc", watch=endpoints) == {
        SLOT: Endpoint(host="127.0.0.1", port=40001)
    }
    assert set(cluster_state.supervisors(watch=supervisors)) == {"node-a"}
    worker.close()
    assert endpoints.fired() and supervisors.fired()
    assert cluster_state.get_endpoints("wc") == {}
    assert cluster_state.supervisors() == {}


def test_endpoint_registration_replaces_a_stale_one(
    cluster_state: ClusterState, other_state: Callable[..., ClusterState]
) -> None:
    old, new = other_state(), other_state()
    old.register_endpoint("wc", SLOT, Endpoint(host="h", port=1))
    flag = Flag()
    cluster_state.get_endpoints("wc", watch=flag)
    new.register_endpoint("wc", SLOT, Endpoint(host="h", port=2))
    assert flag.fired()
    stat = cluster_state.client.exists(f"{cluster_state.root}/endpoints/wc/{SLOT.key()}")
    assert stat.ephemeralOwner == new.client.client_id[0]
    # the old session ending no longer removes it
    old.close()
    assert cluster_state.get_endpoints("wc") == {SLOT: Endpoint(host="h", port=2)}
    # re-registering the same data from the owning session is a no-op
    new.register_endpoint("wc", SLOT, Endpoint(host="h", port=2))
    stat2 = cluster_state.client.exists(f"{cluster_state.root}/endpoints/wc/{SLOT.key()}")
    assert stat2.czxid == stat.czxid


def test_client_not_owned_is_left_open(cluster_state: ClusterState) -> None:
    borrowed = ClusterState(cluster_state.client, root=cluster_state.root)
    borrowed.close()
    assert cluster_state.client.connected
    assert cluster_state.storm_ids() == []


# --- teardown -------------------------------------------------------------------------------


def _populate(cs: ClusterState, topo: str) -> None:
    cs.set_storm(topo, storm(topo))
    cs.set_assignment(topo, assignment())
    cs.worker_heartbeat(topo, SLOT, heartbeat())
    cs.register_endpoint(topo, SLOT, Endpoint(host="h", port=1))
    cs.report_error(topo, "split", error(1))


def test_teardown_removes_one_topology_only(cluster_state: ClusterState) -> None:
    cs = cluster_state
    _populate(cs, "wc")
    _populate(cs, "other")
    cs.register_supervisor("node-a", supervisor())
    assert cs.topologies_with_state() == {"wc", "other"}
    cs.teardown_topology("wc")
    for sub in ("storms", "assignments", "workerbeats", "endpoints", "errors"):
        assert cs.client.exists(f"{cs.root}/{sub}/wc") is None, sub
        assert cs.client.exists(f"{cs.root}/{sub}/other") is not None, sub
    assert cs.get_storm("other") == storm("other")
    assert cs.get_assignment("other") == assignment()
    assert cs.get_worker_heartbeats("other") == {SLOT: heartbeat()}
    assert cs.get_endpoints("other") == {SLOT: Endpoint(host="h", port=1)}
    assert cs.errors("other", "split") == [error(1)]
    assert cs.supervisors() == {"node-a": supervisor()}
    assert cs.topologies_with_state() == {"other"}
    cs.teardown_topology("wc")  # again: nothing left, no error


# --- versions and garbage -------------------------------------------------------------------


def test_unknown_payload_version_is_a_clear_error(cluster_state: ClusterState) -> None:
    cs = cluster_state
    future = json.loads(storm().model_dump_json()) | {"v": 2}
    cs.client.create(f"{cs.root}/storms/wc", json.dumps(future).encode())
    with pytest.raises(PayloadVersionError, match=r"storms/wc: payload version 2 is not supported"):
        cs.get_storm("wc")
    cs.client.create(f"{cs.root}/supervisors/node-a", b'{"host": "h"}')  # no v at all
    with pytest.raises(PayloadVersionError, match="None"):
        cs.supervisors()
    # nimbus owns assignments: an unreadable one is overwritten
    cs.client.create(f"{cs.root}/assignments/wc", b'{"v": 99}')
    assert cs.set_assignment("wc", assignment()) is True
    assert cs.get_assignment("wc") == assignment()


def test_garbage_payload_is_a_state_error(cluster_state: ClusterState) -> None:
    cs = cluster_state
    cs.client.create(f"{cs.root}/storms/a", b"not json")
    cs.client.create(f"{cs.root}/storms/b", b'{"v": 1, "name": "b"}')
    with pytest.raises(StateError, match="not a JSON payload"):
        cs.get_storm("a")
    with pytest.raises(StateError, match="invalid StormBase"):
        cs.get_storm("b")


def test_connect_failure_is_a_state_error() -> None:
    with pytest.raises(StateError, match="cannot connect"):
        ClusterState.connect("127.0.0.1:1", timeout=1.0)


def test_endpoint_vanishes_when_a_frozen_workers_session_expires(
    cluster_state: ClusterState, zookeeper: EmbeddedZooKeeper
) -> None:
    """A worker that stops answering (SIGSTOP: no pings) loses its ephemerals after its short
    session timeout (the shortest the test server allows)."""
    min_ms = zookeeper.min_session_timeout_ms or 2 * zookeeper.tick_time_ms
    script = textwrap.dedent(
        f"""
        import time
        from squall.models.cluster import Endpoint, WorkerSlot
        from squall.state import ClusterState
        cs = ClusterState.connect({zookeeper.connect_string!r}, root={cluster_state.root!r},
                                  session_timeout={min_ms / 1000})
        cs.register_endpoint("wc", WorkerSlot("node-a", 6700), Endpoint(host="h", port=1))
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    worker = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, preexec_fn=die_with_this_process()
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        flag = Flag()
        assert set(cluster_state.get_endpoints("wc", watch=flag)) == {SLOT}
        started = time.monotonic()
        worker.send_signal(signal.SIGSTOP)
        assert flag.fired(timeout=10)
        assert cluster_state.get_endpoints("wc") == {}
        assert time.monotonic() - started < min_ms / 1000 + 4
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()


def test_a_worker_removes_only_its_own_endpoint(cluster_state: ClusterState, zookeeper: Any) -> None:
    """A replacement worker for the slot (a new pod started while the old one terminates)
    registers its endpoint over the old one's; the old worker stopping then removes nothing."""
    cs = cluster_state
    old_ep, new_ep = Endpoint(host="10.0.0.1", port=6700), Endpoint(host="10.0.0.2", port=6700)
    with ClusterState.connect(zookeeper.connect_string, root=cs.root) as old, \
            ClusterState.connect(zookeeper.connect_string, root=cs.root) as new:
        old.register_endpoint("wc", SLOT, old_ep)
        assert old.owns_endpoint("wc", SLOT, old_ep)
        new.register_endpoint("wc", SLOT, new_ep)
        assert not old.owns_endpoint("wc", SLOT, old_ep) and new.owns_endpoint("wc", SLOT, new_ep)
        assert old.remove_own_endpoint("wc", SLOT) is False
        assert cs.get_endpoints("wc") == {SLOT: new_ep}
        assert new.remove_own_endpoint("wc", SLOT) is True
        assert cs.get_endpoints("wc") == {} and new.remove_own_endpoint("wc", SLOT) is False
