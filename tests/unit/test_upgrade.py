"""A graph upgrade's decisions on plain values and fake time (squall_operator.upgrade), and its
transitions in the lifecycle table (UPGRADE, DO_UPGRADE)."""

from __future__ import annotations

from typing import Any

import pytest

from squall import specchange
from squall.models.cluster import Assignment, ExecutorStats, TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall.models.v1alpha1 import Topology
from squall.plan import ACKER, build_plan
from squall_operator import lifecycle, upgrade
from squall_operator.lifecycle import Action, ActionName, LifecycleState, Resubmit, ScheduleDelayed, SetSpoutsActive

pytestmark = pytest.mark.unit

NOW = 1000.0
ACTIVE, INACTIVE, REBALANCING = TopologyStatus.ACTIVE, TopologyStatus.INACTIVE, TopologyStatus.REBALANCING


def topo(bolts: list[dict[str, Any]] | None = None, **spec: Any) -> Topology:
    return Topology.model_validate({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
        "spec": {"numWorkers": 2, "spouts": [{"name": "ids", "class": "m:S", "parallelism": 2}],
                 "bolts": bolts if bolts is not None else [
                     {"name": "pass", "class": "m:B", "parallelism": 2, "numTasks": 4,
                      "inputs": [{"component": "ids", "grouping": "shuffle"}]}],
                 **spec}})


WITH_TAP = [{"name": "pass", "class": "m:B", "parallelism": 2, "numTasks": 4,
             "inputs": [{"component": "ids", "grouping": "shuffle"}]},
            {"name": "tap", "class": "m:B", "parallelism": 3, "inputs": [{"component": "pass", "grouping": "shuffle"}]}]


# -- decide: the drain ---------------------------------------------------------------------------
def test_the_drain_ends_once_every_spout_reports_nothing_pending_after_the_deactivation() -> None:
    since, due = NOW, NOW + 30
    pending = {"1-1": (NOW + 1.5, 0), "2-2": (NOW + 1.5, 12)}
    assert upgrade.decide(since, due, pending, NOW + 1.6) == upgrade.Decision(False)
    done = upgrade.decide(since, due, {"1-1": (NOW + 2.5, 0), "2-2": (NOW + 2.5, 0)}, NOW + 2.6)
    assert done.go and done.why == "nothing pending 2.6s after the deactivation"


def test_a_heartbeat_taken_before_the_deactivation_settled_proves_nothing() -> None:
    # 0 pending in a beat 0.5 s after the deactivation: the worker may not have seen it yet
    assert not upgrade.decide(NOW, NOW + 30, {"1-1": (NOW + 0.5, 0)}, NOW + 0.6).go
    # a spout no heartbeat reports, or no spout at all, is not drained either
    assert not upgrade.decide(NOW, NOW + 30, {"1-1": (NOW + 2, 0), "2-2": None}, NOW + 2.1).go
    assert not upgrade.decide(NOW, NOW + 30, {}, NOW + 5).go


def test_the_wait_s_end_launches_whatever_is_pending_and_says_it_is_replayed() -> None:
    d = upgrade.decide(NOW, NOW + 30, {"1-1": (NOW + 29, 7), "2-2": None}, NOW + 30)
    assert d.go and d.why == "the drain's wait (30s) passed with 7 tuple trees pending (the spouts replay them)"
    assert not upgrade.decide(NOW, NOW + 30, {"1-1": (NOW + 29, 7)}, NOW + 29.9).go


def test_spout_beats_reads_each_assigned_spout_executor_from_its_slot_s_heartbeat() -> None:
    t = topo()
    plan = build_plan(t, {}, {"ids": 2, "pass": 2, ACKER: 2})
    a, b = WorkerSlot("n1", 1), WorkerSlot("n1", 2)
    spouts = [e for e in plan.executors if plan.executor_component(e) == "ids"]
    others = [e for e in plan.executors if plan.executor_component(e) != "ids"]
    assignment = Assignment(executor_slots={
        f"{spouts[0][0]}-{spouts[0][1]}": a.key(), f"{spouts[1][0]}-{spouts[1][1]}": b.key(),
        **{f"{e[0]}-{e[1]}": a.key() for e in others}})
    k0, k1 = (f"{e[0]}-{e[1]}" for e in spouts)
    beats = {a: WorkerHeartbeat(time_secs=NOW + 2, uptime_secs=5,
                                executors={k0: ExecutorStats(component="ids", pending=3)})}
    assert upgrade.spout_beats(plan, assignment, beats) == {k0: (NOW + 2, 3), k1: None}


