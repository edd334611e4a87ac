"""The two roll modes (`spec.upgrade.mode`) on plain values: the hand-over roll (the default)
replaces the workers slot by slot with the spouts active; the drain roll ends its drain as soon as
the spouts' heartbeats after the deactivation say nothing is pending, `rebalanceWaitSecs` at the
most (tests/unit/test_operator_roll.py: the rest of the drain roll)."""

from __future__ import annotations

from typing import Any

import pytest

from squall.models.cluster import TopologyStatus, WorkerSlot
from squall.models.v1alpha1 import Topology, UpgradeMode
from squall.specchange import Kind, classify
from squall_operator.roll import (
    BEAT_MARGIN,
    DRAIN,
    DRAINING,
    HANDOVER,
    REPLACING,
    Roll,
    RollInput,
    drained,
    step,
)

pytestmark = pytest.mark.unit

A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
OLD = [("wc-n1-6700", A, "img:1"), ("wc-n2-6700", B, "img:1")]
BOTH = frozenset({"wc-n1-6700", "wc-n2-6700"})


def _inp(**over: Any) -> RollInput:
    base: dict[str, Any] = dict(now=100.0, storm=TopologyStatus.ACTIVE, outdated=OLD, all_ready=False,
                                image="img:2", rebalance_wait=30.0, active=True, ready=BOTH)
    return RollInput(**{**base, **over})


def _kinds(effects: list[Any]) -> list[str]:
    return [e.kind if e.kind != "event" else e.reason for e in effects]


def test_handover_is_the_default_mode() -> None:
    assert RollInput(now=0, storm=TopologyStatus.ACTIVE, outdated=[], all_ready=True, image="i",
                     rebalance_wait=1, active=True).mode == HANDOVER
    spec = {"spouts": [{"name": "s", "class": "m:S"}]}
    t = Topology.model_validate({"metadata": {"name": "t"}, "spec": spec})
    assert t.spec.upgrade is None
    t = Topology.model_validate({"metadata": {"name": "t"}, "spec": {**spec, "upgrade": {"mode": "drain"}}})
    assert t.spec.upgrade is not None and t.spec.upgrade.mode is UpgradeMode.DRAIN
    with pytest.raises(ValueError, match="mode"):
        Topology.model_validate({"metadata": {"name": "t"}, "spec": {**spec, "upgrade": {"mode": "pause"}}})


def test_upgrade_mode_changes_apply_live() -> None:
    """A change of spec.upgrade is no SpecChangeIgnored: it is read when a roll begins."""
    spec = {"spouts": [{"name": "s", "class": "m:S"}]}
    a = Topology.model_validate({"metadata": {"name": "t"}, "spec": spec})
    b = Topology.model_validate({"metadata": {"name": "t"}, "spec": {**spec, "upgrade": {"mode": "drain"}}})
    assert classify(a.spec, b.spec).kind is Kind.NONE


def test_handover_roll_keeps_the_spouts_active_and_goes_a_slot_at_a_time() -> None:
    roll, effects = step(None, _inp())
    # no deactivation; the first slot's pod goes in the same round (its new pod is made then)
    assert roll == Roll(REPLACING, 100.0, "img:2", ("img:1",), HANDOVER, 100.0)
    assert _kinds(effects) == ["RollStarted", "restamp", "delete"]
    assert "spouts stay active" in effects[0].message and "image img:1 -> img:2" in effects[0].message
    assert effects[1].slots == (A,) and effects[2].pods == ("wc-n1-6700",)
    # the slot's new pod starting (the deleted worker serves the slot meanwhile): the next waits
    for now in (101.0, 105.0, 130.0):
        roll, effects = step(roll, _inp(now=now, outdated=[OLD[1]], ready=frozenset({"wc-n2-6700"}),
                                        unavailable=1))
        assert roll is not None and effects == []
    roll, effects = step(roll, _inp(now=131.0, outdated=[OLD[1]], ready=frozenset({"wc-n1-x", "wc-n2-6700"})))
    assert _kinds(effects) == ["restamp", "delete"] and effects[1].pods == ("wc-n2-6700",)
    roll, effects = step(roll, _inp(now=132.0, outdated=[], unavailable=1))
    assert roll is not None and effects == []
    roll, effects = step(roll, _inp(now=140.0, outdated=[], all_ready=True))
    # nothing was deactivated, so nothing to activate
    assert roll is None and _kinds(effects) == ["RollCompleted"]
    assert effects[0].message == "every worker runs img:2"
    for e in effects:
        assert e.kind not in ("deactivate", "activate")


