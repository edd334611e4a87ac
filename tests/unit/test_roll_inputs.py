"""What a round of the roll is decided on, from plain values (squall_operator.roll's
observe_canary, roll_input, spouts_pending, canary_settings, upgrade_after): pod views,
heartbeats and an assignment made by hand, the time passed in."""

from __future__ import annotations

from typing import Any

import pytest

from squall.models.cluster import Assignment, ExecutorStats, TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall.models.v1alpha1 import Topology
from squall_operator import canary, pods, stored
from squall_operator import roll as rolls
from squall_operator.kube_api import parse_time
from squall_operator.nimbus import initial_storm_base

pytestmark = pytest.mark.unit

A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
# executor 1-1 on the canary's slot A, 2-2 on the old pod's slot B
ASSIGNED = Assignment(executor_slots={"1-1": A.key(), "2-2": B.key()})
CANARY = rolls.Roll(rolls.CANARY, 0.0, "img:2", ("img:1",), rolls.HANDOVER, 100.0, "t2", (A.key(),))


def _view(name: str, slot: WorkerSlot, template: str, ready: bool = True, restarts: int = 0) -> pods.PodView:
    return pods.PodView(name, slot, slot.node, "Running", ready, False, restarts, image=f"img:{template[-1]}",
                        template=template)


def _beat(start: float, now: float, executor: str, acked: int, failed: int = 0) -> WorkerHeartbeat:
    return WorkerHeartbeat(time_secs=now, uptime_secs=now - start,
                           executors={executor: ExecutorStats(component="b", acked=acked, failed=failed)})


def test_the_canary_counts_from_the_window_it_keeps_and_only_from_a_worker_started_since() -> None:
    live = [_view("p-a", A, "t2", restarts=1), _view("p-b", B, "t1")]
    # the canary's worker started before the canary did: an old worker still serving the slot
    early = {A: _beat(90.0, 120.0, "1-1", 50), B: _beat(0.0, 120.0, "2-2", 1000)}
    seen, kept = rolls.observe_canary(CANARY, live, "t2", ASSIGNED, early, None, {}, parse_time)
    assert not seen.ready and seen.not_ready == (A.key(),) and seen.restarts == 1 and kept is None
    beats = {A: _beat(101.0, 130.0, "1-1", 200), B: _beat(0.0, 130.0, "2-2", 3000, 3)}
    seen, kept = rolls.observe_canary(CANARY, live, "t2", ASSIGNED, beats, None, {}, parse_time)
    assert seen.ready and kept is not None and kept.identity == ("t2", 100.0)
    # the window begins now: nothing counted yet on either side
    assert (seen.new["b"].acked, seen.old["b"].acked) == (0, 0)
    later = {A: _beat(101.0, 160.0, "1-1", 700), B: _beat(0.0, 160.0, "2-2", 8000, 13)}
    seen, again = rolls.observe_canary(CANARY, live, "t2", ASSIGNED, later, kept, {}, parse_time)
    assert again == kept
    assert (seen.new["b"].acked, seen.old["b"].acked, seen.old["b"].failed) == (500, 5000, 10)


def test_the_canary_sees_degraded_and_slots_a_rebalance_took() -> None:
    live = [_view("p-a", A, "t2"), _view("p-b", B, "t1")]
    degraded = {"type": "Degraded", "status": "True", "message": "acks stalled",
                "lastTransitionTime": pods.iso_time(150.0)}
    seen, _ = rolls.observe_canary(CANARY, live, "t2", ASSIGNED, {}, None, degraded, parse_time)
    assert (seen.degraded_since, seen.degraded) == (150.0, "acks stalled")
    elsewhere = Assignment(executor_slots={"1-1": B.key(), "2-2": B.key()})
    seen, kept = rolls.observe_canary(CANARY, live, "t2", elsewhere, {}, None, {}, parse_time)
    assert seen.gone and seen.not_ready == (A.key(),) and kept is None


