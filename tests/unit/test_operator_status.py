"""The Topology's status and the Events its changes post, built by the pure
squall_operator.status from plain values: a resource record, a stored topology, heartbeats,
pod views and the time passed in (no API server, no ZooKeeper, no clock)."""

from __future__ import annotations

from typing import Any

import pytest

from squall.models.cluster import Assignment, ErrorInfo, StormBase, WorkerHeartbeat, WorkerSlot
from squall.models.v1alpha1 import Topology
from squall_operator import canary, pods, status
from squall_operator import roll as rolls
from squall_operator.nimbus import initial_storm_base
from squall_operator.reconcile import Event
from squall_operator.resources import Resource

pytestmark = pytest.mark.unit

TOPO = Topology.model_validate({
    "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "wc", "namespace": "ns"},
    "spec": {"numWorkers": 2, "spouts": [{"name": "s", "class": "m:S"}],
             "bolts": [{"name": "b", "class": "m:B", "parallelism": 2, "numTasks": 4,
                        "inputs": [{"component": "s"}]}]},
})
A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)


def _res(**fields: Any) -> Resource:
    res = Resource("ns", "wc", "uid-1", 2, {}, observed_generation=2, topology=TOPO)
    for name, value in fields.items():
        setattr(res, name, value)
    return res


def _base() -> StormBase:
    return initial_storm_base(TOPO, 1000.0)


def _cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in st["conditions"] if c["type"] == type_)


def _build(res: Resource, base: StormBase | None, now: float = 1060.0, **over: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"base": base, "assignment": None, "heartbeats": {}, "views": [], "errors": {},
                            "problems": [], "autoscale": None, "now": now}
    return status.build(res, **{**args, **over})


def test_a_load_error_blocks_until_a_worker_heartbeats_after_it() -> None:
    base = _base()
    load = ErrorInfo(component="__load", task=0, time_secs=1010.0, error="Traceback\nImportError: no m",
                     host="n1", port=6700)
    found = status.blockers(_res(), base, None, {}, [], load, None)
    assert [p.reason for p in found] == ["ComponentLoadFailed"]
    assert "worker n1:6700 cannot load the topology's classes: Traceback; ImportError: no m" in found[0].message
    later = {A: WorkerHeartbeat(time_secs=1011.0, uptime_secs=1.0)}
    assert status.blockers(_res(), base, None, later, [], load, None) == []
    # the pod's refusal by the API server says why first; nothing is stored: no load error read
    refused = status.blockers(_res(pod_problem="volume x not found"), None, None, {}, [], load, None)
    assert refused == [pods.Problem("InvalidPodTemplate", "volume x not found")]


def test_too_few_slots_for_the_workers_is_unschedulable_naming_the_refusing_nodes() -> None:
    res = _res(allowed_count=1, refused_nodes={"n3": "tainted"})
    one = Assignment(executor_slots={"1-1": A.key()})
    found = status.blockers(res, _base(), one, {}, [], None, None)
    assert found == [pods.Problem("Unschedulable", "1/2 workers placed: 1 slots on the nodes this topology's "
                                                   "pods may use, the others taken; n3: tainted")]
    # the scheduling has not counted the slots yet: nothing said
    assert status.blockers(_res(), _base(), one, {}, [], None, None) == []


def test_the_status_carries_the_roll_the_upgrade_and_the_autoscaler_block() -> None:
    roll = rolls.Roll(rolls.CANARY, 2000.0, "img:2", ("img:1",), rolls.HANDOVER, 1000.0, "h2", ("n1-6700",))
    good = canary.Template("h1", "img:1")
    res = _res(roll=roll, upgrade=canary.Upgrade(good))
    st = _build(res, _base(), autoscale={"workers": 2})
    assert st["roll"]["step"] == rolls.CANARY and st["roll"]["canarySlots"] == ["n1-6700"]
    assert st["upgrade"] == {"lastGood": {"templateHash": "h1", "image": "img:1"}}
    assert st["autoscale"] == {"workers": 2}
    rolling = _cond(st, "Rolling")
    assert rolling["reason"] == rolls.CANARY
    assert rolling["message"] == ("canary: slot(s) n1-6700 run img:2, starting; the other slots keep "
                                  "the old settings")
    assert not any(c["type"] in ("RolledBack", "SpecChangeRefused", "ZooKeeperReachable")
                   for c in st["conditions"])


