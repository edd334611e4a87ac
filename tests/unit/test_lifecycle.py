"""The lifecycle transition table, step by step on fake time."""

from __future__ import annotations

import pytest

from squall.models.cluster import StormBase, TopologyStatus
from squall_operator.lifecycle import (
    TRANSITIONS,
    Action,
    ActionName,
    InvalidTransition,
    LifecycleState,
    Reassign,
    RemoveTopology,
    ScheduleDelayed,
    SetSpoutsActive,
    Transition,
    due_actions,
    from_storm_base,
    to_storm_fields,
    transition,
)

pytestmark = pytest.mark.unit

ACTIVE, INACTIVE = TopologyStatus.ACTIVE, TopologyStatus.INACTIVE
REBALANCING, KILLED = TopologyStatus.REBALANCING, TopologyStatus.KILLED

NOW = 1000.0

ALLOWED = {
    ACTIVE: {"ACTIVATE", "DEACTIVATE", "REBALANCE", "UPGRADE", "KILL", "STARTUP"},
    INACTIVE: {"ACTIVATE", "DEACTIVATE", "REBALANCE", "UPGRADE", "KILL", "STARTUP"},
    REBALANCING: {"KILL", "DO_REBALANCE", "DO_UPGRADE", "STARTUP"},
    KILLED: {"KILL", "REMOVE", "STARTUP"},
}

ACTIONS = {
    ActionName.ACTIVATE: Action.activate(),
    ActionName.DEACTIVATE: Action.deactivate(),
    ActionName.REBALANCE: Action.rebalance(10),
    ActionName.KILL: Action.kill(30),
    ActionName.DO_REBALANCE: Action.do_rebalance(),
    ActionName.UPGRADE: Action.upgrade(30),
    ActionName.DO_UPGRADE: Action.do_upgrade(),
    ActionName.REMOVE: Action.remove(),
    ActionName.STARTUP: Action.startup(),
}


def rebalancing(prev: TopologyStatus = ACTIVE, due: float = NOW + 10) -> LifecycleState:
    return LifecycleState(
        status=REBALANCING,
        prev_status=prev,
        delayed_action=ActionName.DO_REBALANCE,
        delayed_due=due,
        rebalance_num_workers=3,
        rebalance_executors={"split": 4},
    )


def killed(due: float = NOW + 30) -> LifecycleState:
    return LifecycleState(status=KILLED, delayed_action=ActionName.REMOVE, delayed_due=due)


STATES = {
    ACTIVE: LifecycleState(ACTIVE),
    INACTIVE: LifecycleState(INACTIVE),
    REBALANCING: rebalancing(),
    KILLED: killed(),
}


def test_table_allows_exactly_the_storm_actions() -> None:
    assert {s: {a.value for a in row} for s, row in TRANSITIONS.items()} == ALLOWED


@pytest.mark.parametrize(
    ("status", "name"),
    [(s, a) for s in TopologyStatus for a in ActionName if a.value not in ALLOWED[s]],
)
def test_invalid_transitions_raise_naming_state_and_action(
    status: TopologyStatus, name: ActionName
) -> None:
    with pytest.raises(InvalidTransition) as raised:
        transition(STATES[status], ACTIONS[name], NOW)
    verb = name.value.lower().replace("_", "-")
    assert str(raised.value) == f"cannot {verb} topology in state {status.value}"
    assert raised.value.status is status and raised.value.action is name


def test_invalid_message_example() -> None:
    with pytest.raises(InvalidTransition, match="^cannot rebalance topology in state KILLED$"):
        transition(killed(), Action.rebalance(5, num_workers=2), NOW)


def test_activate_inactive() -> None:
    assert transition(LifecycleState(INACTIVE), Action.activate(), NOW) == Transition(
        LifecycleState(ACTIVE), (SetSpoutsActive(True),)
    )


def test_deactivate_active() -> None:
    assert transition(LifecycleState(ACTIVE), Action.deactivate(), NOW) == Transition(
        LifecycleState(INACTIVE), (SetSpoutsActive(False),)
    )