def test_roll_input_counts_outdated_ready_and_unavailable_slots() -> None:
    topo = Topology.model_validate({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "wc"},
        "spec": {"numWorkers": 2, "rebalanceWaitSecs": 7, "upgrade": {"mode": "drain"},
                 "spouts": [{"name": "s", "class": "m:S"}],
                 "bolts": [{"name": "b", "class": "m:B", "inputs": [{"component": "s"}]}]}})
    live = [_view("p-a", A, "t2"), _view("p-b", B, "t1", ready=False)]
    inp = rolls.roll_input(now=5.0, storm=TopologyStatus.ACTIVE, running=topo.spec, spec=topo.spec, live=live,
                           want="t2", image="img:2", assignment=ASSIGNED, spouts={}, canary=None, observed=None,
                           ready_timeout=60.0)
    assert list(inp.outdated) == [("p-b", B, "img:1")]
    assert not inp.all_ready and inp.ready == frozenset({"p-a"}) and inp.unavailable == 1
    assert (inp.mode, inp.rebalance_wait, inp.template, inp.ready_timeout) == (rolls.DRAIN, 7.0, "t2", 60.0)


def test_spouts_pending_reads_each_spout_executor_off_its_slots_heartbeat() -> None:
    topo = Topology.model_validate({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "wc"},
        "spec": {"numWorkers": 2, "spouts": [{"name": "s", "class": "m:S", "parallelism": 2}],
                 "bolts": [{"name": "b", "class": "m:B", "inputs": [{"component": "s"}]}]}})
    plan = stored.plan(initial_storm_base(topo, 0.0))
    spouts = sorted(f"{e[0]}-{e[1]}" for e in plan.executors if plan.executor_component(e) == "s")
    assignment = Assignment(executor_slots={spouts[0]: A.key(), spouts[1]: B.key(), "1-1": A.key()})
    beats = {A: WorkerHeartbeat(time_secs=42.0, uptime_secs=1.0,
                                executors={spouts[0]: ExecutorStats(component="s", pending=3)})}
    assert rolls.spouts_pending(plan, assignment, beats) == {spouts[0]: (42.0, 3), spouts[1]: None}


def test_canary_settings_need_other_last_good_settings() -> None:
    spec = Topology.model_validate({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "wc"},
        "spec": {"upgrade": {"canary": {"slots": 2}}, "spouts": [{"name": "s", "class": "m:S"}]}}).spec
    good = canary.Template("t1", "img:1", {"image": "img:1"})
    assert rolls.canary_settings(spec, good, {"image": "img:2"}) == canary.Settings.of(spec.upgrade.canary)  # type: ignore[union-attr]
    assert rolls.canary_settings(spec, good, {"image": "img:1"}) is None
    assert rolls.canary_settings(spec, None, {"image": "img:2"}) is None


def _inp(**over: Any) -> rolls.RollInput:
    args: dict[str, Any] = {"now": 500.0, "storm": TopologyStatus.ACTIVE, "outdated": [], "all_ready": True,
                            "image": "img:2", "rebalance_wait": 30.0, "active": True, "template": "t2"}
    return rolls.RollInput(**{**args, **over})


def test_upgrade_after_records_a_rejection_the_last_good_and_forgets_the_rejection_on_a_new_spec() -> None:
    good = canary.Template("t1", "img:1")
    reject = rolls.Effect("reject", reason="FailedFraction", message="b failed 20%")
    back = rolls.Roll(rolls.ROLLING_BACK, 0.0, "img:1")
    out = rolls.upgrade_after(canary.Upgrade(good), back, [reject], _inp(outdated=[("p", A, "img:2")]), None, 3, "t2")
    assert out == canary.Upgrade(good, canary.Rejected("t2", "img:2", 3, "FailedFraction", "b failed 20%", 500.0))
    # every slot runs the wanted settings, ready: they are the last good; the spec still asks the rejected ones
    done = rolls.upgrade_after(out, None, [], _inp(template="t1", image="img:1"), {"image": "img:1"}, 3, "t2")
    assert done == canary.Upgrade(canary.Template("t1", "img:1", {"image": "img:1"}), out.rejected)
    # spec.worker changed: the rejection is forgotten, the next roll tries the new settings
    assert rolls.upgrade_after(done, None, [], _inp(template="t1", image="img:1"), {"image": "img:1"}, 4,
                               "t3") == canary.Upgrade(done.last_good, None)
    # not while rolling back
    assert rolls.upgrade_after(out, back, [], _inp(outdated=[("p", A, "img:2")]), None, 4, "t3") == out
