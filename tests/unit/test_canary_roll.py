"""The canary in the roll (spec.upgrade.canary): `roll.step` on plain values, then KubeNimbus's
rounds on fake time with an in-memory cluster state and a fake Kubernetes API
(test_operator_kube_nimbus's): a bad version rolled back by itself, with an Event, a condition
and status.upgrade saying why, not tried again until spec.worker changes, across an operator
restart; a good one passes and the roll completes."""

from __future__ import annotations

from typing import Any

import pytest
from squall.models.cluster import (
    ExecutorStats,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall_operator import stored
from squall_operator.canary import Figures, Observed, Settings
from squall_operator.roll import (
    CANARY,
    HANDOVER,
    REPLACING,
    ROLLING_BACK,
    Roll,
    RollInput,
    step,
)
from test_operator_kube_nimbus import (
    SPEC,
    Clock,
    FakeApi,
    FakeState,
    _cond,
    _images,
    _make,
    _status,
)

pytestmark = pytest.mark.unit

A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
OLD = [("wc-n1-6700", A, "img:1"), ("wc-n2-6700", B, "img:1")]
BOTH = frozenset({"wc-n1-6700", "wc-n2-6700"})
CAN = Settings(slots=1, analysis_secs=30.0)
GOOD = Observed(ready=True, new={"b": Figures(500, 0)}, old={"b": Figures(5000, 2)})
BAD = Observed(ready=True, new={"b": Figures(400, 100)}, old={"b": Figures(5000, 2)})


def _inp(**over: Any) -> RollInput:
    base: dict[str, Any] = {"now": 100.0, "storm": TopologyStatus.ACTIVE, "outdated": OLD, "all_ready": False,
                            "image": "img:2", "rebalance_wait": 30.0, "active": True, "ready": BOTH,
                            "template": "t2", "canary": CAN}
    return RollInput(**{**base, **over})


def _kinds(effects: list[Any]) -> list[str]:
    return [e.kind if e.kind != "event" else e.reason for e in effects]


def test_the_canary_slot_goes_first_and_the_others_wait_for_its_verdict() -> None:
    roll, effects = step(None, _inp())
    assert roll == Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n1-6700",))
    assert _kinds(effects) == ["RollStarted", "restamp", "delete"] and effects[2].pods == ("wc-n1-6700",)
    assert "canary" in effects[0].message and "slot(s) n1-6700 first, analysed for 30s" in effects[0].message
    # the canary's pod starting, then ready: every slot has a ready pod, yet B keeps the old one
    roll, effects = step(roll, _inp(now=101.0, outdated=[OLD[1]], unavailable=1, observed=Observed(ready=False)))
    assert roll is not None and roll.analysing is None and effects == []
    roll, effects = step(roll, _inp(now=110.0, outdated=[OLD[1]], observed=GOOD))
    assert roll is not None and roll.step == CANARY and roll.analysing == 110.0 and effects == []
    roll, effects = step(roll, _inp(now=139.0, outdated=[OLD[1]], observed=GOOD))
    assert roll is not None and roll.step == CANARY and effects == []
    # the window is over with no regression: the others go, a slot at a time, as without a canary
    roll, effects = step(roll, _inp(now=140.0, outdated=[OLD[1]], observed=GOOD))
    assert roll is not None and roll.step == REPLACING and roll.canary_slots == () and roll.analysing is None
    assert _kinds(effects) == ["CanaryPassed", "restamp", "delete"] and effects[2].pods == ("wc-n2-6700",)
    assert "30s with no regression: b failed 0.0% (old 0.0%)" in effects[0].message
    roll, effects = step(roll, _inp(now=150.0, outdated=[], all_ready=True))
    assert roll is None and _kinds(effects) == ["RollCompleted"]


def test_a_failed_canary_rolls_every_slot_back_and_says_why() -> None:
    roll = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n1-6700",), 110.0)
    roll, effects = step(roll, _inp(now=112.0, outdated=[OLD[1]], observed=BAD))
    assert roll is not None and roll.step == ROLLING_BACK
    assert _kinds(effects) == ["reject", "CanaryFailed"]
    assert effects[0].reason == "FailedFraction" and "b: 20.0% of its tuples failed" in effects[0].message
    assert effects[1].warning and "rolling every worker back to the last good settings 12.0s after" in effects[1].message
    # the caller now wants the last good settings (t1): the canary's pod is the outdated one
    back = [("wc-n1-x", A, "img:2")]
    roll, effects = step(roll, _inp(now=113.0, outdated=back, image="img:1", template="t1", canary=None))
    assert roll is not None and roll.step == ROLLING_BACK
    assert _kinds(effects) == ["restamp", "delete"] and effects[1].pods == ("wc-n1-x",)
    roll, effects = step(roll, _inp(now=114.0, outdated=[], image="img:1", template="t1", unavailable=1))
    assert roll is not None and roll.step == ROLLING_BACK and effects == []
    roll, effects = step(roll, _inp(now=120.0, outdated=[], image="img:1", template="t1", all_ready=True))
    assert roll is None and _kinds(effects) == ["RolledBack"] and effects[0].warning
    assert "last good settings (img:1) again, 20.0s after the canary began" in effects[0].message


def test_a_canary_that_never_gets_ready_is_rolled_back_after_the_launch_timeout() -> None:
    roll = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n1-6700",))
    waiting = Observed(ready=False, not_ready=("n1-6700",))
    roll, effects = step(roll, _inp(now=219.0, outdated=[OLD[1]], unavailable=1, observed=waiting, ready_timeout=120))
    assert roll is not None and roll.step == CANARY and effects == []
    roll, effects = step(roll, _inp(now=220.0, outdated=[OLD[1]], unavailable=1, observed=waiting, ready_timeout=120))
    assert roll is not None and roll.step == ROLLING_BACK and effects[0].reason == "NotReady"


def test_a_change_during_the_canary_starts_it_over_and_removing_it_goes_on() -> None:
    roll = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n1-6700",), 110.0)
    # img:3 asked: the canary's pod (img:2) and B (img:1) are both outdated
    roll, effects = step(roll, _inp(now=120.0, outdated=[("wc-n1-x", A, "img:2"), OLD[1]], image="img:3",
                                    template="t3", observed=GOOD))
    assert roll is not None and (roll.step, roll.template, roll.since, roll.analysing) == (CANARY, "t3", 120.0, None)
    assert _kinds(effects) == ["CanaryRestarted", "restamp", "delete"] and effects[2].pods == ("wc-n1-x",)
    # spec.upgrade.canary removed: the roll goes on without waiting
    roll, effects = step(roll, _inp(now=121.0, outdated=[OLD[1]], image="img:3", template="t3", canary=None))
    assert roll is not None and roll.step == REPLACING
    assert _kinds(effects) == ["CanaryPassed", "restamp", "delete"] and effects[2].pods == ("wc-n2-6700",)


def test_without_a_canary_the_roll_is_the_plain_hand_over() -> None:
    roll, effects = step(None, _inp(canary=None))
    assert roll is not None and roll.step == REPLACING and _kinds(effects) == ["RollStarted", "restamp", "delete"]


# --- KubeNimbus: the figures read from the heartbeats, the rollback applied ---------------------------

CANARY_SPEC = {**SPEC, "upgrade": {"canary": {"slots": 1, "analysisSecs": 20}}}


def _spec(image: str, **worker: Any) -> dict[str, Any]:
    return {**CANARY_SPEC, "worker": {"image": image, **worker}}


def _beat(state: FakeState, clock: Clock, fail: dict[str, float], started: dict[str, float],
          ended: int = 300) -> None:
    """Heartbeats of every slot: each executor ended `ended` tuples since its worker started
    (cumulative), `fail[slot]` of them failed; a worker started at `started[slot]` (the clock's
    time minus its uptime)."""
    a = state.assignments["ns~wc"]
    plan = stored.plan(state.storms["ns~wc"])
    beats: dict[WorkerSlot, WorkerHeartbeat] = {}
    for key, slot_key in a.executor_slots.items():
        slot = WorkerSlot.from_key(slot_key)
        start, end = (int(x) for x in key.split("-"))
        comp = plan.executor_component((start, end))
        failed = int(ended * fail.get(slot_key, 0.0))
        beat = beats.setdefault(slot, WorkerHeartbeat(
            time_secs=clock.now, uptime_secs=clock.now - started.get(slot_key, clock.now - 1000)))
        beat.executors[key] = ExecutorStats(component=comp, acked=ended - failed, failed=failed)
    state.beats["ns~wc"] = beats


def _ready_round(nimbus: Any, api: FakeApi, clock: Clock, secs: float = 1.0) -> None:
    api.ready_all()
    clock.now += secs
    nimbus.round()


def _running_first_version(nimbus: Any, state: Any, api: Any, clock: Any) -> list[str]:
    """`wc` submitted on team/wc:1, its workers beating and ready; its slots' keys, sorted."""
    nimbus.register("ns", "wc", "uid-1", 1, _spec("team/wc:1"))
    nimbus.round()
    _beat(state, clock, {}, {})
    _ready_round(nimbus, api, clock)
    return sorted({s.key() for s in state.assignments["ns~wc"].slots().values()})


def test_a_bad_version_is_rolled_back_by_itself_and_not_tried_again_until_the_spec_changes() -> None:
    nimbus, state, api, clock = _make()
    _running_first_version(nimbus, state, api, clock)
    good = _status(api)["upgrade"]["lastGood"]
    assert good["image"] == "team/wc:1" and good["worker"] == {"image": "team/wc:1"}
    slots = sorted({s.key() for s in state.assignments["ns~wc"].slots().values()})
    # a version whose bolt fails 20% of its tuples
    nimbus.register("ns", "wc", "uid-1", 2, _spec("team/wc:1", env=[{"name": "FAIL", "value": "0.2"}]))
    began = clock.now
    nimbus.round()
    assert len(api.deleted) == 1 and api.deleted[0][0].startswith(f"wc-{slots[0]}")
    st = _status(api)
    assert st["phase"] == "Rolling" and _cond(st, "Rolling")["reason"] == "Canary"
    assert st["roll"]["canarySlots"] == [slots[0]] and "starting" in _cond(st, "Rolling")["message"]
    # the canary's worker heartbeats: its bolt executor fails 20%, the old one none; what they
    # did before the window began (the round that finds the canary ready) is not judged
    _beat(state, clock, {slots[0]: 0.2}, {slots[0]: began + 0.5})
    _ready_round(nimbus, api, clock)
    assert "CanaryFailed" not in api.reasons("wc") and _status(api)["roll"]["analysingSince"]
    _beat(state, clock, {slots[0]: 0.2}, {slots[0]: began + 0.5}, ended=600)
    _ready_round(nimbus, api, clock)
    assert [r for r in api.reasons("wc") if r.startswith("Canary")] == ["CanaryFailed"]
    assert len(api.deleted) == 1, "the other slot was touched"
    st = _status(api)
    assert _cond(st, "Rolling")["reason"] == "RollingBack"
    assert _cond(st, "RolledBack")["status"] == "True" and _cond(st, "RolledBack")["reason"] == "FailedFraction"
    assert st["upgrade"]["rolledBack"]["generation"] == 2 and "20.0%" in st["upgrade"]["rolledBack"]["message"]
    # the operator restarts in the middle of the rollback: it still knows what to roll back to
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, _spec("team/wc:1", env=[{"name": "FAIL", "value": "0.2"}]),
                    status=_status(api))
    _ready_round(nimbus, api, clock)
    assert len(api.deleted) == 2
    _ready_round(nimbus, api, clock)
    _ready_round(nimbus, api, clock)
    envs = [{e["name"] for e in p["spec"]["containers"][0]["env"]} for p in api.pods.values()]
    assert len(envs) == 2 and not any("FAIL" in e for e in envs), "a pod still runs the rejected settings"
    assert "RolledBack" in api.reasons("wc")
    st = _status(api)
    assert st["phase"] == "Running" and _cond(st, "Rolling")["reason"] == "Completed"
    assert _cond(st, "RolledBack")["status"] == "True" and "not tried again" in _cond(st, "RolledBack")["message"]
    # the spec still asks for the rejected settings: nothing rolls again
    deleted = len(api.deleted)
    for _ in range(3):
        _beat(state, clock, {}, {})
        _ready_round(nimbus, api, clock, 2)
    assert len(api.deleted) == deleted and api.reasons("wc").count("RollStarted") == 1
    # a new spec.worker is tried, with a canary again, from the last good settings
    nimbus.register("ns", "wc", "uid-1", 3, _spec("team/wc:1", env=[{"name": "FAIL", "value": "0"}]))
    clock.now += 1
    nimbus.round()
    assert api.reasons("wc").count("RollStarted") == 2 and len(api.deleted) == deleted + 1
    st = _status(api)
    assert _cond(st, "RolledBack")["status"] == "False" and _cond(st, "RolledBack")["reason"] == "SpecChanged"
    assert "rolledBack" not in st["upgrade"] and _cond(st, "Rolling")["reason"] == "Canary"


