"""KubeNimbus's reconcile rounds and the Lease elector, on fake time with an in-memory cluster
state and a fake Kubernetes API (no ZooKeeper, no API server)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from squall.models.cluster import (
    Assignment,
    ErrorInfo,
    StormBase,
    SupervisorInfo,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.state import StateError
from squall.worker.security import CurveKeys
from squall_operator import health, kube_api, pods, resources
from squall_operator.health import Health
from squall_operator.kube_api import ApiConflict
from squall_operator.kube_nimbus import KubeNimbus, OperatorConfig
from squall_operator.lease import LeaseElector

pytestmark = pytest.mark.unit


class FakeState:
    """The part of KubeClusterState nimbus uses, in memory."""

    def __init__(self) -> None:
        self.storms: dict[str, StormBase] = {}
        self.assignments: dict[str, Assignment] = {}
        self.beats: dict[str, dict[WorkerSlot, WorkerHeartbeat]] = {}
        self.log_configs: dict[str, Any] = {}
        self._nodes: pods.NodeSlots | None = None
        # ClusterState's session surface: `ready` and the listeners called when ZooKeeper is back
        self.ready = True
        self.session_listeners: list[Any] = []
        # no ZooKeeper credentials: nimbus's start-up has no ACLs to close
        self.credentials = None

    def add_session_listener(self, listener: Any) -> None:
        self.session_listeners.append(listener)

    # KubeClusterState
    def set_nodes(self, nodes: pods.NodeSlots) -> None:
        self._nodes = nodes

    @property
    def nodes(self) -> pods.NodeSlots | None:
        return self._nodes

    def supervisors(self, watch: Any = None) -> dict[str, SupervisorInfo]:
        if self._nodes is None:
            raise StateError("no nodes")
        return {n: SupervisorInfo(host=h, ports=list(p), time_secs=0) for n, (h, p) in self._nodes.slots.items()}

    # ClusterState
    def set_storm(self, topo: str, base: StormBase) -> None:
        self.storms[topo] = base

    def get_storm(self, topo: str, watch: Any = None) -> StormBase | None:
        return self.storms.get(topo)

    def storm_ids(self, watch: Any = None) -> list[str]:
        return sorted(self.storms)

    def set_assignment(self, topo: str, assignment: Assignment) -> bool:
        if self.assignments.get(topo) == assignment:
            return False
        self.assignments[topo] = assignment
        return True

    def get_assignment(self, topo: str, watch: Any = None) -> Assignment | None:
        return self.assignments.get(topo)

    def read_assignment(self, topo: str, watch: Any = None) -> tuple[Assignment | None, bool]:
        return self.assignments.get(topo), True

    def get_worker_heartbeats(self, topo: str) -> dict[WorkerSlot, WorkerHeartbeat]:
        return dict(self.beats.get(topo, {}))

    def last_error(self, topo: str, component: str) -> ErrorInfo | None:
        return None

    def topologies_with_state(self) -> set[str]:
        return set(self.storms) | set(self.assignments) | set(self.beats)

    def set_log_config(self, topo: str, config: Any) -> None:
        self.log_configs[topo] = config

    def get_log_config(self, topo: str, watch: Any = None) -> Any:
        return self.log_configs.get(topo)

    def teardown_topology(self, topo: str) -> None:
        self.log_configs.pop(topo, None)
        self.storms.pop(topo, None)
        self.assignments.pop(topo, None)
        self.beats.pop(topo, None)


def _node(name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}],
                   "addresses": [{"type": "InternalIP", "address": f"10.0.0.{name[-1]}"}]},
    }


class FakeApi:
    def __init__(self) -> None:
        self.nodes = [_node("n1"), _node("n2"), _node("n3")]
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.budgets: dict[tuple[str, str], dict[str, Any]] = {}
        self.budget_calls: list[tuple[str, str]] = []
        self.statuses: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.deleted: list[tuple[str, int | None]] = []
        self.topologies: list[dict[str, Any]] = []
        self.lease: dict[str, Any] | None = None
        self.lease_version = 0

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.nodes)

    def list_pods(self, namespace: str, selector: Any) -> list[dict[str, Any]]:
        return [p for (ns, _), p in sorted(self.pods.items()) if ns == namespace
                and all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.pods:
            raise ApiConflict("exists")
        body = {**body, "status": {"phase": "Pending"}}
        self.pods[key] = body

    def create_secret(self, namespace: str, body: dict[str, Any]) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.secrets:
            raise ApiConflict("exists")
        self.secrets[key] = body

    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.policies:
            raise ApiConflict("exists")
        self.policies[key] = body

    def apply_disruption_budget(self, namespace: str, body: dict[str, Any]) -> None:
        self.budget_calls.append(("apply", body["metadata"]["name"]))
        self.budgets[(namespace, body["metadata"]["name"])] = body

    def delete_disruption_budget(self, namespace: str, name: str) -> None:
        self.budget_calls.append(("delete", name))
        self.budgets.pop((namespace, name), None)

    def delete_pod(self, namespace: str, name: str, grace_secs: int | None = None) -> None:
        self.deleted.append((name, grace_secs))
        self.pods.pop((namespace, name), None)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.statuses[(namespace, name)] = status

    def list_topologies(self, namespace: str | None) -> list[dict[str, Any]]:
        return list(self.topologies)

    def post_event(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        self.events.append((name, reason, message))

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.lease is None else {**self.lease, "metadata": {
            **self.lease["metadata"], "resourceVersion": str(self.lease_version)}}

    def create_lease(self, namespace: str, body: dict[str, Any]) -> None:
        if self.lease is not None:
            raise ApiConflict("exists")
        self.lease = body
        self.lease_version += 1

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        if body["metadata"].get("resourceVersion") != str(self.lease_version):
            raise ApiConflict("changed")
        self.lease = body
        self.lease_version += 1

    # helpers
    def ready_all(self) -> None:
        for p in self.pods.values():
            p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def reasons(self, name: str) -> list[str]:
        return [r for n, r, _ in self.events if n == name]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


SPEC = {
    "numWorkers": 2,
    "messageTimeoutSecs": 10,
    "rebalanceWaitSecs": 5,
    "killWaitSecs": 7,
    "spouts": [{"name": "s", "class": "m:S"}],
    "bolts": [{"name": "b", "class": "m:B", "parallelism": 2, "numTasks": 4, "inputs": [{"component": "s"}]}],
}


def _make(state: FakeState | None = None, api: FakeApi | None = None, clock: Clock | None = None) -> tuple[KubeNimbus, FakeState, FakeApi, Clock]:
    state = state or FakeState()
    api = api or FakeApi()
    clock = clock or Clock()
    config = OperatorConfig(
        zookeeper="zk:2181",
        worker=pods.WorkerPodConfig(image="squall-worker:t", zookeeper="zk:2181"),
        slots=pods.SlotConfig(default_slots=2),
        task_timeout_secs=5,
        launch_timeout_secs=30,
    )
    nimbus = KubeNimbus(state, api, config, clock=clock)  # type: ignore[arg-type]
    nimbus.refresh_nodes()
    nimbus.startup()
    return nimbus, state, api, clock


def _beat_all(state: FakeState, clock: Clock, topo: str, pending: int = 0) -> None:
    a = state.assignments[topo]
    beats: dict[WorkerSlot, WorkerHeartbeat] = {}
    for ex, slot in a.executor_slots.items():
        s = WorkerSlot.from_key(slot)
        beat = beats.setdefault(s, WorkerHeartbeat(time_secs=clock.now, uptime_secs=1))
        beat.executors[ex] = __import__("squall.models.cluster", fromlist=["ExecutorStats"]).ExecutorStats(
            component="x", pending=pending)
    state.beats[topo] = beats


def _status(api: FakeApi, name: str = "wc") -> dict[str, Any]:
    return api.statuses[("ns", name)]


def _cond(st: dict[str, Any], t: str) -> dict[str, Any]:
    return next(c for c in st["conditions"] if c["type"] == t)


def test_submit_pods_and_status() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    base = state.storms["ns~wc"]
    assert base.status is TopologyStatus.ACTIVE
    assert {k: base.topology["metadata"][k] for k in ("name", "namespace", "uid")} == {"name": "wc", "namespace": "ns", "uid": "uid-1"}
    slots = set(state.assignments["ns~wc"].slots().values())
    assert len(slots) == 2 and len({s.node for s in slots}) == 2
    assert {p["metadata"]["annotations"][pods.ANNOTATION_SLOT] for p in api.pods.values()} == {s.key() for s in slots}
    assert _status(api)["phase"] == "Pending" and _status(api)["workers"] == "0/2"
    assert "Submitted" in api.reasons("wc") and "Assigned" in api.reasons("wc")
    api.ready_all()
    clock.now += 1
    nimbus.round()
    st = _status(api)
    assert st["phase"] == "Running" and st["workers"] == "2/2" and st["observedGeneration"] == 1


def test_deactivate_activate_and_spec_changes() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "active": False})
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.INACTIVE
    assert "Deactivated" in api.reasons("wc") and _status(api)["observedGeneration"] == 2
    nimbus.register("ns", "wc", "uid-1", 3, {**SPEC, "active": True, "messageTimeoutSecs": 99})
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    assert "Activated" in api.reasons("wc") and "ConfigUpdated" in api.reasons("wc")
    assert state.storms["ns~wc"].topology["spec"]["messageTimeoutSecs"] == 99
    # a graph change is an upgrade: spouts deactivated (phase Upgrading), the new graph launched
    # once the spouts' heartbeats say nothing is pending, every worker pod of the old launch
    # deleted and made again
    bolts = [{**SPEC["bolts"][0], "class": "m:B2"}]  # type: ignore[index, dict-item]
    api.ready_all()
    launch = state.storms["ns~wc"].launch_time_secs
    old_pods = set(api.pods)
    nimbus.register("ns", "wc", "uid-1", 4, {**SPEC, "messageTimeoutSecs": 99, "bolts": bolts})
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING and _status(api)["phase"] == "Upgrading"
    assert api.reasons("wc").count("Upgrading") == 1 and "SpecChangeRefused" not in api.reasons("wc")
    assert state.storms["ns~wc"].topology["spec"]["bolts"][0]["class"] == "m:B"
    _beat_all(state, clock, "ns~wc", pending=3)
    clock.now += 2
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING  # still pending
    clock.now += 1
    _beat_all(state, clock, "ns~wc", pending=0)
    nimbus.round()
    base = state.storms["ns~wc"]
    assert base.status is TopologyStatus.ACTIVE and base.launch_time_secs > launch and base.upgrade_topology is None
    assert base.topology["spec"]["bolts"][0]["class"] == "m:B2"
    assert api.reasons("wc").count("Upgraded") == 1
    assert old_pods <= {("ns", name) for name, _grace in api.deleted} and set(api.pods) - old_pods


def test_log_levels_of_the_annotation_reach_zookeeper_once_the_topology_is_stored() -> None:
    nimbus, state, api, clock = _make()
    annotation = {resources.LOG_LEVELS_ANNOTATION: '{"ROOT": {"level": "DEBUG", "expires": 1e12}}'}
    nimbus.register("ns", "wc", "uid-1", 1, SPEC, log_levels=resources.log_levels_from_annotations(annotation))
    nimbus.round()
    assert {k: v.model_dump() for k, v in state.log_configs["ns~wc"].loggers.items()} == {
        "ROOT": {"level": "DEBUG", "expires": 1e12}}
    state.log_configs.clear()
    nimbus.round()
    assert state.log_configs == {}, "written again although nothing changed"
    # `-r ROOT`: the annotation goes; the workers are told (an empty config)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC, log_levels=resources.log_levels_from_annotations({}))
    nimbus.round()
    assert state.log_configs["ns~wc"].loggers == {}
    # a hand-edited annotation that cannot be used: one Warning, and no dynamic levels
    bad = {resources.LOG_LEVELS_ANNOTATION: '{"ROOT": {"level": "LOUD"}}'}
    for _ in range(2):
        nimbus.register("ns", "wc", "uid-1", 1, SPEC, log_levels=resources.log_levels_from_annotations(bad))
        nimbus.round()
    assert api.reasons("wc").count("LogLevelsRefused") == 1


def test_rebalance_phases_and_restart_in_the_middle() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "numWorkers": 3})
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    assert _status(api)["phase"] == "Rebalancing"
    assert _cond(_status(api), "Rebalancing")["reason"] == "Waiting"
    assert "RebalanceRequested" in api.reasons("wc")
    # the operator dies; a new one on the same ZooKeeper state resumes the countdown
    nimbus2, _, _, _ = _make(state, api, clock)
    nimbus2.register("ns", "wc", "uid-1", 2, {**SPEC, "numWorkers": 3}, status=_status(api))
    clock.now += 2
    nimbus2.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    clock.now += 4
    _beat_all(state, clock, "ns~wc")
    nimbus2.round()
    base = state.storms["ns~wc"]
    assert base.status is TopologyStatus.ACTIVE and base.num_workers == 3
    assert len(set(state.assignments["ns~wc"].slots().values())) == 3
    assert len(api.pods) == 3
    assert _cond(_status(api), "Rebalancing")["reason"] == "Reassigned"
    api.ready_all()
    clock.now += 1
    nimbus2.round()
    assert _cond(_status(api), "Rebalancing")["reason"] == "Completed"
    assert _status(api)["phase"] == "Running" and "RebalanceCompleted" in api.reasons("wc")


def test_rebalance_beyond_tasks_is_rejected_once() -> None:
    nimbus, state, api, clock = _make()
    two = {**SPEC, "bolts": [{"name": "b", "class": "m:B", "parallelism": 2, "inputs": [{"component": "s"}]}]}
    nimbus.register("ns", "wc", "uid-1", 1, two)
    nimbus.round()
    # valid on its own (3 executors, 3 tasks), but the running topology has 2 tasks of b
    three = {**two, "bolts": [{**two["bolts"][0], "parallelism": 3}]}  # type: ignore[index]
    nimbus.register("ns", "wc", "uid-1", 2, three)
    nimbus.round()
    nimbus.round()
    assert api.reasons("wc").count("RebalanceRejected") == 1
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE


def test_invalid_change_to_a_running_topology_keeps_it_running() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    bad = {**SPEC, "bolts": [{**SPEC["bolts"][0], "parallelism": 5}]}  # type: ignore[index]
    nimbus.register("ns", "wc", "uid-1", 2, bad)
    nimbus.round()
    st = _status(api)
    assert st["phase"] == "Running" and "parallelism" in st["message"]
    assert _cond(st, "Valid")["status"] == "False" and "InvalidSpec" in api.reasons("wc")
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE


def test_node_not_ready_moves_executors_and_force_deletes_pods() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    lost = next(iter(state.assignments["ns~wc"].slots().values())).node
    api.nodes = [_node(n["metadata"]["name"], ready=n["metadata"]["name"] != lost) for n in api.nodes]
    clock.now += 1
    nimbus.round()
    assert all(s.node != lost for s in state.assignments["ns~wc"].slots().values())
    assert "NodeNotReady" in api.reasons("wc")
    assert any(grace == 0 for _, grace in api.deleted)
    assert all(p["spec"]["nodeName"] != lost for p in api.pods.values()) and len(api.pods) == 2


def test_failed_pod_is_replaced() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    key = next(iter(api.pods))
    slot = api.pods[key]["metadata"]["annotations"]["squall.io/slot"]
    api.pods[key]["status"] = {"phase": "Failed", "reason": "Evicted"}
    nimbus.round()
    assert key not in api.pods and "WorkerReplaced" in api.reasons("wc")
    # its replacement, under a name of its own, in the same round
    (new,) = [k for k, p in api.pods.items() if p["metadata"]["annotations"]["squall.io/slot"] == slot]
    assert new != key and new[1].startswith(key[1].rsplit("-", 1)[0] + "-")


def test_a_deleted_pod_is_replaced_while_it_terminates() -> None:
    """`kubectl delete pod`: while the old pod terminates (deletionTimestamp set, still listed),
    the slot gets a new pod at once, under a new name; the old one is left to its kubelet."""
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    before = dict(api.pods)
    key = next(iter(before))
    slot = api.pods[key]["metadata"]["annotations"]["squall.io/slot"]
    api.pods[key]["metadata"]["deletionTimestamp"] = "2026-11-23T21:00:00Z"
    nimbus.loop_wake.clear()
    nimbus.pod_event("ns", key[1], deleting=False, gone=False, finished=False)  # e.g. Ready
    assert not nimbus.loop_wake.is_set()
    nimbus.pod_event("ns", key[1], deleting=True, gone=False, finished=False)
    assert nimbus.loop_wake.is_set()  # the pod watch wakes the loop at once
    nimbus.round()
    of_slot = sorted(k for k, p in api.pods.items() if p["metadata"]["annotations"]["squall.io/slot"] == slot)
    assert len(of_slot) == 2 and key in of_slot, of_slot
    assert key[1] not in [name for name, _ in api.deleted]
    nimbus.round()  # the terminating pod does not make a third
    assert len(api.pods) == len(before) + 1


def test_invalid_spec_fails_and_others_keep_running() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    bad = {**SPEC, "bolts": [{**SPEC["bolts"][0], "inputs": [{"component": "nope"}]}]}  # type: ignore[index]
    nimbus.register("ns", "bad", "uid-2", 1, bad)
    nimbus.round()
    st = _status(api, "bad")
    assert st["phase"] == "Failed" and "nope" in st["message"]
    assert "InvalidSpec" in api.reasons("bad") and "ns~bad" not in state.storms
    assert "ns~wc" in state.storms
    nimbus.round()
    assert api.reasons("bad").count("InvalidSpec") == 1


def _topology_arg(pod: dict[str, Any]) -> str:
    args = pod["spec"]["containers"][0]["args"]
    return str(args[args.index("--topology") + 1])


def test_two_namespaces_run_a_topology_of_one_name_under_their_own_keys() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.register("other", "wc", "uid-2", 1, SPEC)
    nimbus.round()
    assert sorted(state.storms) == ["ns~wc", "other~wc"]
    assert state.storms["other~wc"].topology["metadata"]["namespace"] == "other"
    api.ready_all()
    nimbus.round()
    for ns in ("ns", "other"):
        assert api.statuses[(ns, "wc")]["phase"] == "Running"
        mine = [p for (n, _), p in api.pods.items() if n == ns]
        assert len(mine) == 2 and {_topology_arg(p) for p in mine} == {f"{ns}~wc"}
    # the two share the nodes' slots: no slot is assigned twice
    slots = [set(state.assignments[k].slots().values()) for k in ("ns~wc", "other~wc")]
    assert not slots[0] & slots[1]
    # deleting one kills its own key only
    assert nimbus.request_kill("other", "wc", "uid-2", 1, SPEC) is False
    nimbus.round()
    assert state.storms["other~wc"].status is TopologyStatus.KILLED
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    clock.now += 8
    nimbus.round()
    assert nimbus.request_kill("other", "wc", "uid-2", 1, SPEC) is True
    assert list(state.storms) == ["ns~wc"] and len(api.pods) == 2


def _run_by_an_older_operator() -> tuple[FakeState, FakeApi, Clock]:
    """A topology ns/wc run by an operator older than namespaced keys: stored under its bare
    name, its worker pods up and beating."""
    old, state, api, clock = _make()
    old.register("ns", "wc", "uid-1", 1, SPEC).topo = "wc"  # the key that operator used
    old.round()
    api.ready_all()
    _beat_all(state, clock, "wc")
    old.round()
    assert list(state.storms) == ["wc"] and api.statuses[("ns", "wc")]["phase"] == "Running"
    return state, api, clock


def test_a_topology_an_older_operator_stored_under_its_bare_name_keeps_running_under_it() -> None:
    state, api, clock = _run_by_an_older_operator()
    base, assignment, workers = state.storms["wc"], state.assignments["wc"], dict(api.pods)
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC, status=api.statuses[("ns", "wc")])
    nimbus.register("other", "wc", "uid-2", 1, SPEC)
    nimbus.round()
    nimbus.kill_orphans()
    # not submitted again, not reassigned, no worker pod replaced: the old key is kept
    assert sorted(state.storms) == ["other~wc", "wc"]
    assert state.storms["wc"] == base and state.assignments["wc"] == assignment
    assert {k: p for k, p in api.pods.items() if k[0] == "ns"} == workers
    assert {_topology_arg(p) for (n, _), p in api.pods.items() if n == "other"} == {"other~wc"}
    assert api.reasons("wc").count("Submitted") == 2  # the old operator's, and the other namespace's
    assert api.statuses[("ns", "wc")]["phase"] == "Running"
    # deleted, it is killed under its old key
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is False
    nimbus.round()
    assert state.storms["wc"].status is TopologyStatus.KILLED
    assert state.storms["other~wc"].status is TopologyStatus.ACTIVE


def test_a_bare_name_left_by_an_older_operator_with_no_resource_is_an_orphan() -> None:
    state, api, clock = _run_by_an_older_operator()
    nimbus, _, _, _ = _make(state, api, clock)
    # the listed resource (not registered yet) it was stored for spares it
    api.topologies = [{"metadata": {"name": "wc", "namespace": "ns", "uid": "uid-1"}}]
    nimbus.kill_orphans()
    assert state.storms["wc"].status is TopologyStatus.ACTIVE
    # re-created while no operator ran: the new resource runs under its namespaced key, and
    # the bare name, stored for the old one, is an orphan
    api.topologies = [{"metadata": {"name": "wc", "namespace": "ns", "uid": "uid-new"}}]
    nimbus.register("ns", "wc", "uid-new", 1, SPEC)
    nimbus.round()
    nimbus.kill_orphans()
    assert state.storms["wc"].status is TopologyStatus.KILLED
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE


def test_kill_waits_then_removes_pods_and_state() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is False
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.KILLED
    assert _status(api)["phase"] == "Killing" and len(api.pods) == 2
    clock.now += 5
    nimbus.round()
    assert "ns~wc" in state.storms and len(api.pods) == 2  # killWaitSecs 7 not over
    clock.now += 3
    nimbus.round()
    assert "ns~wc" not in state.storms and not api.pods
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is True
    assert {"Killing", "Killed"} <= set(api.reasons("wc"))


def test_the_delete_handler_sees_the_kill_end_without_waking_the_loop() -> None:
    """handlers.kill starts the kill once and then asks `kill_done` every quarter second: a look
    that does not wake the loop (request_kill re-records the resource and wakes it), true once
    the loop removed the pods and the state, and the resource is forgotten then."""
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is False
    nimbus.loop_wake.clear()
    nimbus.round()
    assert nimbus.kill_done("uid-1") is False and not nimbus.loop_wake.is_set()
    clock.now += 8  # past killWaitSecs (7)
    nimbus.round()
    assert "ns~wc" not in state.storms and not api.pods
    assert nimbus.kill_done("uid-1") is True and "uid-1" not in nimbus.resources
    assert nimbus.kill_done("never-seen") is False


def test_no_scheduling_before_nodes_are_known() -> None:
    state = FakeState()
    state.assignments["ns~wc"] = Assignment(executor_slots={"1-1": "n1-6700"})
    with pytest.raises(StateError):
        state.supervisors()


def test_orphans_are_killed_and_leftovers_removed() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    nimbus.forget("uid-1")
    state.beats["gone"] = {WorkerSlot("n1", 6700): WorkerHeartbeat(time_secs=1, uptime_secs=1)}
    nimbus.kill_orphans()
    assert state.storms["ns~wc"].status is TopologyStatus.KILLED
    assert "gone" not in state.beats


def test_kill_removes_a_last_heartbeat_written_after_teardown() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    # graceful deletion: pods stay (terminating) until their workers exit
    api.delete_pod = lambda ns, name, grace=None: api.pods[(ns, name)]["metadata"].update(  # type: ignore[method-assign]
        deletionTimestamp="now")
    nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    clock.now += 8
    nimbus.round()
    assert "ns~wc" not in state.storms and len(api.pods) == 2
    # a stopping worker writes its last heartbeat after the teardown, then its pod goes
    state.beats["ns~wc"] = {WorkerSlot("n1", 6700): WorkerHeartbeat(time_secs=1, uptime_secs=1)}
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is False
    api.pods.clear()
    nimbus.round()
    assert "ns~wc" not in state.topologies_with_state()
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is True


# --- the Lease ---------------------------------------------------------------------------------


def test_lease_election() -> None:
    api = FakeApi()
    clock = Clock()
    clock.now = dt.datetime.now(dt.timezone.utc).timestamp()
    a = LeaseElector(api, "ns", "lease", "a", duration=10, clock=clock)  # type: ignore[arg-type]
    b = LeaseElector(api, "ns", "lease", "b", duration=10, clock=clock)  # type: ignore[arg-type]
    assert a.try_acquire() is True
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "a"
    assert b.try_acquire() is False
    assert a.try_acquire() is True  # renew
    assert api.lease["spec"]["leaseTransitions"] == 0
    clock.now += 11  # a stopped renewing
    assert b.try_acquire() is True
    assert api.lease["spec"]["holderIdentity"] == "b" and api.lease["spec"]["leaseTransitions"] == 1


def test_lease_conflict_loses_the_round() -> None:
    api = FakeApi()
    a = LeaseElector(api, "ns", "lease", "a")  # type: ignore[arg-type]
    api.create_lease("ns", {"metadata": {"name": "lease"}, "spec": {}})  # created meanwhile, no holder
    original = api.get_lease

    def stale(namespace: str, name: str) -> dict[str, Any] | None:
        lease = original(namespace, name)
        assert lease is not None
        lease["metadata"]["resourceVersion"] = "0"
        return lease

    api.get_lease = stale  # type: ignore[method-assign]
    assert a.try_acquire() is False


def test_time_parsing() -> None:
    assert kube_api.parse_time("1970-01-01T00:00:10.500000Z") == 10.5
    assert kube_api.parse_time(None) is None and kube_api.parse_time("junk") is None


# --- per-topology pod settings, rolls and health ----------------------------------------------


def _images(api: FakeApi) -> set[str]:
    return {p["spec"]["containers"][0]["image"] for p in api.pods.values()}


DRAIN = {"upgrade": {"mode": "drain"}}


def test_image_change_rolls_the_workers_like_a_rebalance() -> None:
    """spec.upgrade.mode drain, with tuples pending throughout the drain: it lasts
    rebalanceWaitSecs."""
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, **DRAIN, "worker": {"image": "team/wc:1"}})
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    assert _images(api) == {"team/wc:1"} and set(_status(api)["images"].values()) == {"team/wc:1"}
    before = set(state.assignments["ns~wc"].slots().values())
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, **DRAIN, "worker": {"image": "team/wc:2"}})
    nimbus.round()
    # Draining: spouts deactivated, old pods still running, for rebalanceWaitSecs (5)
    assert state.storms["ns~wc"].status is TopologyStatus.INACTIVE
    assert _images(api) == {"team/wc:1"} and not api.deleted
    st = _status(api)
    assert st["phase"] == "Rolling" and _cond(st, "Rolling")["reason"] == "Draining"
    assert "SpecChangeIgnored" not in api.reasons("wc") and "RollStarted" in api.reasons("wc")
    # the operator restarts mid-roll: the new one resumes from the status
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, **DRAIN, "worker": {"image": "team/wc:2"}}, status=_status(api))
    clock.now += 3
    _beat_all(state, clock, "ns~wc", pending=7)
    nimbus.round()
    assert not api.deleted and state.storms["ns~wc"].status is TopologyStatus.INACTIVE
    clock.now += 3
    _beat_all(state, clock, "ns~wc", pending=7)
    nimbus.round()
    # Replacing, a slot at a time: one outdated pod goes (gracefully) and comes back with the new
    # image on its slot; the other waits until that one is ready
    assert len(api.deleted) == 1 and all(grace is None for _, grace in api.deleted)
    assert "RollReplacing" in api.reasons("wc")
    nimbus.round()
    assert _images(api) == {"team/wc:1", "team/wc:2"}
    nimbus.round()
    assert len(api.deleted) == 1, "a second pod went before the first slot's new pod was ready"
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    assert len(api.deleted) == 2
    nimbus.round()
    assert _images(api) == {"team/wc:2"}
    assert set(state.assignments["ns~wc"].slots().values()) == before
    assert state.storms["ns~wc"].status is TopologyStatus.INACTIVE
    assert _status(api)["phase"] == "Rolling" and _cond(_status(api), "Rolling")["reason"] == "Replacing"
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    clock.now += 1
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    st = _status(api)
    assert st["phase"] == "Running" and _cond(st, "Rolling")["reason"] == "Completed"
    assert set(st["images"].values()) == {"team/wc:2"} and "roll" not in st
    assert "RollCompleted" in api.reasons("wc")


def test_chart_default_image_change_rolls_too() -> None:
    import dataclasses

    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    # helm upgrade: a new operator with a new default worker image, same ZooKeeper and resources
    config = dataclasses.replace(nimbus.config, worker=dataclasses.replace(nimbus.config.worker, image="squall-worker:new"))
    nimbus2 = KubeNimbus(state, api, config, clock=clock)  # type: ignore[arg-type]
    nimbus2.refresh_nodes()
    nimbus2.startup()
    nimbus2.register("ns", "wc", "uid-1", 1, SPEC, status=_status(api))
    nimbus2.round()
    # the hand-over roll (the default): spouts active, the first slot's pod replaced at once
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE and "RollStarted" in api.reasons("wc")
    assert "squall-worker:t -> squall-worker:new" in [m for n, r, m in api.events if r == "RollStarted"][0]
    assert len(api.deleted) == 1


def test_image_change_rolls_through_the_hand_over_with_spouts_active() -> None:
    """The default roll: no deactivation at any round; one slot at a time (the next pod goes when
    the previous slot's new pod is ready); a restarted operator resumes it from the status."""
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "worker": {"image": "team/wc:1"}})
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    before = set(state.assignments["ns~wc"].slots().values())
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "worker": {"image": "team/wc:2"}})
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    assert len(api.deleted) == 1 and all(grace is None for _, grace in api.deleted)
    st = _status(api)
    assert st["phase"] == "Rolling" and _cond(st, "Rolling")["reason"] == "Replacing"
    assert st["roll"]["mode"] == "handover" and "spouts active" in _cond(st, "Rolling")["message"]
    assert "spouts stay active" in [m for n, r, m in api.events if r == "RollStarted"][0]
    # the slot's new pod is made in the same round: the deleted worker hands its slot over to it
    assert _images(api) == {"team/wc:1", "team/wc:2"}
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "worker": {"image": "team/wc:2"}}, status=_status(api))
    for _ in range(2):
        nimbus.round()
        assert len(api.deleted) == 1, "a second pod went before the first slot's new pod was ready"
        assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    assert len(api.deleted) == 2 and state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    clock.now += 1
    nimbus.round()
    st = _status(api)
    assert st["phase"] == "Running" and _cond(st, "Rolling")["reason"] == "Completed" and "roll" not in st
    assert _images(api) == {"team/wc:2"} and set(state.assignments["ns~wc"].slots().values()) == before
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE
    assert "Deactivated" not in api.reasons("wc") and "RollCompleted" in api.reasons("wc")


