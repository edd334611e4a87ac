"""The roll of a topology's workers to new pod settings, step by step on plain values: the drain
roll (`spec.upgrade.mode: drain`) and what both modes share (tests/unit/test_roll_modes.py: the
hand-over roll, and the drain that ends when nothing is pending)."""

from __future__ import annotations

from typing import Any

import pytest

from squall.models.cluster import TopologyStatus, WorkerSlot
from squall_operator.roll import DRAIN, DRAINING, REPLACING, Roll, RollInput, step

pytestmark = pytest.mark.unit

A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
OLD = [("wc-n1-6700", A, "img:1"), ("wc-n2-6700", B, "img:1")]


def _inp(**over: Any) -> RollInput:
    base: dict[str, Any] = dict(now=100.0, storm=TopologyStatus.ACTIVE, outdated=OLD, all_ready=False,
                                image="img:2", rebalance_wait=5.0, active=True, mode=DRAIN)
    return RollInput(**{**base, **over})


def _kinds(effects: list[Any]) -> list[str]:
    return [e.kind if e.kind != "event" else e.reason for e in effects]


def test_a_roll_drains_then_replaces_a_slot_at_a_time_and_reactivates() -> None:
    both = frozenset({"wc-n1-6700", "wc-n2-6700"})
    roll, effects = step(None, _inp(ready=both))
    assert roll == Roll(DRAINING, 105.0, "img:2", ("img:1",), DRAIN, 100.0)
    assert _kinds(effects) == ["deactivate", "RollStarted"]
    assert "image img:1 -> img:2" in effects[-1].message and "in 5s" in effects[-1].message
    # draining: nothing is deleted before the due time
    roll, effects = step(roll, _inp(now=104.0, storm=TopologyStatus.INACTIVE, ready=both))
    assert roll is not None and roll.step == DRAINING and effects == []
    # replacing: one ready pod goes (its slot restamped), the other keeps running
    roll, effects = step(roll, _inp(now=105.0, storm=TopologyStatus.INACTIVE, ready=both))
    assert roll is not None and roll.step == REPLACING
    assert _kinds(effects) == ["RollReplacing", "restamp", "delete"]
    assert "one slot at a time" in effects[0].message
    assert effects[1].slots == (A,) and effects[2].pods == ("wc-n1-6700",)
    # its slot has no ready pod yet (deleted, or the new one starting): the next one waits
    left = [OLD[1]]
    for _ in range(3):
        roll, effects = step(roll, _inp(now=106.0, storm=TopologyStatus.INACTIVE, outdated=left,
                                        ready=frozenset({"wc-n2-6700"}), unavailable=1))
        assert roll is not None and roll.step == REPLACING and effects == []
    # the new pod on A is ready: the next slot goes
    roll, effects = step(roll, _inp(now=120.0, storm=TopologyStatus.INACTIVE, outdated=left,
                                    ready=frozenset({"wc-n1-6700", "wc-n2-6700"})))
    assert _kinds(effects) == ["restamp", "delete"] and effects[0].slots == (B,) and effects[1].pods == ("wc-n2-6700",)
    # new pods starting: wait until all are ready
    roll, effects = step(roll, _inp(now=121.0, storm=TopologyStatus.INACTIVE, outdated=[], unavailable=1))
    assert roll is not None and effects == []
    roll, effects = step(roll, _inp(now=130.0, storm=TopologyStatus.INACTIVE, outdated=[], all_ready=True))
    assert roll is None and _kinds(effects) == ["activate", "RollCompleted"]


def test_outdated_pods_that_are_not_ready_are_replaced_at_once() -> None:
    """They are unavailable already (crash-looping on the old image, say): waiting for them would
    stall the roll that may fix them, as a Deployment scales down unhealthy old pods first."""
    roll = Roll(REPLACING, 100.0, "img:2", ("img:1",))
    roll, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, ready=frozenset(), unavailable=2))
    assert _kinds(effects) == ["restamp", "delete"]
    assert effects[0].slots == (A, B) and effects[1].pods == ("wc-n1-6700", "wc-n2-6700")
    # one ready and one not: the unready one goes, the ready one waits (a slot is unavailable)
    roll, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, ready=frozenset({"wc-n1-6700"}), unavailable=1))
    assert effects[-1].pods == ("wc-n2-6700",)


def test_a_new_image_that_never_gets_ready_stops_the_roll_after_one_slot() -> None:
    roll = Roll(REPLACING, 100.0, "img:2", ("img:1",))
    for now in (100.0, 200.0, 900.0):
        roll, effects = step(roll, _inp(now=now, storm=TopologyStatus.INACTIVE, outdated=[OLD[1]],
                                        ready=frozenset({"wc-n2-6700"}), unavailable=1))
        assert roll is not None and roll.step == REPLACING and effects == []


def test_inactive_topology_rolls_without_draining_and_stays_inactive() -> None:
    roll, effects = step(None, _inp(storm=TopologyStatus.INACTIVE, active=False))
    assert roll is not None and roll.due == 100.0 and _kinds(effects) == ["RollStarted"]
    roll, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, active=False))
    assert _kinds(effects) == ["RollReplacing", "restamp", "delete"]
    roll, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, active=False, outdated=[], all_ready=True))
    assert roll is None and _kinds(effects) == ["RollCompleted"]


def test_a_rebalance_goes_first_and_a_kill_ends_the_roll() -> None:
    roll = Roll(DRAINING, 90.0, "img:2", ("img:1",))
    assert step(roll, _inp(storm=TopologyStatus.REBALANCING)) == (roll, [])
    assert step(None, _inp(storm=TopologyStatus.REBALANCING)) == (None, [])
    assert step(roll, _inp(storm=TopologyStatus.KILLED)) == (None, [])


def test_nothing_outdated_nothing_to_do_and_a_change_back_completes() -> None:
    assert step(None, _inp(outdated=[])) == (None, [])
    roll = Roll(DRAINING, 200.0, "img:2", ("img:1",))
    done, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, outdated=[], all_ready=True))
    assert done is None and _kinds(effects) == ["activate", "RollCompleted"]


def test_settings_change_without_image_change_says_so() -> None:
    _, effects = step(None, _inp(outdated=[("p", A, "img:2")]))
    assert effects[-1].message.startswith("pod settings changed")
