"""The roll of a topology's workers to new pod settings, step by step on plain values."""

from __future__ import annotations

from typing import Any

import pytest

from squall.models.cluster import TopologyStatus, WorkerSlot
from squall_operator.roll import DRAINING, REPLACING, Roll, RollInput, step

pytestmark = pytest.mark.unit

A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
OLD = [("wc-n1-6700", A, "img:1"), ("wc-n2-6700", B, "img:1")]


def _inp(**over: Any) -> RollInput:
    base: dict[str, Any] = dict(now=100.0, storm=TopologyStatus.ACTIVE, outdated=OLD, all_ready=False,
                                image="img:2", rebalance_wait=5.0, active=True)
    return RollInput(**{**base, **over})


def _kinds(effects: list[Any]) -> list[str]:
    return [e.kind if e.kind != "event" else e.reason for e in effects]


def test_a_roll_drains_replaces_and_reactivates() -> None:
    roll, effects = step(None, _inp())
    assert roll == Roll(DRAINING, 105.0, "img:2", ("img:1",))
    assert _kinds(effects) == ["deactivate", "RollStarted"]
    assert "image img:1 -> img:2" in effects[-1].message and "in 5s" in effects[-1].message
    # draining: nothing is deleted before the due time
    roll, effects = step(roll, _inp(now=104.0, storm=TopologyStatus.INACTIVE))
    assert roll is not None and roll.step == DRAINING and effects == []
    roll, effects = step(roll, _inp(now=105.0, storm=TopologyStatus.INACTIVE))
    assert roll is not None and roll.step == REPLACING
    assert _kinds(effects) == ["restamp", "RollReplacing", "delete"]
    assert effects[0].slots == (A, B) and effects[2].pods == ("wc-n1-6700", "wc-n2-6700")
    # new pods starting: wait until all are ready
    roll, effects = step(roll, _inp(now=106.0, storm=TopologyStatus.INACTIVE, outdated=[]))
    assert roll is not None and effects == []
    roll, effects = step(roll, _inp(now=110.0, storm=TopologyStatus.INACTIVE, outdated=[], all_ready=True))
    assert roll is None and _kinds(effects) == ["activate", "RollCompleted"]


def test_inactive_topology_rolls_at_once_and_stays_inactive() -> None:
    roll, effects = step(None, _inp(storm=TopologyStatus.INACTIVE, active=False))
    assert roll is not None and roll.due == 100.0 and _kinds(effects) == ["RollStarted"]
    roll, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, active=False))
    assert _kinds(effects) == ["restamp", "RollReplacing", "delete"]
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