def test_a_roll_saved_by_an_older_operator_resumes_as_the_drain_it_was() -> None:
    """status.roll without `mode` and `since` (the operator before spec.upgrade): a drain, which
    ends at its due time as it would have, heartbeats notwithstanding."""
    nimbus, state, api, clock = _make()
    saved = {"roll": {"step": "Draining", "due": pods.iso_time(clock.now + 4), "image": "team/wc:2",
                      "from": ["team/wc:1"]}}
    res = nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "worker": {"image": "team/wc:2"}}, status=saved)
    assert res.roll is not None and (res.roll.mode, res.roll.step) == ("drain", "Draining")
    assert res.roll.since == res.roll.due == pytest.approx(clock.now + 4, abs=1)


def test_drain_roll_ends_as_soon_as_nothing_is_pending() -> None:
    """spec.upgrade.mode drain: the spouts' heartbeats after the deactivation say nothing is
    pending, 2 s in, so the pods are replaced then and not at rebalanceWaitSecs (5)."""
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, **DRAIN, "worker": {"image": "team/wc:1"}})
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc", pending=40)
    nimbus.round()
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, **DRAIN, "worker": {"image": "team/wc:2"}})
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.INACTIVE and not api.deleted
    # a heartbeat from before the deactivation (or just after it) says nothing yet
    _beat_all(state, clock, "ns~wc", pending=0)
    clock.now += 0.5
    nimbus.round()
    assert not api.deleted
    clock.now += 0.5
    _beat_all(state, clock, "ns~wc", pending=3)
    nimbus.round()
    assert not api.deleted
    clock.now += 1
    _beat_all(state, clock, "ns~wc", pending=0)
    nimbus.round()
    assert len(api.deleted) == 1
    assert "nothing pending 2.0s after the deactivation" in [m for n, r, m in api.events if r == "RollReplacing"][0]