def test_rolled_back_and_refused_conditions_turn_false_once_over() -> None:
    rejected = canary.Rejected("h2", "img:2", 3, "FailedFraction", "b failed 20%", 1500.0)
    res = _res(upgrade=canary.Upgrade(canary.Template("h1", "img:1"), rejected),
               refused_change="b is stateful and its task count changed (4 -> 8)")
    st = _build(res, _base())
    back, refused = _cond(st, "RolledBack"), _cond(st, "SpecChangeRefused")
    assert (back["status"], back["reason"]) == ("True", "FailedFraction")
    assert "the canary of img:2 (generation 3) failed: b failed 20%; the workers run the last good " \
           "settings (img:1)" in back["message"]
    assert (refused["status"], refused["reason"], refused["observedGeneration"]) == ("True", "CannotBeCarried", 2)
    res = _res(status=st, upgrade=canary.Upgrade(canary.Template("h1", "img:1")))
    after = _build(res, _base(), now=1100.0)
    back, refused = _cond(after, "RolledBack"), _cond(after, "SpecChangeRefused")
    assert (back["status"], back["reason"]) == ("False", "SpecChanged")
    assert (refused["status"], refused["reason"]) == ("False", "SpecApplied")
    assert refused["lastTransitionTime"] == pods.iso_time(1100.0)


def test_zookeeper_reachable_again_turns_the_condition_true() -> None:
    down = pods.condition("ZooKeeperReachable", False, "Disconnected", "zk away", 1000.0)
    st = _build(_res(status={"conditions": [down]}), _base())
    cond = _cond(st, "ZooKeeperReachable")
    assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == ("True", "Connected", pods.iso_time(1060.0))


def test_a_status_differing_only_in_uptime_is_written_at_the_refresh_interval() -> None:
    old = {"phase": "Running", "uptimeSecs": 10.0}
    assert not status.worth_writing(old, {"phase": "Running", "uptimeSecs": 12.0}, 1000.0, 1029.0, 30.0)
    assert status.worth_writing(old, {"phase": "Running", "uptimeSecs": 40.0}, 1000.0, 1030.0, 30.0)
    assert status.worth_writing(old, {"phase": "Pending", "uptimeSecs": 10.0}, 1000.0, 1001.0, 30.0)


def _with(*conditions: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    return {"phase": phase, "conditions": list(conditions)}


def test_transitions_post_one_event_per_change() -> None:
    waiting = pods.condition("Rebalancing", True, "Waiting", "w", 0.0)
    reassigned = {**waiting, "reason": "Reassigned", "message": "new assignment written: 2 slots"}
    completed = pods.condition("Rebalancing", False, "Completed", "reassigned to 2 workers", 0.0)
    assert status.transitions(_with(waiting), _with(reassigned)) == [
        Event("Normal", "RebalanceReassigned", "new assignment written: 2 slots")]
    assert status.transitions(_with(reassigned), _with(reassigned)) == []
    assert status.transitions(_with(reassigned), _with(completed)) == [
        Event("Normal", "RebalanceCompleted", "reassigned to 2 workers")]
    assert status.transitions(_with(phase="Failed"), _with()) == [
        Event("Normal", "SpecFixed", "the spec is valid again")]
    sick = pods.condition("WorkersHealthy", False, "ImagePullBackOff", "cannot pull img:9", 0.0)
    well = pods.condition("WorkersHealthy", True, "NoProblems", "no worker reports a problem", 0.0)
    assert status.transitions(_with(well), _with(sick)) == [Event("Warning", "ImagePullBackOff", "cannot pull img:9")]
    assert status.transitions(_with(sick), _with(sick)) == []
    assert status.transitions(_with(sick), _with(well)) == [
        Event("Normal", "WorkersHealthy", "no worker reports a problem any more")]
    # a refused pod has its own Event when the API server refuses it
    refused = pods.condition("WorkersHealthy", False, "InvalidPodTemplate", "volume x", 0.0)
    assert status.transitions(_with(well), _with(refused)) == []


def test_a_degraded_topology_posts_its_warning_through_transitions() -> None:
    on = pods.condition("Degraded", True, "AcksStalled", "no tuple tree acked for 60s", 0.0)
    off = pods.condition("Degraded", False, "Healthy", "acking", 0.0)
    events = status.transitions(_with(off), _with(on))
    assert [(e.type, e.reason) for e in events] == [("Warning", "Degraded")]
    assert [(e.type, e.reason) for e in status.transitions(_with(on), _with(off))] == [("Normal", "Recovered")]


def test_roll_views_say_the_step() -> None:
    assert status.roll_view(None) is None
    drain = rolls.Roll(rolls.DRAINING, 1030.0, "img:2", ("img:1",), rolls.DRAIN, 1000.0)
    view = status.roll_view(drain)
    assert view is not None and view.step == rolls.DRAINING
    assert "(img:1 -> img:2) once nothing is pending, at " + pods.iso_time(1030.0) in view.message
    back = status.roll_view(rolls.Roll(rolls.ROLLING_BACK, 0.0, "img:1"))
    assert back is not None and back.message.startswith("the canary failed")
