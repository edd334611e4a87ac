"""The canary's p99 latency verdict on noise (squall_operator.canary.latency_checks and judge),
round by round on an injected time, from figures recorded on the real nodes.

tests/k8s/test_canary_real_nodes.py once rolled back a good version, on a machine whose 2 cores
several test suites shared, on its p99: 16.2 ms on the canary against 3.7 ms on the old pods
(the passing runs read 2.2 against 1.9 ms), judged the first round each side had 100
latencies, where the p99 is the second slowest tuple. The rule since: p99s are compared over intervals of
`CHECK_SECS` holding `MIN_LATENCY_SAMPLES` latencies a side, and a component fails on latency
after `LATENCY_CHECKS` regressed intervals in a row, or more than half (two or more) at the
window's end. Each case runs the operator's rounds (every 2 s) at the test's rate: 200 ids/s over
two workers, so 100 trees a second end at each side's spout, and 25 of them have their complete
latency recorded (a spout samples 1 tree in 4): an interval closes every 8 s."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from squall import stats
from squall.models.cluster import TopologyStatus, WorkerSlot
from squall_operator.canary import (
    CHECK_SECS,
    FAIL,
    LATENCY_CHECKS,
    MIN_LATENCY_SAMPLES,
    PASS,
    WAIT,
    Figures,
    LatencyCheck,
    Observed,
    Settings,
    judge,
    latency_checks,
    slower,
)
from squall_operator.roll import CANARY, HANDOVER, ROLLING_BACK, Roll, RollInput, step

pytestmark = pytest.mark.unit

WINDOW = Settings(slots=1, analysis_secs=20.0)  # the real-node test's canary
ROUND = 2.0  # the operator's monitorFreqSecs
TREES = 100  # trees ended a second at each side's spout
LATENCIES = 25  # of which the latency is recorded (1 in 4)

# (canary, old pods) p99 in ms over a stretch of the window
QUIET = (2.2, 1.9)  # the passing runs' figures
LOADED = (16.2, 3.7)  # the rolled-back good version's


def _hist(p99: float, n: int) -> dict[int, int]:
    """n latencies whose p99 is `p99`: 97% at a fifth of it, 3% at it."""
    slow = max(1, round(n * 0.03))
    low, high = stats.bucket_of(p99 / 5), stats.bucket_of(p99)
    return {low: n - slow, high: slow} if low != high else {high: n}


def _add(a: Figures, b: Figures) -> Figures:
    return Figures(a.acked + b.acked, a.failed + b.failed, stats.merge([a.hist, b.hist]))


def _run(p99s: Callable[[float], tuple[float, float]], settings: Settings = WINDOW,
         failing: float = 0.0) -> tuple[str, str, float, dict[str, LatencyCheck]]:
    """Rounds from the window's start (t 0) until a verdict: the canary's and the old pods'
    spout `ids` end TREES trees a second each, LATENCIES of them timed, with the p99s `p99s(t)`
    says at that time (`failing`: the canary's share of failed trees). Returns the outcome,
    reason and message, the time of the verdict and the checks then."""
    new, old = Figures(), Figures()
    checks: dict[str, LatencyCheck] = {}
    now = 0.0
    while now < 10 * settings.analysis_secs:
        now += ROUND
        canary_p99, old_p99 = p99s(now)
        n, timed = int(TREES * ROUND), int(LATENCIES * ROUND)
        failed = int(n * failing)
        new = _add(new, Figures(n - failed, failed, _hist(canary_p99, timed)))
        old = _add(old, Figures(n, 0, _hist(old_p99, timed)))
        seen = Observed(ready=True, new={"ids": new}, old={"ids": old})
        checks = latency_checks(checks, seen, settings, 0.0, now)
        v = judge(settings, seen, since=-5.0, analysing=0.0, now=now, ready_timeout=120, checks=checks)
        if v.outcome != WAIT:
            return v.outcome, v.reason + ": " + v.message, now, checks
    raise AssertionError("no verdict")


def test_a_good_canary_slow_for_its_first_seconds_passes() -> None:
    """The recorded flake: the canary slower for the window's first 4 s (its new worker's start
    on a loaded machine), then as fast as the old pods. Judged over the whole window so far, as
    before, those 4 s are a regression by the ratio and the slack; over intervals, one of two
    regressed."""
    first = Figures(400, 0, _hist(LOADED[0], 100)), Figures(400, 0, _hist(LOADED[1], 100))
    assert first[0].p99 == pytest.approx(16.2, rel=0.08) and slower(*first, WINDOW)
    outcome, message, at, checks = _run(lambda t: LOADED if t <= 4 else QUIET)
    assert (outcome, at) == (PASS, 20.0), message
    assert (checks["ids"].judged, checks["ids"].regressed) == (2, 1), checks
    assert "slower in 1 of 2 intervals" in message


def test_a_good_canary_on_a_busy_machine_slow_in_two_scattered_intervals_passes() -> None:
    """Slow for its first 8 s and again later (another suite's burst), never in a row or a
    majority: two of five intervals."""
    outcome, message, _, checks = _run(lambda t: LOADED if t <= 8 or 16 < t <= 24 else QUIET,
                                       Settings(analysis_secs=40.0))
    assert outcome == PASS, message
    assert (checks["ids"].judged, checks["ids"].regressed, checks["ids"].streak) == (5, 2, 0)


def test_a_truly_slower_canary_fails_on_intervals_in_a_row_or_at_the_windows_end() -> None:
    """50 ms more per tree on the canary, throughout: with the default 60 s window, LatencyP99
    after LATENCY_CHECKS intervals in a row (24 s); with the real-node test's 20 s, which holds
    two, at its end on two of two."""
    outcome, message, at, _ = _run(lambda t: (55.0, 3.7), Settings())
    assert outcome == FAIL and message.startswith("LatencyP99: ids: p99 latency above 2x"), message
    assert at == LATENCY_CHECKS * 8.0
    assert f"in {LATENCY_CHECKS} of {LATENCY_CHECKS} intervals, the last {LATENCY_CHECKS} in a row" in message
    assert "ms on the canary against 3.7 ms on the old pods over 8s (200 and 200 latencies)" in message
    outcome, message, at, _ = _run(lambda t: (55.0, 3.7))
    assert (outcome, at) == (FAIL, 20.0) and "in 2 of 2 intervals; the last" in message, message


def test_a_window_with_room_for_one_interval_never_fails_on_latency_alone() -> None:
    """The cost of the rule: a 12 s window holds one interval at this rate; one slow interval
    is noise, so a slower version passes it (its failures are still judged)."""
    outcome, message, _, checks = _run(lambda t: (55.0, 3.7), Settings(analysis_secs=12.0))
    assert outcome == PASS and checks["ids"].judged == 1 and "slower in 1 of 1 intervals" in message


def test_a_failing_canary_is_rolled_back_at_once_whatever_its_latencies() -> None:
    """The 20% version of the real-node test: its failures are judged the first round it has
    MIN_TUPLES trees, noisy latencies or not."""
    outcome, message, at, _ = _run(lambda t: LOADED, failing=0.2)
    assert (outcome, at) == (FAIL, ROUND) and message.startswith("FailedFraction: ids: 20.0%"), message


def test_an_interval_closes_on_time_and_samples_and_restarts_when_counts_go_down() -> None:
    """An interval needs CHECK_SECS and MIN_LATENCY_SAMPLES on each side; a component with no old
    executor is not checked; counts that went down (a canary worker restarted) begin a new one."""
    few = MIN_LATENCY_SAMPLES - 1
    seen = Observed(ready=True, new={"b": Figures(few, 0, _hist(50, few)), "only": Figures(500, 0, _hist(50, 500))},
                    old={"b": Figures(500, 0, _hist(1, 500))})
    checks = latency_checks({}, seen, WINDOW, 10.0, 10.0 + CHECK_SECS)
    assert checks == {"b": LatencyCheck(10.0)}
    # enough latencies, not yet CHECK_SECS
    seen = Observed(ready=True, new={"b": Figures(300, 0, _hist(50, 300))}, old=seen.old)
    assert latency_checks({}, seen, WINDOW, 10.0, 10.0 + CHECK_SECS - 0.1)["b"].judged == 0
    closed = latency_checks({}, seen, WINDOW, 10.0, 10.0 + CHECK_SECS)["b"]
    assert (closed.at, closed.judged, closed.regressed, closed.streak) == (15.0, 1, 1, 1)
    assert closed.new == seen.new["b"] and "over 5s (300 and 500 latencies)" in closed.last
    # the canary's worker restarted: its counts start again, and so does the interval
    seen = Observed(ready=True, new={"b": Figures(20, 0, _hist(2, 20))}, old={"b": Figures(900, 0, _hist(1, 900))})
    again = latency_checks({"b": closed}, seen, WINDOW, 10.0, 17.0)["b"]
    assert (again.at, again.new, again.judged, again.streak) == (17.0, seen.new["b"], 1, 1)
    # no window yet: no checks
    assert latency_checks({"b": closed}, seen, WINDOW, None, 17.0) == {}


def test_the_roll_keeps_the_checks_between_rounds_and_drops_them_when_the_canary_starts_over() -> None:
    """roll.step carries the checks in the Roll (not in status.roll) from round to round: a canary
    50 ms slower throughout is rolled back after LATENCY_CHECKS intervals (a 60 s window); a
    canary that starts over (new settings) starts its checks over."""
    other = [("wc-n2-6700", WorkerSlot("n2", 6700), "img:1")]

    def inp(now: float, seen: Observed, template: str = "t2") -> RollInput:
        return RollInput(now=now, storm=TopologyStatus.ACTIVE, outdated=other, all_ready=False, image="img:2",
                         rebalance_wait=30.0, active=True, ready=frozenset({"wc-n2-6700"}), template=template,
                         canary=Settings(), observed=seen)

    roll: Roll | None = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n1-6700",), 110.0)
    new, old = Figures(), Figures()
    effects: list[object] = []
    now = 110.0
    while roll is not None and roll.step == CANARY and now < 170:
        now += ROUND
        new = _add(new, Figures(200, 0, _hist(55.0, 50)))
        old = _add(old, Figures(200, 0, _hist(3.7, 50)))
        roll, effects = step(roll, inp(now, Observed(ready=True, new={"ids": new}, old={"ids": old})))
        if roll is not None and roll.step == CANARY:
            assert roll.checks["ids"].streak == int((now - 110.0) // 8)
    assert roll is not None and roll.step == ROLLING_BACK and now == 110.0 + 3 * 8.0 and roll.checks == {}
    reject = next(e for e in effects if getattr(e, "kind", "") == "reject")
    assert getattr(reject, "reason", "") == "LatencyP99"
    # two regressed intervals, then the settings change: the new canary starts from nothing
    roll = Roll(CANARY, 100.0, "img:2", ("img:1",), HANDOVER, 100.0, "t2", ("n1-6700",), 110.0,
                checks={"ids": LatencyCheck(122.0, judged=2, regressed=2, streak=2)})
    roll, _ = step(roll, inp(124.0, Observed(ready=False), template="t3"))
    assert roll is not None and roll.step == CANARY and roll.analysing is None and roll.checks == {}
