"""The canary's verdict (squall_operator.canary.judge) on plain figures and an injected time:
failed fraction and p99 latency against the old pods' (or absolute where no old executor of the
component reports), restarts, readiness, the topology turning Degraded; and what status.upgrade
keeps across an operator restart."""

from __future__ import annotations

import pytest
from squall import stats
from squall.models.cluster import ExecutorStats
from squall.models.v1alpha1 import Topology
from squall_operator import canary
from squall_operator.canary import (
    FAIL,
    MIN_TUPLES,
    PASS,
    WAIT,
    Figures,
    Observed,
    Settings,
    judge,
)
from squall_operator.kube_api import parse_time
from squall_operator.pods import iso_time

pytestmark = pytest.mark.unit

S = Settings(slots=1, analysis_secs=30.0, max_failed_fraction=0.05, max_p99_ratio=2.0, max_restarts=0)


def _lat(ms: float, n: int) -> dict[int, int]:
    return {stats.bucket_of(ms): n}


def _seen(new: dict[str, Figures], old: dict[str, Figures] | None = None, **over: object) -> Observed:
    return Observed(**{"ready": True, "new": new, "old": old or {}, **over})  # type: ignore[arg-type]


def test_a_clear_failure_regression_fails_at_once_without_waiting_for_the_window() -> None:
    """20% failed on the canary's bolt against 0% on the old pods' fails 1 s into the window."""
    seen = _seen({"pass": Figures(160, 40)}, {"pass": Figures(4000, 0)})
    v = judge(S, seen, since=100.0, analysing=110.0, now=111.0, ready_timeout=120)
    assert v.outcome == FAIL and v.reason == "FailedFraction"
    assert "pass: 20.0% of its tuples failed on the canary (40 of 200) against 0.0% on the old pods" in v.message


def test_the_failed_fraction_is_relative_to_the_old_pods() -> None:
    """Old pods failing 10% themselves (a flaky downstream): a canary at 12% is within 0.05 of
    them; at 16% it is not."""
    old = {"sink": Figures(900, 100)}
    assert judge(S, _seen({"sink": Figures(880, 120)}, old), 0, 0, 31, 120).outcome == PASS
    v = judge(S, _seen({"sink": Figures(840, 160)}, old), 0, 0, 5, 120)
    assert v.outcome == FAIL and "against 10.0% on the old pods (100 of 1000)" in v.message


def test_without_old_executors_of_a_component_the_fraction_is_absolute() -> None:
    """A bolt whose executors all run on the canary's slot has nothing to compare with."""
    v = judge(S, _seen({"b": Figures(190, 10)}), 0, 0, 5, 120)
    assert v.outcome == WAIT  # 5% is not above 0.05
    v = judge(S, _seen({"b": Figures(180, 20)}, {"b": Figures(5, 0)}), 0, 0, 5, 120)
    assert v.outcome == FAIL and "with no old executor of it to compare against" in v.message