@pytest.mark.parametrize(
    ("status", "action"),
    [
        (ACTIVE, Action.activate()),
        (INACTIVE, Action.deactivate()),
        (ACTIVE, Action.startup()),
        (INACTIVE, Action.startup()),
    ],
)
def test_no_ops(status: TopologyStatus, action: Action) -> None:
    assert transition(LifecycleState(status), action, NOW) == Transition(LifecycleState(status))


@pytest.mark.parametrize("status", [ACTIVE, INACTIVE, REBALANCING])
def test_kill_deactivates_and_schedules_remove(status: TopologyStatus) -> None:
    result = transition(STATES[status], Action.kill(30), NOW)
    assert result == Transition(
        killed(NOW + 30),
        (SetSpoutsActive(False), ScheduleDelayed(ActionName.REMOVE, NOW + 30)),
    )
    # nothing of a rebalance in progress survives a kill
    assert result.state.prev_status is None and result.state.rebalance_num_workers is None


def test_kill_while_killed_never_shortens_the_wait() -> None:
    """`kill -w 30` then `kill -w 5` (or the runner's `kill -w 0`): still removed at +30."""
    state = killed(NOW + 30)
    assert transition(state, Action.kill(5), NOW) == Transition(state)
    assert transition(state, Action.kill(0), NOW + 29) == Transition(state)
    assert transition(state, Action.kill(30), NOW) == Transition(state)
    # a longer wait asked later is honoured too: removed no sooner than every kill asked
    longer = transition(state, Action.kill(60), NOW + 10)
    assert longer == Transition(killed(NOW + 70), (ScheduleDelayed(ActionName.REMOVE, NOW + 70),))


def test_kill_wait_is_kept_on_an_injected_clock() -> None:
    """`squall kill NAME -w 5` at t=0, then kills with shorter waits on the way: REMOVE is due at
    5 s and not one tick before, whatever comes between."""
    t0 = NOW
    state = transition(LifecycleState(ACTIVE), Action.kill(5), t0).state
    for t, wait in ((t0 + 1.0, 0.0), (t0 + 2.5, 1.0), (t0 + 4.9, 0.0)):
        state = transition(state, Action.kill(wait), t).state
        assert due_actions(state, t) == ()
    assert due_actions(state, t0 + 4.999) == ()
    assert due_actions(state, t0 + 5.0) == (Action.remove(),)


def test_kill_while_killed_with_nothing_pending_schedules_the_removal() -> None:
    """KILLED with nothing pending (a nimbus that died while removing): a kill removes again."""
    state = LifecycleState(KILLED)
    assert transition(state, Action.kill(2), NOW) == Transition(
        killed(NOW + 2), (ScheduleDelayed(ActionName.REMOVE, NOW + 2),))


def test_remove_in_killed_removes_the_topology() -> None:
    result = transition(killed(NOW), Action.remove(), NOW)
    assert result == Transition(LifecycleState(KILLED), (RemoveTopology(),))


@pytest.mark.parametrize("status", [ACTIVE, INACTIVE])
def test_rebalance_deactivates_and_schedules_do_rebalance(status: TopologyStatus) -> None:
    result = transition(
        LifecycleState(status), Action.rebalance(10, num_workers=3, executors={"split": 4}), NOW
    )
    assert result == Transition(
        rebalancing(prev=status, due=NOW + 10),
        (SetSpoutsActive(False), ScheduleDelayed(ActionName.DO_REBALANCE, NOW + 10)),
    )


@pytest.mark.parametrize("prev", [ACTIVE, INACTIVE])
def test_do_rebalance_reassigns_and_restores_the_previous_status(prev: TopologyStatus) -> None:
    result = transition(rebalancing(prev=prev), Action.do_rebalance(), NOW + 10)
    assert result == Transition(
        LifecycleState(prev),
        (Reassign(num_workers=3, executors={"split": 4}), SetSpoutsActive(prev is ACTIVE)),
    )