def test_a_good_version_passes_its_canary_and_the_roll_completes() -> None:
    nimbus, state, api, clock = _make()
    slots = _running_first_version(nimbus, state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, _spec("team/wc:2"))
    began = clock.now
    nimbus.round()
    assert len(api.deleted) == 1
    # a heartbeat of the slot's old worker (it serves the slot until the new one registers) is not
    # the canary's: the analysis waits for the new worker's
    _beat(state, clock, {}, {})
    _ready_round(nimbus, api, clock)
    assert _status(api)["roll"].get("analysingSince") is None
    _beat(state, clock, {}, {slots[0]: began + 0.5})
    _ready_round(nimbus, api, clock)
    analysing = _status(api)["roll"]["analysingSince"]
    assert analysing == pytest.approx(clock.now)
    assert "analysed since" in _cond(_status(api), "Rolling")["message"]
    while clock.now + 5 < analysing + 20:
        _beat(state, clock, {slots[0]: 0.01}, {slots[0]: began + 0.5}, ended=int(300 + 100 * (clock.now - analysing)))
        _ready_round(nimbus, api, clock, 5)
        assert len(api.deleted) == 1 and "CanaryPassed" not in api.reasons("wc")
    clock.now = analysing + 19.5
    _beat(state, clock, {slots[0]: 0.01}, {slots[0]: began + 0.5}, ended=2300)
    _ready_round(nimbus, api, clock)
    assert "CanaryPassed" in api.reasons("wc") and len(api.deleted) == 2
    passed = next(m for n, r, m in api.events if r == "CanaryPassed")
    assert passed.startswith("20s with no regression: b failed 1.1% (old 0.0%)"), passed
    _ready_round(nimbus, api, clock)
    _ready_round(nimbus, api, clock)
    st = _status(api)
    assert st["phase"] == "Running" and _cond(st, "Rolling")["reason"] == "Completed"
    assert _images(api) == {"team/wc:2"} and st["upgrade"]["lastGood"]["image"] == "team/wc:2"
    assert "RolledBack" not in api.reasons("wc") and not any(c["type"] == "RolledBack" for c in st["conditions"])