def test_handover_roll_of_a_deactivated_topology_keeps_it_so_and_restores_activation_asked_meanwhile() -> None:
    roll, effects = step(None, _inp(storm=TopologyStatus.INACTIVE, active=False))
    assert roll is not None and "deactivate" not in _kinds(effects)
    _, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, active=False, outdated=[], all_ready=True))
    assert _kinds(effects) == ["RollCompleted"]
    # spec.active turned true during the roll: the activation waited for it (reconcile.decide)
    _, effects = step(roll, _inp(storm=TopologyStatus.INACTIVE, active=True, outdated=[], all_ready=True))
    assert _kinds(effects) == ["activate", "RollCompleted"] and effects[1].message.endswith("spouts activated")


def test_a_roll_keeps_the_mode_it_began_with() -> None:
    roll, _ = step(None, _inp(mode=DRAIN))
    assert roll is not None and roll.mode == DRAIN and roll.step == DRAINING
    roll, effects = step(roll, _inp(now=101.0, storm=TopologyStatus.INACTIVE, mode=HANDOVER))
    assert roll is not None and roll.step == DRAINING and effects == []
    roll, _ = step(None, _inp(mode=HANDOVER))
    roll, effects = step(roll, _inp(now=101.0, mode=DRAIN, outdated=[OLD[1]], unavailable=1,
                                    ready=frozenset({"wc-n2-6700"})))
    assert roll is not None and roll.mode == HANDOVER and effects == []


def test_drained_needs_every_spout_executor_at_zero_in_a_heartbeat_after_the_deactivation() -> None:
    since = 100.0
    after = since + BEAT_MARGIN
    assert drained(since, {"1-1": (after, 0), "2-2": (after + 3, 0)})
    assert not drained(since, {})  # no spout known: nothing says it drained
    assert not drained(since, {"1-1": (after, 0), "2-2": None})  # a spout no heartbeat reports
    assert not drained(since, {"1-1": (after, 0), "2-2": (after, 1)})
    assert not drained(since, {"1-1": (after - 0.01, 0)})  # may predate the deactivation's effect


def test_drain_ends_as_soon_as_nothing_is_pending() -> None:
    roll, effects = step(None, _inp(mode=DRAIN))
    assert roll == Roll(DRAINING, 130.0, "img:2", ("img:1",), DRAIN, 100.0)
    assert _kinds(effects) == ["deactivate", "RollStarted"]
    assert "once nothing is pending, in 30s (rebalanceWaitSecs) at the most" in effects[1].message
    inactive = TopologyStatus.INACTIVE
    roll, effects = step(roll, _inp(now=101.5, storm=inactive, spouts={"1-1": (101.4, 12), "2-2": (101.2, 0)}))
    assert roll is not None and roll.step == DRAINING and effects == []
    roll, effects = step(roll, _inp(now=102.6, storm=inactive, spouts={"1-1": (102.4, 0), "2-2": (102.2, 0)}))
    assert roll is not None and roll.step == REPLACING
    assert _kinds(effects) == ["RollReplacing", "restamp", "delete"]
    assert effects[0].message.startswith("nothing pending 2.6s after the deactivation")


def test_drain_with_tuples_still_pending_ends_at_rebalance_wait() -> None:
    roll, _ = step(None, _inp(mode=DRAIN))
    stuck = {"1-1": (129.0, 3)}
    roll, effects = step(roll, _inp(now=129.9, storm=TopologyStatus.INACTIVE, spouts=stuck))
    assert roll is not None and roll.step == DRAINING and effects == []
    roll, effects = step(roll, _inp(now=130.0, storm=TopologyStatus.INACTIVE, spouts=stuck))
    assert roll is not None and roll.step == REPLACING
    assert effects[0].message.startswith("rebalanceWaitSecs passed 30.0s after the deactivation")


def test_drain_activated_by_hand_deactivates_again_and_counts_from_then() -> None:
    roll, _ = step(None, _inp(mode=DRAIN))
    # activated meanwhile: heartbeats from before this round's deactivation count no more
    roll, effects = step(roll, _inp(now=110.0, storm=TopologyStatus.ACTIVE, spouts={"1-1": (109.5, 0)}))
    assert roll is not None and roll.since == 110.0 and _kinds(effects) == ["deactivate"]
    roll, effects = step(roll, _inp(now=110.5, storm=TopologyStatus.INACTIVE, spouts={"1-1": (110.4, 0)}))
    assert roll is not None and roll.step == DRAINING and effects == []
    roll, effects = step(roll, _inp(now=111.5, storm=TopologyStatus.INACTIVE, spouts={"1-1": (111.2, 0)}))
    assert roll is not None and roll.step == REPLACING


def test_roll_status_keeps_mode_and_start() -> None:
    roll = Roll(DRAINING, 130.0, "img:2", ("img:1",), DRAIN, 100.0)
    assert roll.to_status(lambda t: f"t{t:g}") == {
        "step": DRAINING, "mode": DRAIN, "since": "t100", "due": "t130", "image": "img:2", "from": ["img:1"]}
