"""The topology lifecycle as a transition table of data (Storm's Nimbus TOPO_STATE_TRANSITIONS).

`TRANSITIONS` maps each status to the actions allowed in it and the handler computing the next
state. Handlers do no I/O: they return the new `LifecycleState` and the work to do as `Effect`
values, which the nimbus shell applies (store the state first, then the effects). Delayed work
("remove the topology 30 s from now") is an effect too, `ScheduleDelayed`, with an absolute due
time kept in the state, so a restarted nimbus resumes the countdown (action STARTUP) instead of
starting it over. Time is passed in; nothing here reads a clock.

A topology has at most one pending delayed action: `ScheduleDelayed` replaces any earlier one.
Timers in the shell are only wake-ups: when one fires, the shell asks `due_actions` what is due
according to the stored state, so a superseded timer does nothing.

Spouts are active exactly when the status is ACTIVE: every transition that changes the status
emits `SetSpoutsActive(new status is ACTIVE)` (workers treat it as idempotent), and a transition
that keeps the status (activate while ACTIVE, a second kill) emits no such effect.

A kill waits what it asked for: the topology is removed no sooner than every kill's
``now + wait_secs``, so a second kill keeps the pending removal or moves it later, never
earlier. (Storm's nimbus schedules one more REMOVE per kill and the earliest fires, so there a
`kill -w 0` cuts a `kill -w 30` short; Squall keeps the first kill's promise that bolts get
their wait to flush.)
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from squall.models.cluster import StormBase, TopologyStatus

__all__ = [
    "Action",
    "ActionName",
    "Effect",
    "InvalidTransition",
    "LifecycleState",
    "Reassign",
    "RemoveTopology",
    "Resubmit",
    "ScheduleDelayed",
    "SetSpoutsActive",
    "TRANSITIONS",
    "Transition",
    "due_actions",
    "from_storm_base",
    "to_storm_fields",
    "transition",
]


class ActionName(str, enum.Enum):
    ACTIVATE = "ACTIVATE"
    DEACTIVATE = "DEACTIVATE"
    REBALANCE = "REBALANCE"
    KILL = "KILL"
    # a graph upgrade (squall_operator.upgrade): a rebalance whose end launches the new graph
    UPGRADE = "UPGRADE"
    # internal, delayed: due after a rebalance's, an upgrade's or a kill's wait (an upgrade's is
    # also run early, once its spouts have drained)
    DO_REBALANCE = "DO_REBALANCE"
    DO_UPGRADE = "DO_UPGRADE"
    REMOVE = "REMOVE"
    # nimbus (re)started: resume the pending delayed action
    STARTUP = "STARTUP"

    @property
    def verb(self) -> str:
        return self.value.lower().replace("_", "-")


@dataclass(frozen=True)
class Action:
    """An action and its arguments; build them with the class methods."""

    name: ActionName
    # KILL, REBALANCE: seconds to wait before REMOVE / DO_REBALANCE
    wait_secs: float = 0.0
    # REBALANCE: new worker count and component -> executors; None keeps the current value
    num_workers: int | None = None
    executors: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.wait_secs) or self.wait_secs < 0:
            raise ValueError(f"wait_secs must be a finite number >= 0, got {self.wait_secs}")
        if self.num_workers is not None and self.num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, got {self.num_workers}")
        for component, count in (self.executors or {}).items():
            if count < 1:
                raise ValueError(
                    f"component {component}: executors must be at least 1, got {count}"
                )

    @classmethod
    def activate(cls) -> Action:
        return cls(ActionName.ACTIVATE)

    @classmethod
    def deactivate(cls) -> Action:
        return cls(ActionName.DEACTIVATE)

    @classmethod
    def kill(cls, wait_secs: float) -> Action:
        return cls(ActionName.KILL, wait_secs=wait_secs)

    @classmethod
    def rebalance(
        cls,
        wait_secs: float,
        num_workers: int | None = None,
        executors: Mapping[str, int] | None = None,
    ) -> Action:
        return cls(
            ActionName.REBALANCE,
            wait_secs=wait_secs,
            num_workers=num_workers,
            executors=None if executors is None else dict(executors),
        )

    @classmethod
    def upgrade(cls, wait_secs: float) -> Action:
        return cls(ActionName.UPGRADE, wait_secs=wait_secs)

    @classmethod
    def do_rebalance(cls) -> Action:
        return cls(ActionName.DO_REBALANCE)

    @classmethod
    def do_upgrade(cls) -> Action:
        return cls(ActionName.DO_UPGRADE)

    @classmethod
    def remove(cls) -> Action:
        return cls(ActionName.REMOVE)

    @classmethod
    def startup(cls) -> Action:
        return cls(ActionName.STARTUP)


@dataclass(frozen=True)
class LifecycleState:
    """The part of StormBase the lifecycle owns."""

    status: TopologyStatus
    # status to restore after a rebalance
    prev_status: TopologyStatus | None = None
    # pending delayed action (DO_REBALANCE or REMOVE) and when it is due, wall-clock seconds
    delayed_action: ActionName | None = None
    delayed_due: float | None = None
    # rebalance targets while REBALANCING; None keeps the current value
    rebalance_num_workers: int | None = None
    rebalance_executors: Mapping[str, int] | None = None


@dataclass(frozen=True)
class SetSpoutsActive:
    """Workers should (de)activate their spouts (follows from the stored status)."""

    active: bool


@dataclass(frozen=True)
class ScheduleDelayed:
    """Run `action` at `due` (absolute seconds); replaces any earlier delayed action."""

    action: ActionName
    due: float


@dataclass(frozen=True)
class Reassign:
    """Apply the rebalance targets (None: keep current) and compute a new assignment."""

    num_workers: int | None
    executors: Mapping[str, int] | None


@dataclass(frozen=True)
class RemoveTopology:
    """Stop the workers and delete the topology's cluster state."""