def test_inactive_topology_rolls_without_waiting_and_stays_inactive() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "active": False})
    nimbus.round()
    api.ready_all()
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "active": False, "worker": {"env": [{"name": "X", "value": "1"}]}})
    nimbus.round()
    nimbus.round()
    assert len(api.deleted) == 1  # no drain; a slot at a time
    for _ in range(2):
        nimbus.round()
        api.ready_all()
        nimbus.round()
    assert len(api.deleted) == 2
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.INACTIVE and "RollCompleted" in api.reasons("wc")


def test_curve_secret_and_network_policy_come_before_the_first_pod() -> None:
    """Sealed by default: the Topology's key pair (in a Secret it owns) and its NetworkPolicy are
    made once, before its first worker pod, whose env reads the pair from that Secret; a
    resubmission (a new resource) gets a new pair."""
    api = FakeApi()
    order: list[str] = []
    create_pod, create_secret = api.create_pod, api.create_secret
    api.create_pod = lambda ns, body: (order.append("pod"), create_pod(ns, body))[1]  # type: ignore[method-assign]
    api.create_secret = lambda ns, body: (order.append("secret"), create_secret(ns, body))[1]  # type: ignore[method-assign]
    nimbus, state, api, clock = _make(api=api)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    assert order == ["secret", "pod", "pod"]
    ((key, secret),) = api.secrets.items()
    assert key == ("ns", pods.curve_secret_name("wc", "uid-1"))
    assert secret["metadata"]["ownerReferences"] == [pods.owner_reference("wc", "uid-1")]
    keys = CurveKeys.parse(secret["stringData"]["public"], secret["stringData"]["secret"], "the Secret")
    ((_, policy),) = api.policies.items()
    assert policy["spec"]["podSelector"]["matchLabels"] == pods.worker_selector("wc")
    for pod in api.pods.values():
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["SQUALL_CURVE_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {"name": key[1], "key": "secret"}
    # a replaced pod does not make a new pair
    api.pods.pop(next(iter(api.pods)))
    clock.now += 1
    nimbus.round()
    assert len(api.pods) == 2 and order.count("secret") == 1
    # deleted and applied again: a new resource, a new Secret, a new pair
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is False
    for _ in range(3):
        nimbus.round()
        clock.now += 5
    assert "ns~wc" not in state.storms and not api.pods
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC) is True
    nimbus.register("ns", "wc", "uid-2", 1, SPEC)
    for _ in range(3):
        clock.now += 1
        nimbus.round()
    assert api.pods, api.events
    new = api.secrets[("ns", pods.curve_secret_name("wc", "uid-2"))]["stringData"]
    assert new["secret"] != keys.secret.decode()