# -- launch: what is stored ----------------------------------------------------------------------
def test_launch_keeps_the_running_topology_s_other_paths_and_rebalanced_counts() -> None:
    running = topo(numWorkers=2)
    new = topo(WITH_TAP, numWorkers=5, active=False)
    data, counts = upgrade.launch(running, {"ids": 1, "pass": 4, ACKER: 3}, new)
    stored = Topology.model_validate(data)
    # numWorkers and active are other paths' (a rebalance, activate): the running values stay
    assert stored.spec.num_workers == 2 and stored.spec.active is True
    assert [b.name for b in stored.spec.bolts] == ["pass", "tap"]
    # pass keeps its rebalanced 4 executors (same 4 tasks), tap gets its parallelism; the acker
    # keeps its count (numAckers unset in both)
    assert counts == {"ids": 1, "pass": 4, "tap": 3, ACKER: 3}


def test_launch_takes_the_new_parallelism_where_the_task_count_changed() -> None:
    running = topo()
    bolts = [{"name": "pass", "class": "m:B", "parallelism": 3, "numTasks": 6,
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}]
    _data, counts = upgrade.launch(running, {"ids": 2, "pass": 4, ACKER: 2}, topo(bolts, numAckers=1))
    assert counts == {"ids": 2, "pass": 3, ACKER: 1}


REDIS = {"topology.state.provider": "redis", "topology.state.provider.config": {"host": "localhost"}}
STATEFUL = [{"name": "count", "class": "m:B", "stateful": True, "parallelism": 2, "numTasks": 4,
             "inputs": [{"component": "ids", "grouping": "shuffle"}]}]


def test_a_stateful_graph_upgrade_carries_its_state_in_redis_and_is_refused_in_memory() -> None:
    """The memory provider keeps state in the workers that the upgrade replaces: refused with
    the components named; in Redis it is carried over; a stateless topology gaining its first
    stateful bolt has no state to carry."""
    added = STATEFUL + [{"name": "tap", "class": "m:B", "inputs": [{"component": "count", "grouping": "shuffle"}]}]
    running, new = topo(STATEFUL), topo(added)
    change = specchange.classify(running.spec, new.spec)
    assert change.kind is specchange.Kind.UPGRADE and change.upgrade == ("added tap",)
    why = upgrade.refusal(running, new, change)
    assert why is not None and why.startswith("count keeps its state in the memory state provider") \
        and "set topology.state.provider to redis" in why, why
    in_redis, new_in_redis = topo(STATEFUL, config=REDIS), topo(added, config=REDIS)
    assert upgrade.refusal(in_redis, new_in_redis, specchange.classify(in_redis.spec, new_in_redis.spec)) is None
    assert upgrade.refusal(topo(), running, specchange.classify(topo().spec, running.spec)) is None
    assert upgrade.refusal(topo(), topo(WITH_TAP), specchange.classify(topo().spec, topo(WITH_TAP).spec)) is None


def test_state_tasks_keeps_the_old_launch_s_task_ids_of_the_stateful_components() -> None:
    running = topo(STATEFUL, config=REDIS)
    plan = build_plan(running, {})
    tasks = upgrade.state_tasks(running, plan.component_tasks)
    assert tasks == {"$checkpointspout": list(plan.component_tasks["$checkpointspout"]),
                     "count": list(plan.component_tasks["count"])}
    assert len(tasks["count"]) == 4
    # the new graph's first bolt sorts before count: count's tasks move, its indexes do not
    moved = build_plan(topo([{"name": "aaa", "class": "m:B", "inputs": [{"component": "ids", "grouping": "shuffle"}]},
                             *STATEFUL], config=REDIS), {})
    assert moved.component_tasks["count"] != plan.component_tasks["count"]
    assert upgrade.state_tasks(topo(), build_plan(topo(), {}).component_tasks) is None
    # a windowed bolt of a stateful topology checkpoints its windows: its tasks are kept too
    windowed = topo([*STATEFUL, {"name": "win", "class": "m:W", "window": {"windowLength": 3},
                                 "inputs": [{"component": "count", "grouping": "shuffle"}]}], config=REDIS)
    kept = upgrade.state_tasks(windowed, build_plan(windowed, {}).component_tasks)
    assert kept is not None and sorted(kept) == ["$checkpointspout", "count", "win"]