def test_no_canary_without_last_good_settings_or_for_the_operators_own_change() -> None:
    """A canary needs settings to roll back to that differ from the wanted ones: a helm upgrade
    that changes only the chart's worker image rolls without one."""
    import dataclasses

    from squall_operator.kube_nimbus import KubeNimbus

    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, CANARY_SPEC)
    nimbus.round()
    _ready_round(nimbus, api, clock)
    config = dataclasses.replace(nimbus.config, worker=dataclasses.replace(nimbus.config.worker, image="squall-worker:new"))
    nimbus2 = KubeNimbus(state, api, config, clock=clock)  # type: ignore[arg-type]
    nimbus2.refresh_nodes()
    nimbus2.startup()
    nimbus2.register("ns", "wc", "uid-1", 1, CANARY_SPEC, status=_status(api))
    nimbus2.round()
    assert _cond(_status(api), "Rolling")["reason"] == "Replacing"
    assert "canary" not in next(m for n, r, m in api.events if r == "RollStarted")


def test_a_canary_whose_slots_a_rebalance_took_starts_over_on_an_outdated_slot() -> None:
    roll = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n9-6700",), 110.0)
    gone = Observed(ready=False, gone=True)
    roll, effects = step(roll, _inp(now=130.0, outdated=[OLD[1]], observed=gone))
    assert roll is not None and (roll.step, roll.canary_slots, roll.since, roll.analysing) == (
        CANARY, ("n2-6700",), 130.0, None)
    assert _kinds(effects) == ["CanaryRestarted", "restamp", "delete"] and effects[2].pods == ("wc-n2-6700",)
    assert "no longer assigned (a rebalance): slot(s) n2-6700 start over" in effects[0].message
    # nothing left on the old settings: nothing to compare with, the roll goes on
    roll = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n9-6700",), 110.0)
    roll, effects = step(roll, _inp(now=130.0, outdated=[], observed=gone, all_ready=True))
    assert roll is None and _kinds(effects) == ["CanaryRestarted", "RollCompleted"]