def test_a_refused_secret_stops_the_pods_and_says_why() -> None:
    api = FakeApi()

    def refuse(namespace: str, body: dict[str, Any]) -> None:
        raise kube_api.ApiRejected('secrets is forbidden: User "system:serviceaccount:squall:op" cannot create')

    api.create_secret = refuse  # type: ignore[method-assign]
    nimbus, state, api, clock = _make(api=api)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    nimbus.round()
    assert not api.pods
    st = _status(api)
    assert st["state"] == "InvalidPodTemplate" and "cannot create" in st["message"]
    assert api.reasons("wc").count("InvalidPodTemplate") == 1


def test_refused_pod_shows_invalid_pod_template() -> None:
    api = FakeApi()

    def refuse(namespace: str, body: dict[str, Any]) -> None:
        raise kube_api.ApiRejected('Pod "wc-n1-6700" is invalid: spec.volumes[1].configMap.name: Required value')

    api.create_pod = refuse  # type: ignore[method-assign]
    nimbus, state, api, clock = _make(api=api)
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "worker": {"volumes": [{"name": "v", "configMap": {}}]}})
    nimbus.round()
    nimbus.round()
    st = _status(api)
    assert st["state"] == "InvalidPodTemplate" and "spec.volumes[1].configMap.name" in st["message"]
    assert _cond(st, "WorkersHealthy")["reason"] == "InvalidPodTemplate"
    assert api.reasons("wc").count("InvalidPodTemplate") == 1