def test_the_drain_does_not_wait_for_the_checkpoint_spout_s_own_round() -> None:
    running = topo(STATEFUL, config=REDIS)
    plan = build_plan(running, {}, {"ids": 1, "count": 1, ACKER: 1})
    slot = WorkerSlot("n", 1)
    assignment = Assignment(executor_slots={f"{a}-{b}": slot.key() for ex in plan.component_executors.values()
                                            for a, b in ex})
    cp = plan.component_executors["$checkpointspout"][0]
    ids = plan.component_executors["ids"][0]
    beat = WorkerHeartbeat(time_secs=NOW + 1, uptime_secs=5, executors={
        f"{cp[0]}-{cp[1]}": ExecutorStats(component="$checkpointspout", pending=1),
        f"{ids[0]}-{ids[1]}": ExecutorStats(component="ids", pending=0)})
    spouts = upgrade.spout_beats(plan, assignment, {slot: beat})
    assert spouts == {f"{ids[0]}-{ids[1]}": (NOW + 1, 0)}
    assert upgrade.decide(NOW, NOW + 30, spouts, NOW + 1).go


# -- the lifecycle's upgrade transitions ---------------------------------------------------------
@pytest.mark.parametrize("status", [ACTIVE, INACTIVE])
def test_upgrade_deactivates_and_schedules_the_launch_after_the_wait(status: TopologyStatus) -> None:
    step = lifecycle.transition(LifecycleState(status), Action.upgrade(30), NOW)
    assert step.state == LifecycleState(REBALANCING, prev_status=status, delayed_action=ActionName.DO_UPGRADE,
                                        delayed_due=NOW + 30)
    assert step.effects == (SetSpoutsActive(False), ScheduleDelayed(ActionName.DO_UPGRADE, NOW + 30))


@pytest.mark.parametrize("status", [ACTIVE, INACTIVE])
def test_do_upgrade_resubmits_and_restores_the_activation(status: TopologyStatus) -> None:
    upgrading = lifecycle.transition(LifecycleState(status), Action.upgrade(30), NOW).state
    # due at the wait's end, or run early by the shell once drained
    assert lifecycle.due_actions(upgrading, NOW + 30) == (Action(ActionName.DO_UPGRADE),)
    step = lifecycle.transition(upgrading, Action.do_upgrade(), NOW + 2)
    assert step.state == LifecycleState(status)
    assert step.effects == (Resubmit(), SetSpoutsActive(status is ACTIVE))


def test_a_rebalance_is_not_cut_short_by_an_upgrade_s_drain() -> None:
    rebalancing = lifecycle.transition(LifecycleState(ACTIVE), Action.rebalance(30, 3), NOW).state
    with pytest.raises(lifecycle.InvalidTransition):
        lifecycle.transition(rebalancing, Action.do_upgrade(), NOW + 2)


def test_a_restarted_nimbus_resumes_the_upgrade_s_countdown() -> None:
    upgrading = lifecycle.transition(LifecycleState(ACTIVE), Action.upgrade(30), NOW).state
    step = lifecycle.transition(upgrading, Action.startup(), NOW + 10)
    assert step.state == upgrading
    assert step.effects == (ScheduleDelayed(ActionName.DO_UPGRADE, NOW + 30),)
    # a kill during the upgrade wins, as during a rebalance
    killed = lifecycle.transition(upgrading, Action.kill(5), NOW + 10)
    assert killed.state.status is TopologyStatus.KILLED