def test_an_operator_restarted_during_the_analysis_keeps_its_window_and_judges_on() -> None:
    """status.roll keeps the canary's slots and the window's start: a new operator does not start
    the window over; it counts the executors from its own first round (the baseline is memory)."""
    nimbus, state, api, clock = _make()
    slots = _running_first_version(nimbus, state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, _spec("team/wc:2"))
    began = clock.now
    nimbus.round()
    _beat(state, clock, {}, {slots[0]: began + 0.5})
    _ready_round(nimbus, api, clock)
    analysing = _status(api)["roll"]["analysingSince"]
    # the canary failed 30% before the restart: the new operator's baseline leaves it out
    _beat(state, clock, {slots[0]: 0.3}, {slots[0]: began + 0.5}, ended=400)
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, _spec("team/wc:2"), status=_status(api))
    _ready_round(nimbus, api, clock)
    assert _status(api)["roll"]["analysingSince"] == analysing and "CanaryFailed" not in api.reasons("wc")
    # from there, 25% of the next 400 failed: judged on the counts since the restart
    _beat(state, clock, {slots[0]: 0.275}, {slots[0]: began + 0.5}, ended=800)
    _ready_round(nimbus, api, clock)
    assert "CanaryFailed" in api.reasons("wc")
    failed = next(m for n, r, m in api.events if r == "CanaryFailed")
    assert "25.0% of its tuples failed on the canary (100 of 400)" in failed, failed