def test_too_few_tuples_are_not_judged_and_an_idle_canary_passes_on_readiness() -> None:
    few = _seen({"b": Figures(MIN_TUPLES // 2 - 1, MIN_TUPLES // 2)}, {"b": Figures(1000, 0)})
    assert judge(S, few, 0, 0, 29.9, 120).outcome == WAIT
    v = judge(S, few, 0, 0, 30.0, 120)
    assert v.outcome == PASS and "too few tuples" in v.message


def test_p99_latency_regression_beyond_the_ratio_and_the_slack() -> None:
    """What counts as slower (canary.slower); an interval's verdict, and when it fails the canary,
    are test_canary_noise's."""
    old = Figures(1000, 0, _lat(20.0, 1000))
    assert canary.slower(Figures(1000, 0, _lat(60.0, 1000)), old, S)
    # within the ratio
    assert not canary.slower(Figures(1000, 0, _lat(35.0, 1000)), old, S)
    # three times a sub-millisecond latency is under the slack: noise, not a regression
    assert not canary.slower(Figures(1000, 0, _lat(0.3, 1000)), Figures(1000, 0, _lat(0.1, 1000)), S)
    assert canary.P99_SLACK_MS == 10.0


def test_restarts_fail_at_once_and_degraded_during_the_canary_fails_it() -> None:
    v = judge(S, _seen({}, restarts=1), since=0, analysing=None, now=1, ready_timeout=120)
    assert v.outcome == FAIL and v.reason == "Restarts" and "maxRestarts 0" in v.message
    assert judge(Settings(max_restarts=2), _seen({}, restarts=2), 0, None, 1, 120).outcome == WAIT
    # Degraded already before the canary began says nothing about it; turning Degraded after does
    assert judge(S, _seen({}, degraded_since=99.0, degraded="x"), 100, 100, 101, 120).outcome == WAIT
    v = judge(S, _seen({}, degraded_since=105.0, degraded="AcksStalled"), 100, 100, 106, 120)
    assert v.outcome == FAIL and v.reason == "Degraded" and "AcksStalled" in v.message


def test_readiness_within_the_launch_timeout_and_at_the_end_of_the_window() -> None:
    waiting = Observed(ready=False, not_ready=("n1-6700",))
    assert judge(S, waiting, since=100, analysing=None, now=219, ready_timeout=120).outcome == WAIT
    v = judge(S, waiting, since=100, analysing=None, now=220, ready_timeout=120)
    assert v.outcome == FAIL and v.reason == "NotReady" and "n1-6700 not ready 120s" in v.message
    # ready when the window began, not at its end
    v = judge(S, waiting, since=100, analysing=110, now=140, ready_timeout=120)
    assert v.outcome == FAIL and "at the end of the 30s analysis" in v.message
    # a pass needs the whole window
    good = _seen({"b": Figures(1000, 0, _lat(5, 1000))}, {"b": Figures(1000, 1, _lat(5, 1000))})
    assert judge(S, good, 100, 110, 139.9, 120).outcome == WAIT
    v = judge(S, good, 100, 110, 140, 120)
    assert v.outcome == PASS and "b failed 0.0% (old 0.1%)" in v.message


def test_component_figures_sum_executors_and_leave_system_components_out() -> None:
    figs = canary.component_figures([
        ExecutorStats(component="b", acked=10, failed=1, latency_hist={3: 5}),
        ExecutorStats(component="b", acked=5, failed=2, latency_hist={3: 1, 4: 2}),
        ExecutorStats(component="__acker", acked=100, failed=50),
        ExecutorStats(component="$checkpoint", acked=3),
    ])
    assert figs == {"b": Figures(15, 3, {3: 6, 4: 2})}
    assert figs["b"].fraction == pytest.approx(3 / 18) and figs["b"].samples == 8


def test_status_upgrade_survives_a_restart() -> None:
    up = canary.Upgrade(
        canary.Template("abc", "img:1", {"image": "img:1", "env": [{"name": "A", "value": "1"}]}),
        canary.Rejected("def", "img:2", 7, "FailedFraction", "b: 20% failed", 1_000_000.0))
    data = up.to_status(iso_time)
    assert data["lastGood"]["templateHash"] == "abc" and data["rolledBack"]["generation"] == 7
    assert canary.Upgrade.from_status(data, parse_time) == up
    assert canary.Upgrade.from_status(None, parse_time) == canary.Upgrade()
    assert canary.Upgrade.from_status({"lastGood": {"image": "x"}}, parse_time) == canary.Upgrade()
    assert canary.Template("h", "i", None).same_worker(None)
    assert up.last_good is not None and up.last_good.same_worker(
        {"env": [{"value": "1", "name": "A"}], "image": "img:1"})


def test_spec_upgrade_canary_defaults_and_refusals() -> None:
    spec = {"spouts": [{"name": "s", "class": "m:S"}]}

    def upgrade(value: object) -> Settings:
        t = Topology.model_validate({"metadata": {"name": "t"}, "spec": {**spec, "upgrade": value}})
        assert t.spec.upgrade is not None and t.spec.upgrade.canary is not None
        return Settings.of(t.spec.upgrade.canary)

    assert upgrade({"canary": {}}) == Settings()
    assert upgrade({"canary": {"slots": 2, "analysisSecs": 15, "maxFailedFraction": 0.1, "maxP99Ratio": 3,
                               "maxRestarts": 1}}) == Settings(2, 15.0, 0.1, 3.0, 1)
    with pytest.raises(ValueError, match="canary needs mode handover"):
        upgrade({"mode": "drain", "canary": {}})
    for bad in ({"slots": 0}, {"analysisSecs": 0}, {"maxFailedFraction": 1.5}, {"maxP99Ratio": 0.5},
                {"maxRestarts": -1}, {"window": 3}):
        with pytest.raises(ValueError):
            upgrade({"canary": bad})


def test_counts_since_the_window_began_and_a_restarted_worker_from_its_start() -> None:
    base = {"a/1-1": ExecutorStats(component="b", acked=100, failed=10, latency_hist={3: 50, 9: 60}),
            "a/2-2": ExecutorStats(component="b", acked=500, failed=0)}
    now = {"a/1-1": ExecutorStats(component="b", acked=300, failed=15, latency_hist={3: 80, 9: 60, 12: 1}),
           "a/2-2": ExecutorStats(component="b", acked=20, failed=0),  # its worker restarted
           "a/3-3": ExecutorStats(component="b", acked=7)}  # not there when the window began
    out = {s.acked: s for s in canary.since(now, base)}
    assert (out[200].failed, dict(out[200].latency_hist)) == (5, {3: 30, 12: 1})
    assert out[20].failed == 0 and 7 in out
    assert canary.component_figures(canary.since(now, base)) == {"b": Figures(227, 5, {3: 30, 12: 1})}


def test_failures_are_judged_before_latencies() -> None:
    """A bad version slows the trees it fails too: the reason names the failures."""
    seen = _seen({"a": Figures(1000, 0, _lat(90.0, 1000)), "b": Figures(800, 200)},
                 {"a": Figures(1000, 0, _lat(20.0, 1000)), "b": Figures(1000, 0)})
    slow = {"a": canary.LatencyCheck(0.0, judged=3, regressed=3, streak=3, last="90 ms")}
    assert judge(S, seen, 0, 0, 1, 120, slow).reason == "FailedFraction"
    assert judge(S, _seen({"a": seen.new["a"]}, {"a": seen.old["a"]}), 0, 0, 1, 120, slow).reason == "LatencyP99"