@dataclass(frozen=True)
class Resubmit:
    """Launch the upgrade's new graph: store it with a new launch time (the workers of the old
    launch are replaced) and compute a new assignment."""


Effect = SetSpoutsActive | ScheduleDelayed | Reassign | RemoveTopology | Resubmit


@dataclass(frozen=True)
class Transition:
    state: LifecycleState
    effects: tuple[Effect, ...] = ()


class InvalidTransition(Exception):
    """The action is not allowed in the topology's current status."""

    def __init__(self, status: TopologyStatus, action: ActionName) -> None:
        super().__init__(f"cannot {action.verb} topology in state {status.value}")
        self.status = status
        self.action = action


Handler = Callable[[LifecycleState, Action, float], Transition]


def _no_op(state: LifecycleState, action: Action, now: float) -> Transition:
    return Transition(state)


def _to(status: TopologyStatus) -> Handler:
    def handler(state: LifecycleState, action: Action, now: float) -> Transition:
        return Transition(
            replace(state, status=status),
            (SetSpoutsActive(status is TopologyStatus.ACTIVE),),
        )

    return handler


def _kill(state: LifecycleState, action: Action, now: float) -> Transition:
    due = now + action.wait_secs
    if state.status is TopologyStatus.KILLED:
        # every kill's wait is honoured: a second kill may lengthen the wait, never shorten it
        # (bolts flushing within the first kill's wait are not cut off by a later `kill -w 0`)
        if state.delayed_due is not None and state.delayed_due >= due:
            return Transition(state)
        return Transition(
            replace(state, delayed_action=ActionName.REMOVE, delayed_due=due),
            (ScheduleDelayed(ActionName.REMOVE, due),),
        )
    killed = LifecycleState(
        status=TopologyStatus.KILLED, delayed_action=ActionName.REMOVE, delayed_due=due
    )
    return Transition(killed, (SetSpoutsActive(False), ScheduleDelayed(ActionName.REMOVE, due)))


def _drain_then(state: LifecycleState, then: ActionName, due: float, **asked: Any) -> Transition:
    """REBALANCING with the spouts deactivated until `due`, when `then` runs."""
    draining = LifecycleState(status=TopologyStatus.REBALANCING, prev_status=state.status,
                              delayed_action=then, delayed_due=due, **asked)
    return Transition(draining, (SetSpoutsActive(False), ScheduleDelayed(then, due)))


def _rebalance(state: LifecycleState, action: Action, now: float) -> Transition:
    return _drain_then(state, ActionName.DO_REBALANCE, now + action.wait_secs,
                       rebalance_num_workers=action.num_workers, rebalance_executors=action.executors)


def _upgrade(state: LifecycleState, action: Action, now: float) -> Transition:
    # Storm's rebalance with another end: the spouts deactivated, the new graph launched once
    # they have drained (the shell runs DO_UPGRADE early) or after the wait at the most
    return _drain_then(state, ActionName.DO_UPGRADE, now + action.wait_secs)