def test_rebalance_without_targets_keeps_current_values() -> None:
    state = transition(LifecycleState(ACTIVE), Action.rebalance(0), NOW).state
    result = transition(state, Action.do_rebalance(), NOW)
    assert result.effects[0] == Reassign(num_workers=None, executors=None)


@pytest.mark.parametrize(
    ("state", "pending"),
    [(killed(NOW + 30), ActionName.REMOVE), (rebalancing(due=NOW + 10), ActionName.DO_REBALANCE)],
)
def test_startup_resumes_the_countdown_at_the_stored_due_time(
    state: LifecycleState, pending: ActionName
) -> None:
    assert state.delayed_due is not None
    # nimbus restarts 7 s later: the due time stays where it was, no fresh wait
    result = transition(state, Action.startup(), NOW + 7)
    assert result == Transition(state, (ScheduleDelayed(pending, state.delayed_due),))


def test_startup_in_killed_with_nothing_pending_removes_now() -> None:
    # a nimbus that died while removing: the REMOVE transition was stored, the cleanup not done
    result = transition(LifecycleState(KILLED), Action.startup(), NOW)
    assert result.effects == (ScheduleDelayed(ActionName.REMOVE, NOW),)
    assert due_actions(result.state, NOW) == (Action.remove(),)


def test_due_actions() -> None:
    state = killed(NOW + 30)
    assert due_actions(state, NOW) == ()
    assert due_actions(state, NOW + 29.999) == ()
    assert due_actions(state, NOW + 30) == (Action.remove(),)
    assert due_actions(rebalancing(due=NOW), NOW + 1) == (Action.do_rebalance(),)
    assert due_actions(LifecycleState(ACTIVE), NOW) == ()


def test_kill_then_remove_on_fake_time() -> None:
    state = LifecycleState(ACTIVE)
    state = transition(state, Action.kill(30), NOW).state
    assert due_actions(state, NOW + 10) == ()
    (remove,) = due_actions(state, NOW + 30)
    assert transition(state, remove, NOW + 30).effects == (RemoveTopology(),)


def test_action_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="wait_secs"):
        Action.kill(-1)
    for endless in (float("inf"), float("nan")):  # a due time JSON could not store
        with pytest.raises(ValueError, match="wait_secs"):
            Action.kill(endless)
        with pytest.raises(ValueError, match="wait_secs"):
            Action.rebalance(endless)
    with pytest.raises(ValueError, match="num_workers"):
        Action.rebalance(0, num_workers=0)
    with pytest.raises(ValueError, match="split"):
        Action.rebalance(0, executors={"split": 0})


def storm_base(**fields: object) -> StormBase:
    base = StormBase(
        name="wordcount",
        status=ACTIVE,
        launch_time_secs=NOW,
        num_workers=2,
        component_executors={"split": 2},
        topology={},
    )
    return base.model_copy(update=fields)


@pytest.mark.parametrize("state", list(STATES.values()) + [LifecycleState(KILLED)])
def test_storm_base_round_trip(state: LifecycleState) -> None:
    base = storm_base(**to_storm_fields(state))
    assert from_storm_base(base) == state
    # through JSON, as stored in ZooKeeper
    assert from_storm_base(StormBase.model_validate_json(base.model_dump_json())) == state


def test_storm_fields() -> None:
    assert to_storm_fields(rebalancing(prev=INACTIVE, due=NOW)) == {
        "status": REBALANCING,
        "prev_status": INACTIVE,
        "delayed_action": "DO_REBALANCE",
        "delayed_due_secs": NOW,
        "rebalance_num_workers": 3,
        "rebalance_executors": {"split": 4},
    }


def test_unknown_stored_delayed_action_is_refused() -> None:
    with pytest.raises(ValueError):
        from_storm_base(storm_base(status=KILLED, delayed_action="explode", delayed_due_secs=NOW))