def test_image_pull_failure_and_crash_loop_show_in_state_and_events() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "worker": {"image": "nope:1"}})
    nimbus.round()
    for p in api.pods.values():
        p["status"] = {"phase": "Pending", "containerStatuses": [{"name": "worker", "restartCount": 0, "state": {
            "waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}}]}
    clock.now += 1
    nimbus.round()
    st = _status(api)
    assert st["state"] == "ErrImagePull" and "nope:1" in st["message"]
    assert "ErrImagePull" in api.reasons("wc")
    for p in api.pods.values():
        p["status"] = {"phase": "Running", "containerStatuses": [{"name": "worker", "restartCount": 5, "state": {
            "waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 2}}}]}
    clock.now += 1
    nimbus.round()
    assert _status(api)["state"] == "CrashLoopBackOff" and "CrashLoopBackOff" in api.reasons("wc")
    api.ready_all()
    clock.now += 1
    nimbus.round()
    assert _status(api)["state"] == "Running" and "WorkersHealthy" in api.reasons("wc")


def test_worker_load_error_shows_until_a_worker_heartbeats() -> None:
    state = FakeState()
    load = ErrorInfo(component="__load", task=-1, time_secs=1_000_000.5, host="n1", port=6700,
                     error="spec.spouts[0].class: 'm:S' — No module named 'm'")
    state.last_error = lambda topo, comp: load if comp == "__load" else None  # type: ignore[method-assign]
    nimbus, _, api, clock = _make(state=state)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    # the workers that cannot load exit and crash-loop: the load error is the reason shown
    for p in api.pods.values():
        p["status"] = {"phase": "Running", "containerStatuses": [{"name": "worker", "restartCount": 3, "state": {
            "waiting": {"reason": "CrashLoopBackOff"}}}]}
    clock.now += 1
    nimbus.round()
    st = _status(api)
    assert st["state"] == "ComponentLoadFailed" and "No module named 'm'" in st["message"]
    assert "CrashLoopBackOff" in st["message"]
    assert "ComponentLoadFailed" in api.reasons("wc")
    _beat_all(state, clock, "ns~wc")
    clock.now += 1
    nimbus.round()
    assert _status(api)["state"] != "ComponentLoadFailed"


def test_readiness_needs_the_api_server_and_zookeeper() -> None:
    assert health.readiness(100.0, 90.0, 30.0, True) == (True, "ok")
    ok, why = health.readiness(100.0, None, 30.0, True)
    assert not ok and "API server has not answered" in why
    ok, why = health.readiness(100.0, 60.0, 30.0, True)
    assert not ok and "no answer from the API server for 40s" in why
    ok, why = health.readiness(100.0, 99.0, 30.0, False, "ZooKeeper (zk:2181)")
    assert not ok and "ZooKeeper (zk:2181) is not reachable" in why
    ok, why = health.readiness(100.0, 99.0, 30.0, None)
    assert not ok and "not connected" in why


class _Client:
    connected = True


def test_health_follows_the_leaders_zookeeper_session_and_api_calls() -> None:
    clock = Clock()
    health = Health("127.0.0.1:1", api_window=30, clock=clock)
    client = _Client()
    health.zk_client = client
    assert not health.ready()[0]  # the API server has not answered yet
    api = FakeApi()
    elector = LeaseElector(api, "ns", "lease", "me", clock=clock, health=health)
    elector.try_acquire()
    assert health.ready() == (True, "ok")
    client.connected = False
    assert "not reachable" in health.ready()[1]
    client.connected = True
    clock.now += 31
    assert "no answer from the API server" in health.ready()[1]
    # a standby has no session: it probes the ensemble (nothing listens on port 1)
    standby = Health("127.0.0.1:1", clock=clock)
    standby.api_ok()
    assert not standby.zk_connected()


def test_readyz_endpoint_answers_503_with_the_reason() -> None:
    import urllib.error
    import urllib.request

    from squall_operator.operator_main import serve_health

    health = Health("127.0.0.1:1")
    health.zk_client = _Client()
    server = serve_health("127.0.0.1:0", health)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url + "/readyz", timeout=5)
        assert info.value.code == 503 and b"API server" in info.value.read()
        health.api_ok()
        with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"ok\n"
        with urllib.request.urlopen(url + "/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_zookeeper_unreachable_shows_on_every_topology() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.register("ns", "wc2", "uid-2", 1, SPEC)
    nimbus.run_once()
    api.ready_all()
    clock.now += 1
    nimbus.run_once()
    state.ready = False  # the session is gone: every ZooKeeper call would fail
    clock.now += 1
    nimbus.run_once()
    nimbus.run_once()
    for name in ("wc", "wc2"):
        st = _status(api, name)
        assert st["state"] == "ZooKeeperUnreachable" and "zk:2181" in st["message"]
        assert _cond(st, "ZooKeeperReachable")["status"] == "False"
        assert st["workers"] == "2/2"  # the last known figures stay
        assert api.reasons(name).count("ZooKeeperUnreachable") == 1
    state.ready = True
    clock.now += 1
    nimbus.run_once()
    st = _status(api)
    assert st["state"] == "Running" and _cond(st, "ZooKeeperReachable")["status"] == "True"
    assert "ZooKeeperReachable" in api.reasons("wc")


def test_workers_avoid_tainted_and_unselected_nodes() -> None:
    api = FakeApi()
    api.nodes[0]["spec"]["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    api.nodes[2]["metadata"]["labels"] = {"pool": "stream"}
    nimbus, state, api, clock = _make(api=api)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.register("ns", "sel", "uid-2", 1, {**SPEC, "worker": {"nodeSelector": {"pool": "stream"}}})
    nimbus.round()
    assert {s.node for s in state.assignments["ns~wc"].slots().values()} == {"n2", "n3"}
    assert {s.node for s in state.assignments["ns~sel"].slots().values()} == {"n3"}
    # sel wants 2 workers, n3 offers 2 slots, but wc holds one of them: 1 slot for 2 workers
    st = _status(api, "sel")
    assert st["state"] == "Unschedulable" and "n1: taint" in st["message"] and "n2: nodeSelector" in st["message"]


def test_requests_no_node_can_satisfy_show_unschedulable() -> None:
    api = FakeApi()
    for n in api.nodes:
        n["status"]["allocatable"] = {"cpu": "2", "memory": "4Gi"}
    nimbus, state, api, clock = _make(api=api)
    nimbus.register("ns", "big", "uid-1", 1, {**SPEC, "worker": {"resources": {"requests": {"cpu": "16"}}}})
    nimbus.register("ns", "wc", "uid-2", 1, SPEC)
    nimbus.round()
    nimbus.round()
    st = _status(api, "big")
    assert st["state"] == "Unschedulable" and "requests cpu 16" in st["message"]
    assert "Unschedulable" in api.reasons("big") and not [p for k, p in api.pods.items() if k[1].startswith("big")]
    assert len(state.assignments["ns~wc"].slots()) > 0  # the other topology is untouched


def test_slot_refused_by_the_kubelet_is_moved() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    key = sorted(api.pods)[0]
    refused = WorkerSlot.from_key(api.pods[key]["metadata"]["annotations"][pods.ANNOTATION_SLOT])
    api.pods[key]["status"] = {"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource: cpu"}
    clock.now += 1
    nimbus.round()
    assert "PodRejected" in api.reasons("wc")
    clock.now += 1
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    nimbus.round()
    slots = set(state.assignments["ns~wc"].slots().values())
    assert refused not in slots and len(slots) == 2
    assert key not in api.pods and len(api.pods) == 2


def test_kill_honours_the_wait_asked_by_kubectl_squall_kill_w() -> None:
    """`kubectl squall kill wc -w 1` annotates the resource with squall.io/kill-wait-secs before
    deleting it: the kill waits 1 s instead of killWaitSecs (7); a malformed value is ignored."""
    assert resources.kill_wait_from_annotations({"squall.io/kill-wait-secs": "1.5"}) == 1.5
    for bad in ({}, None, {"squall.io/kill-wait-secs": "soon"}, {"squall.io/kill-wait-secs": "-1"},
                {"squall.io/kill-wait-secs": "nan"}):
        assert resources.kill_wait_from_annotations(bad) is None
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC, kill_wait=1.0) is False
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.KILLED
    clock.now += 1.5
    nimbus.round()
    assert "ns~wc" not in state.storms and not api.pods
    assert nimbus.request_kill("ns", "wc", "uid-1", 1, SPEC, kill_wait=1.0) is True


def test_rebalance_honours_the_wait_asked_by_kubectl_squall_rebalance_w() -> None:
    """`kubectl squall rebalance wc -n 3 -w 1` patches the spec and annotates the generation
    that patch makes with squall.io/rebalance-wait-secs: the spouts are deactivated and the
    reassignment comes after 1 s instead of rebalanceWaitSecs (5). The wait holds for that
    generation only: a later edit without -w waits rebalanceWaitSecs again."""
    ann = {"squall.io/rebalance-wait-secs": "1.5", "squall.io/rebalance-wait-generation": "2"}
    assert resources.rebalance_wait_from_annotations(ann) == (2, 1.5)
    for bad in ({}, None, {"squall.io/rebalance-wait-secs": "1"},
                {**ann, "squall.io/rebalance-wait-secs": "soon"}, {**ann, "squall.io/rebalance-wait-secs": "-1"},
                {**ann, "squall.io/rebalance-wait-generation": "two"}):
        assert resources.rebalance_wait_from_annotations(bad) is None
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    asked = resources.rebalance_wait_from_annotations({**ann, "squall.io/rebalance-wait-secs": "1"})
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "numWorkers": 3}, rebalance_wait=asked)
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    assert _cond(_status(api), "Active")["status"] == "False"
    assert any(r == "RebalanceRequested" and "in 1s" in m for _, r, m in api.events), api.events
    clock.now += 1.2
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    base = state.storms["ns~wc"]
    assert base.status is TopologyStatus.ACTIVE and base.num_workers == 3
    api.ready_all()
    clock.now += 1
    nimbus.round()
    # generation 3 changes numWorkers without -w: the annotation of generation 2 does not apply
    nimbus.register("ns", "wc", "uid-1", 3, {**SPEC, "numWorkers": 2}, rebalance_wait=asked)
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    clock.now += 1.2
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING  # waits rebalanceWaitSecs (5)
    clock.now += 4
    _beat_all(state, clock, "ns~wc")
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.ACTIVE and state.storms["ns~wc"].num_workers == 2


def test_the_pod_watch_hands_over_only_pods_going_away() -> None:
    """kopf calls `worker_pod_event` (which wakes the loop) only for a worker pod deleted, being
    deleted or finished; a pod becoming Ready is not worth a round (nor a kopf log line)."""
    import kopf

    from squall_operator.handlers import _pod_going

    assert not _pod_going("MODIFIED", kopf.Body({"metadata": {}, "status": {"phase": "Running"}}))
    assert not _pod_going("ADDED", kopf.Body({"metadata": {}}))
    assert _pod_going("DELETED", kopf.Body({"metadata": {}}))
    assert _pod_going("MODIFIED", kopf.Body({"metadata": {"deletionTimestamp": "2026-11-23T21:00:00Z"}}))
    assert _pod_going("MODIFIED", kopf.Body({"metadata": {}, "status": {"phase": "Failed"}}))


def _beat_spouts(state: FakeState, clock: Clock, topo: str, acked: int, failed: int, pending: int) -> None:
    """Heartbeats of every assigned executor; the spout "s" reports these counts."""
    from squall.models.cluster import ExecutorStats
    from squall_operator import stored

    spout = {f"{e[0]}-{e[1]}" for e in stored.plan(state.storms[topo]).component_executors["s"]}
    beats: dict[WorkerSlot, WorkerHeartbeat] = {}
    for ex, slot in state.assignments[topo].executor_slots.items():
        beat = beats.setdefault(WorkerSlot.from_key(slot), WorkerHeartbeat(time_secs=clock.now, uptime_secs=1))
        beat.executors[ex] = (ExecutorStats(component="s", acked=acked, failed=failed, pending=pending)
                              if ex in spout else ExecutorStats(component="b"))
    state.beats[topo] = beats


def test_degraded_when_acks_stall_one_event_on_and_one_off() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "health": {"stalledSecs": 20}})
    nimbus.round()
    api.ready_all()
    _beat_spouts(state, clock, "ns~wc", acked=100, failed=0, pending=50)
    nimbus.round()
    st = _status(api)
    assert st["state"] == "Running" and _cond(st, "Degraded")["status"] == "False"
    # acks stop at 120 with 50 pending: not yet 15 s after, Degraded 20 s after
    for _ in range(4):
        clock.now += 5
        _beat_spouts(state, clock, "ns~wc", acked=120, failed=0, pending=50)
        nimbus.round()
    assert _cond(_status(api), "Degraded")["status"] == "False"
    nimbus.round()
    assert _cond(_status(api), "Degraded")["status"] == "False"
    clock.now += 5
    _beat_spouts(state, clock, "ns~wc", acked=120, failed=0, pending=50)
    nimbus.round()
    st = _status(api)
    assert st["phase"] == "Running" and st["state"] == "Degraded", st
    assert _cond(st, "Degraded")["reason"] == "AcksStalled"
    assert "50 tuples pending" in _cond(st, "Degraded")["message"]
    for _ in range(3):
        clock.now += 5
        _beat_spouts(state, clock, "ns~wc", acked=120, failed=0, pending=50)
        nimbus.round()
    assert api.reasons("wc").count("Degraded") == 1
    # acks again: cleared, one Recovered
    clock.now += 5
    _beat_spouts(state, clock, "ns~wc", acked=180, failed=0, pending=50)
    nimbus.round()
    st = _status(api)
    assert st["state"] == "Running" and _cond(st, "Degraded")["reason"] == "Healthy"
    clock.now += 5
    nimbus.round()
    assert api.reasons("wc").count("Degraded") == 1 and api.reasons("wc").count("Recovered") == 1
    # stored with the status: a restarted operator judges on from it
    assert _status(api)["health"]["acked"] == 180


def test_health_thresholds_change_live_without_spec_change_ignored() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    for _ in range(7):
        _beat_spouts(state, clock, "ns~wc", acked=10, failed=0, pending=5)
        nimbus.round()
        clock.now += 5
    assert _cond(_status(api), "Degraded")["status"] == "False"  # the default: 60 s
    nimbus.register("ns", "wc", "uid-1", 2, {**SPEC, "health": {"stalledSecs": 10}})
    _beat_spouts(state, clock, "ns~wc", acked=10, failed=0, pending=5)
    nimbus.round()
    assert _cond(_status(api), "Degraded")["reason"] == "AcksStalled"
    assert "SpecChangeIgnored" not in api.reasons("wc")


def test_disruption_budget_made_once_per_start_and_removed_when_off() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    nimbus.round()
    assert api.budget_calls == [("apply", "wc-workers")]
    body = api.budgets[("ns", "wc-workers")]
    assert body == pods.disruption_budget("wc", "uid-1", "ns", 1)
    # a restarted operator writes it once more (a changed maxUnavailable reaches it)
    nimbus2, _, _, _ = _make(state, api, clock)
    nimbus2.register("ns", "wc", "uid-1", 1, SPEC, status=_status(api))
    nimbus2.round()
    nimbus2.round()
    assert api.budget_calls == [("apply", "wc-workers")] * 2
    # turned off: the operator removes the one it made, once
    nimbus3 = KubeNimbus(state, api, OperatorConfig(  # type: ignore[arg-type]
        zookeeper="zk:2181", worker=pods.WorkerPodConfig(image="squall-worker:t", zookeeper="zk:2181"),
        slots=pods.SlotConfig(default_slots=2), disruption_budget=0), clock=clock)
    nimbus3.refresh_nodes()
    nimbus3.startup()
    nimbus3.register("ns", "wc", "uid-1", 1, SPEC, status=_status(api))
    nimbus3.round()
    nimbus3.round()
    assert api.budget_calls[2:] == [("delete", "wc-workers")] and not api.budgets


def test_disruption_budget_refused_is_an_event_not_a_failed_round() -> None:
    nimbus, state, api, clock = _make()

    def refuse(namespace: str, body: dict[str, Any]) -> None:
        raise kube_api.ApiRejected("poddisruptionbudgets.policy is forbidden")

    api.apply_disruption_budget = refuse  # type: ignore[method-assign]
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    nimbus.round()
    assert api.reasons("wc").count("DisruptionBudgetRefused") == 1
    assert _status(api)["phase"] == "Pending" and len(api.pods) == 2


def test_run_once_marks_the_loop_alive() -> None:
    ticks = [100.0]
    h = Health("zk:2181", clock=lambda: ticks[0], loop_limit=30)
    nimbus, state, api, clock = _make()
    nimbus.health = h
    assert h.alive() == (True, "ok (no reconcile loop: not the leader yet)")
    nimbus.run_once()
    assert h.loop_at == 100.0 and h.alive()[0]
    ticks[0] += 31
    ok, why = h.alive()
    assert not ok and "has not begun a round for 31s" in why
    nimbus.run_once()
    assert h.alive()[0]