def _do_upgrade(state: LifecycleState, action: Action, now: float) -> Transition:
    if state.delayed_action is not ActionName.DO_UPGRADE:
        # a rebalance's wait is Storm's and is not cut short by an upgrade's drain
        raise InvalidTransition(state.status, action.name)
    restored = state.prev_status or TopologyStatus.ACTIVE
    return Transition(
        LifecycleState(status=restored),
        (Resubmit(), SetSpoutsActive(restored is TopologyStatus.ACTIVE)),
    )


def _do_rebalance(state: LifecycleState, action: Action, now: float) -> Transition:
    restored = state.prev_status or TopologyStatus.ACTIVE
    return Transition(
        LifecycleState(status=restored),
        (
            Reassign(state.rebalance_num_workers, state.rebalance_executors),
            SetSpoutsActive(restored is TopologyStatus.ACTIVE),
        ),
    )


def _remove(state: LifecycleState, action: Action, now: float) -> Transition:
    # the state is stored before the effect runs: a nimbus that dies while removing finds
    # KILLED with nothing pending, and STARTUP removes again
    return Transition(replace(state, delayed_action=None, delayed_due=None), (RemoveTopology(),))


def _resume(default: ActionName) -> Handler:
    def handler(state: LifecycleState, action: Action, now: float) -> Transition:
        due = state.delayed_due if state.delayed_due is not None else now
        # REBALANCING waits for DO_REBALANCE or an upgrade's DO_UPGRADE, whichever is stored
        pending = state.delayed_action if state.delayed_action is not None else default
        return Transition(
            replace(state, delayed_action=pending, delayed_due=due),
            (ScheduleDelayed(pending, due),),
        )

    return handler


# status -> action -> handler; an action missing from a status's row is invalid there
TRANSITIONS: Mapping[TopologyStatus, Mapping[ActionName, Handler]] = {
    TopologyStatus.ACTIVE: {
        ActionName.ACTIVATE: _no_op,
        ActionName.DEACTIVATE: _to(TopologyStatus.INACTIVE),
        ActionName.REBALANCE: _rebalance,
        ActionName.UPGRADE: _upgrade,
        ActionName.KILL: _kill,
        ActionName.STARTUP: _no_op,
    },
    TopologyStatus.INACTIVE: {
        ActionName.ACTIVATE: _to(TopologyStatus.ACTIVE),
        ActionName.DEACTIVATE: _no_op,
        ActionName.REBALANCE: _rebalance,
        ActionName.UPGRADE: _upgrade,
        ActionName.KILL: _kill,
        ActionName.STARTUP: _no_op,
    },
    TopologyStatus.REBALANCING: {
        ActionName.KILL: _kill,
        ActionName.DO_REBALANCE: _do_rebalance,
        ActionName.DO_UPGRADE: _do_upgrade,
        ActionName.STARTUP: _resume(ActionName.DO_REBALANCE),
    },
    TopologyStatus.KILLED: {
        ActionName.KILL: _kill,
        ActionName.REMOVE: _remove,
        ActionName.STARTUP: _resume(ActionName.REMOVE),
    },
}


def transition(state: LifecycleState, action: Action, now: float) -> Transition:
    """The next state and the effects to apply; raises `InvalidTransition` when not allowed."""
    handler = TRANSITIONS[state.status].get(action.name)
    if handler is None:
        raise InvalidTransition(state.status, action.name)
    return handler(state, action, now)


def due_actions(state: LifecycleState, now: float) -> tuple[Action, ...]:
    """The pending delayed action if it is due at `now` (at most one)."""
    if state.delayed_action is None or state.delayed_due is None or state.delayed_due > now:
        return ()
    return (Action(state.delayed_action),)


def to_storm_fields(state: LifecycleState) -> dict[str, Any]:
    """StormBase fields for `state`: ``base.model_copy(update=to_storm_fields(state))``."""
    return {
        "status": state.status,
        "prev_status": state.prev_status,
        "delayed_action": None if state.delayed_action is None else state.delayed_action.value,
        "delayed_due_secs": state.delayed_due,
        "rebalance_num_workers": state.rebalance_num_workers,
        "rebalance_executors": (
            None if state.rebalance_executors is None else dict(state.rebalance_executors)
        ),
    }


def from_storm_base(base: StormBase) -> LifecycleState:
    """The lifecycle state stored in `base`; raises ValueError on an unknown delayed action."""
    return LifecycleState(
        status=base.status,
        prev_status=base.prev_status,
        delayed_action=None if base.delayed_action is None else ActionName(base.delayed_action),
        delayed_due=base.delayed_due_secs,
        rebalance_num_workers=base.rebalance_num_workers,
        rebalance_executors=(
            None if base.rebalance_executors is None else dict(base.rebalance_executors)
        ),
    )
