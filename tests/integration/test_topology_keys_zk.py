"""Topologies keyed by namespace and name (squall.topology_keys) on a real ZooKeeper: two
namespaces' topologies of one name side by side, and a topology an operator older than
namespaced keys stored under its bare name, kept under it by the new key decision."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from squall.models.cluster import (
    Assignment,
    Endpoint,
    ErrorInfo,
    ExecutorStats,
    LogConfig,
    SupervisorInfo,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
    executor_key,
)
from squall.models.v1alpha1 import Topology
from squall.state import ClusterState, topology_key
from squall.validation import parse_topology
from squall_operator import reconcile
from squall_operator.monitor import LOCAL_TIMEOUTS
from squall_operator.nimbus import Nimbus, initial_storm_base
from squall_operator.resources import Resource, topology_resource

from helpers import FakeClock

pytestmark = pytest.mark.integration

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "topology.yaml"


def resource(namespace: str, uid: str) -> Resource:
    """A Topology resource `wordcount` of `namespace`, one worker, validated as the operator does."""
    data = yaml.safe_load(WORDCOUNT.read_text())
    data["spec"]["numWorkers"] = 1
    res = Resource(namespace, "wordcount", uid, 1, data["spec"])
    res.topology = parse_topology(topology_resource(res))
    return res


def beat_all(state: ClusterState, topo: str) -> None:
    assignment = state.get_assignment(topo)
    assert assignment is not None
    for slot in set(assignment.slots().values()):
        execs = {executor_key(e): ExecutorStats(component="x") for e in assignment.executors_of(slot)}
        state.worker_heartbeat(topo, slot, WorkerHeartbeat(time_secs=1.0, uptime_secs=1.0, executors=execs))


def test_two_namespaces_keys_hold_their_own_state_and_one_teardown_leaves_the_other(
        cluster_state: ClusterState) -> None:
    keys = [topology_key("wordcount", "team-a"), topology_key("wordcount", "team-b"), "wordcount"]
    slot = WorkerSlot("node-a", 6700)
    for i, key in enumerate(keys):
        topology = Topology.model_validate(yaml.safe_load(WORDCOUNT.read_text()))
        cluster_state.set_storm(key, initial_storm_base(topology, float(i)))
        cluster_state.set_assignment(key, Assignment(executor_slots={"1-1": slot.key()}))
        cluster_state.worker_heartbeat(key, slot, WorkerHeartbeat(time_secs=float(i), uptime_secs=1.0))
        cluster_state.register_endpoint(key, slot, Endpoint(host="127.0.0.1", port=6700 + i))
        cluster_state.report_error(key, "split", ErrorInfo(component="split", task=1, error=f"boom {i}", time_secs=float(i)))
        cluster_state.set_log_config(key, LogConfig())
    assert sorted(cluster_state.storm_ids()) == sorted(keys)
    for i, key in enumerate(keys):
        base = cluster_state.get_storm(key)
        assert base is not None and base.launch_time_secs == float(i)
        assert cluster_state.get_endpoints(key)[slot].port == 6700 + i
        last = cluster_state.last_error(key, "split")
        assert last is not None and last.error == f"boom {i}"
    cluster_state.teardown_topology(keys[1])
    assert cluster_state.get_storm(keys[1]) is None and keys[1] not in cluster_state.topologies_with_state()
    for key in (keys[0], keys[2]):
        assert cluster_state.get_storm(key) is not None
        assert cluster_state.get_worker_heartbeats(key)[slot].uptime_secs == 1.0
        assert cluster_state.get_assignment(key) is not None


def test_a_topology_stored_under_its_bare_name_keeps_it_beside_a_namespaced_one(
        cluster_state: ClusterState) -> None:
    for node in ("node-a", "node-b"):
        cluster_state.register_supervisor(node, SupervisorInfo(host="127.0.0.1", ports=[6700, 6701], time_secs=0.0))
    mine = resource("team-a", "uid-a")
    assert mine.topology is not None
    # what an operator older than namespaced keys did: nimbus's submit under the name
    old = Nimbus(cluster_state, clock=FakeClock(), timeouts=LOCAL_TIMEOUTS)
    old.submit(mine.topology)
    beat_all(cluster_state, "wordcount")
    stored, assignment = cluster_state.get_storm("wordcount"), cluster_state.get_assignment("wordcount")
    assert stored is not None and assignment is not None

    # the new operator, started on that ZooKeeper
    nimbus = Nimbus(cluster_state, clock=FakeClock(), timeouts=LOCAL_TIMEOUTS)
    nimbus.startup()
    assert reconcile.storm_key(mine, cluster_state.get_storm(mine.name)) == "wordcount"
    theirs = resource("team-b", "uid-b")
    assert theirs.topology is not None
    key = reconcile.storm_key(theirs, cluster_state.get_storm(theirs.name))
    assert key == "team-b~wordcount"
    nimbus.submit(theirs.topology, key)
    beat_all(cluster_state, key)
    nimbus.tick()

    # the old key's topology is untouched: same launch, same slots, still active
    assert cluster_state.get_storm("wordcount") == stored
    assert cluster_state.get_assignment("wordcount") == assignment
    both = cluster_state.get_storm(key)
    assert both is not None and both.status is TopologyStatus.ACTIVE
    assert both.topology["metadata"]["namespace"] == "team-b"
    theirs_slots = set((cluster_state.get_assignment(key) or Assignment()).slots().values())
    assert theirs_slots and not theirs_slots & set(assignment.slots().values())
    # a resource re-created under the name (another uid) does not take the old one's key
    assert reconcile.storm_key(resource("team-a", "uid-new"), cluster_state.get_storm("wordcount")) \
        == "team-a~wordcount"


def test_a_topology_named_zookeeper_is_submitted_and_read_back(cluster_state: ClusterState) -> None:
    """`squall validate` accepts the name `zookeeper` (a DNS label); `squall run` once died on it
    with a traceback because the state layer refused it as ZooKeeper's own node, which it is only
    at the root. Bare (the local cluster) and namespaced (the operator) keys both work."""
    cluster_state.register_supervisor("node-a", SupervisorInfo(host="127.0.0.1", ports=[6700, 6701], time_secs=0.0))
    data = yaml.safe_load(WORDCOUNT.read_text())
    data["metadata"]["name"] = "zookeeper"
    data["spec"]["numWorkers"] = 1
    topology = Topology.model_validate(data)
    nimbus = Nimbus(cluster_state, clock=FakeClock(), timeouts=LOCAL_TIMEOUTS)
    nimbus.startup()
    for key in ("zookeeper", topology_key("zookeeper", "team-a")):
        nimbus.submit(topology, key)
        base = cluster_state.get_storm(key)
        assert base is not None and base.topology["metadata"]["name"] == "zookeeper"
        assert cluster_state.get_assignment(key) is not None
    assert {"zookeeper", "team-a~zookeeper"} <= set(cluster_state.storm_ids())
    cluster_state.teardown_topology("zookeeper")
    assert cluster_state.get_storm("zookeeper") is None
    assert cluster_state.get_storm("team-a~zookeeper") is not None
