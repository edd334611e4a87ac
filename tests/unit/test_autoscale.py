"""The built-in autoscaling policy: the busy figure taken from heartbeat
counts, and the decision on plain figures and an injected time (no sleeps): out after the signal
stayed above target, in after it stayed low, cooldown, hysteresis, bounds, and a recorded load
step that never flaps."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from squall.models.cluster import ExecutorStats, WorkerHeartbeat
from squall.models.v1alpha1 import AutoscaleSpec, Topology
from squall import specchange
from squall_operator import autoscale
from squall_operator.autoscale import (
    SCALE_IN,
    SCALE_OUT,
    Decision,
    ExecutorSample,
    Figures,
    Meter,
    Settings,
    decide,
    measure,
)

pytestmark = pytest.mark.unit

S = Settings(min_workers=1, max_workers=4, target=0.5, scale_out_after_secs=20, scale_in_after_secs=60,
             scale_in_below=0.5, cooldown_secs=45, step=1)
PAR = {"pass": 2, "slow": 1}
TASKS = {"pass": 4, "slow": 4}


def figures(busy: float | None, workers: int = 2, active: bool = True, slots: int | None = 8,
            parallelism: dict[str, int] | None = None) -> Figures:
    return Figures(active=active, workers=workers,
                   load=None if busy is None else {"pass": busy / 4, "slow": busy},
                   parallelism=parallelism or PAR, tasks=TASKS, slots=slots)


def _run(steps: list[tuple[float, Figures]], settings: Settings = S) -> list[Decision]:
    """Each step's decision, on the state the previous one kept."""
    out: list[Decision] = []
    state: dict[str, Any] | None = None
    for at, f in steps:
        d = decide(state, f, at, settings)
        out.append(d)
        state = d.state
    return out


def _decisions(ds: list[Decision]) -> list[str]:
    return [d.reason for d in ds if d.reason is not None]


def _simulate(values: list[float], settings: Settings = S, workers: int = 2, every: float = 5.0,
              par: dict[str, int] | None = None) -> tuple[list[tuple[float, str, int]], dict[str, int]]:
    """The slow bolt's busy figure every `every` s, each decision applied to the next figures:
    (time, reason, workers) of each decision, and the parallelism at the end."""
    state: dict[str, Any] | None = None
    par = dict(par or PAR)
    out: list[tuple[float, str, int]] = []
    for i, v in enumerate(values):
        d = decide(state, Figures(True, workers, {"pass": 0.1, "slow": v}, par, TASKS, 8), i * every, settings)
        state = d.state
        if d.reason:
            out.append((i * every, d.reason, d.workers))
            workers, par = d.workers, {**par, **d.parallelism}
    return out, par


# --- the decision ----------------------------------------------------------------------------------

def test_scales_out_once_the_signal_stayed_above_target() -> None:
    ds = _run([(t, figures(0.8)) for t in range(0, 22, 2)])
    assert [d.reason for d in ds[:-1]] == [None] * 10
    last = ds[-1]
    assert last.reason == SCALE_OUT and last.workers == 3
    assert last.parallelism == {"slow": 2}  # the busy bolt; `pass` (0.2) stays
    assert last.message.startswith("numWorkers 2 -> 3, slow parallelism 1 -> 2: busy 0.80 (slow) above target 0.5 for 20s")
    assert last.state["lastDecision"].startswith("ScaledOut: numWorkers 2 -> 3")
    assert last.state["lastScaleSecs"] == 20 and last.state["lastDecisionTime"] == "1970-01-01T00:00:20Z"
    assert last.state["value"] == 0.8 and last.state["signal"] == "busy" and last.state["target"] == 0.5
    assert "aboveSince" not in last.state


def test_a_dip_below_target_starts_the_wait_again() -> None:
    steps = [(t, figures(0.8)) for t in range(0, 16, 2)] + [(16, figures(0.4))] + \
            [(t, figures(0.8)) for t in range(18, 40, 2)]
    ds = _run(steps)
    assert [at for (at, _), d in zip(steps, ds) if d.reason] == [38]


def test_scales_in_after_the_load_dropped_for_scale_in_after_secs() -> None:
    ds = _run([(t, figures(0.1, workers=3, parallelism={"pass": 2, "slow": 2})) for t in range(0, 62, 2)])
    assert _decisions(ds) == [SCALE_IN]
    last = ds[-1]
    assert last.workers == 2 and last.parallelism == {"slow": 1, "pass": 1}
    assert "below target 0.5 x 0.5 for 60s, 0.15 with 2 workers" in last.message
    assert ds[-2].state["message"].startswith("busy 0.10 (slow) below target 0.5 x 0.5 for 58s of 60s")


def test_hysteresis_a_scale_in_never_lands_above_target() -> None:
    # at 2 workers one fewer doubles the figure: 0.24 (0.48 projected) scales in, and then stays
    # (at 1 worker, minWorkers); 0.26 is above target x scaleInBelow
    assert _simulate([0.24] * 40)[0] == [(60.0, SCALE_IN, 1)]
    assert _simulate([0.26] * 40)[0] == []
    # a bolt that would be above target with fewer executors keeps them
    d = _run([(t, figures(0.12, workers=4, parallelism={"pass": 4, "slow": 4})) for t in range(0, 65, 5)])[-1]
    assert d.reason == SCALE_IN and d.workers == 3 and d.parallelism == {"pass": 3, "slow": 3}


def test_between_the_thresholds_nothing_happens() -> None:
    ds = _run([(t, figures(0.4)) for t in range(0, 600, 5)])
    assert _decisions(ds) == []
    assert ds[-1].state["message"] == "busy 0.40 (slow) within the band: target 0.5, scale in below 0.25"


def test_cooldown_holds_the_next_decision() -> None:
    # out at 20; above again at once but held until 20 + 45; then at maxWorkers
    assert _simulate([0.9] * 24)[0] == [(20.0, SCALE_OUT, 3), (65.0, SCALE_OUT, 4)]
    ds = _run([(t, figures(0.9, workers=2 if t < 20 else 3)) for t in range(0, 50, 5)])
    assert "cooling down until 1970-01-01T00:01:05Z (cooldownSecs 45)" in ds[9].state["message"]


def test_bounded_by_max_workers_and_by_the_slots_the_nodes_offer() -> None:
    at_max = _run([(t, figures(0.9, workers=4)) for t in range(0, 30, 5)])
    assert _decisions(at_max) == []
    assert "but 4 workers is the most: maxWorkers 4" in at_max[-1].state["message"]
    no_slots = _run([(t, figures(0.9, workers=2, slots=2)) for t in range(0, 30, 5)])
    assert _decisions(no_slots) == []
    assert "the 2 slots the nodes offer" in no_slots[-1].state["message"]
    big_step = Settings(**{**S.__dict__, "step": 3})
    d = _run([(t, figures(0.9, workers=2, slots=3)) for t in range(0, 30, 5)], big_step)
    assert [(x.reason, x.workers) for x in d if x.reason] == [(SCALE_OUT, 3)]
    at_min = _run([(t, figures(0.0, workers=1)) for t in range(0, 300, 5)])
    assert _decisions(at_min) == []


def test_parallelism_grows_in_proportion_and_stops_at_the_tasks() -> None:
    f = Figures(True, 2, {"a": 0.9, "b": 0.8, "c": 0.1}, {"a": 4, "b": 3, "c": 1}, {"a": 5, "b": 8, "c": 4}, 8)
    d = _run([(t, f) for t in range(0, 25, 5)], Settings(**{**S.__dict__, "step": 2}))[-1]
    assert d.reason == SCALE_OUT and d.workers == 4 and d.parallelism == {"a": 5, "b": 6}
    # a at its tasks; b above target grows
    g = Figures(True, 2, {"a": 0.6, "b": 0.55}, {"a": 4, "b": 4}, {"a": 4, "b": 8}, 8)
    d = _run([(t, g) for t in range(0, 25, 5)])[-1]
    assert d.parallelism == {"b": 6}  # a is at its tasks


def test_not_judged_while_inactive_and_timers_start_afresh() -> None:
    steps = [(t, figures(0.9)) for t in range(0, 16, 2)] + [(16, figures(0.9, active=False))] + \
            [(t, figures(0.9)) for t in range(18, 40, 2)]
    ds = _run(steps)
    assert ds[8].state["message"].startswith("not judged: the spouts are not active")
    assert [at for (at, _), d in zip(steps, ds) if d.reason] == [38]
    assert _run([(0, figures(None))])[0].state["message"] == "not judged yet: no busy figure from the heartbeats"


def test_state_survives_an_operator_restart_as_plain_json() -> None:
    import json

    ds = _run([(t, figures(0.8)) for t in range(0, 12, 2)])
    state = json.loads(json.dumps(ds[-1].state))
    assert decide(state, figures(0.8), 20, S).reason == SCALE_OUT
    # garbage in the kept state is ignored, not trusted
    assert decide({"aboveSince": "x", "lastScaleSecs": True}, figures(0.8), 20, S).reason is None


def test_a_recorded_load_step_scales_out_then_in_and_never_flaps() -> None:
    """Busy figures of the slow bolt recorded every 5 s (shape of the real-node run: ~0.8 under
    load with one executor, ~0.4 with two, noise, then the load gone)."""
    load = [0.78, 0.83, 0.79, 0.81, 0.8, 0.84]
    after = [0.41, 0.44, 0.38, 0.47, 0.52, 0.43, 0.4, 0.45, 0.39, 0.42, 0.46, 0.41]
    idle = [0.02, 0.0, 0.01, 0.0] * 8
    values = load + after + idle
    decisions, par = _simulate(values, Settings(**{**S.__dict__, "min_workers": 2}))
    assert decisions == [(20.0, SCALE_OUT, 3), (150.0, SCALE_IN, 2)]
    assert par == {"pass": 1, "slow": 1}


# status.autoscale.value at each change in a run of tests/k8s/test_autoscale_real_nodes.py on the
# real nodes (seconds since the topology ran, busy of its SlowBolt): 0.7 with one executor, about
# 0.36 each with two after the scale-out (status showed it from 38 s), 0 once the ids ran out
REAL_RUN = [(13, 0.705), (19, 0.707), (38, 0.355), (44, 0.374), (50, 0.364), (56, 0.353), (63, 0.377),
            (68, 0.382), (75, 0.365), (81, 0.358), (87, 0.089), (93, 0.0)]
REAL_SETTINGS = Settings(min_workers=1, max_workers=2, target=0.5, scale_out_after_secs=10, scale_in_after_secs=20,
                         scale_in_below=0.5, cooldown_secs=20, step=1)


def test_the_real_nodes_record_replayed_gives_the_decisions_the_run_made() -> None:
    """The record replayed at the operator's 2 s rounds, the spouts inactive from a decision
    until the next figure (the rebalance): out once, in once, 84 s apart as in the real run (its
    operator logged ScaledOut at 00:00:58.6 and ScaledIn at 00:02:22.6; the record's times are
    the test's polls, which see a decision only with the next figure), and the bolt's
    parallelism back."""
    state: dict[str, Any] | None = None
    workers, par, decided_at = 1, {"slow": 1}, -1.0
    decisions: list[tuple[int, str, int, dict[str, int]]] = []
    for t in range(13, 160, 2):
        figure = [v for at, v in REAL_RUN if at <= t][-1]
        fresh = any(decided_at < at <= t for at, _ in REAL_RUN)
        d = decide(state, Figures(fresh, workers, {"slow": figure}, par, {"slow": 4}, 4), t, REAL_SETTINGS)
        state = d.state
        if d.reason:
            decided_at = t
            workers, par = d.workers, {**par, **d.parallelism}
            decisions.append((t, d.reason, workers, dict(par)))
    assert [(r, w, p) for _, r, w, p in decisions] == [(SCALE_OUT, 2, {"slow": 2}), (SCALE_IN, 1, {"slow": 1})]
    (out_at, *_), (in_at, *_) = decisions
    assert 19 < out_at <= 31 and 80 <= in_at - out_at <= 88


def test_clamp() -> None:
    assert [autoscale.clamp(n, S) for n in (0, 1, 3, 4, 9)] == [1, 1, 3, 4, 4]


# --- the busy figure from heartbeat counts -----------------------------------------------------------

def beat(at: float, executed: int, lat_sum: float, lat_n: int, key: str = "3-3", comp: str = "slow") -> WorkerHeartbeat:
    return WorkerHeartbeat(time_secs=at, uptime_secs=at, executors={
        key: ExecutorStats(component=comp, executed=executed, latency_ms_mean=lat_sum / lat_n if lat_n else 0.0,
                           latency_samples=lat_n),
        "1-1": ExecutorStats(component="ids", executed=0)})


def test_busy_is_executed_times_the_mean_execute_latency_over_the_interval() -> None:
    m = measure(None, autoscale.samples([beat(100, 1000, 16 * 4.0, 16)], ["slow"]), 100)
    assert m.busy is None and set(m.base) == {"3-3"}  # the spout is not a bolt
    # 3 s later: too soon, the first sample stands
    assert measure(m, autoscale.samples([beat(103, 1300, 20 * 4.0, 20)], ["slow"]), 103) is m
    # 10 s later: 800 executed at 8 ms each (sampled 50 of them) = 6.4 s of 10 s
    m2 = measure(m, autoscale.samples([beat(110, 1800, 64 + 50 * 8.0, 66)], ["slow"]), 110)
    assert m2.busy == {"slow": pytest.approx(0.64)}
    # an executor that restarted (counts back at 0) has no figure: the last ones stand
    m3 = measure(m2, autoscale.samples([beat(120, 10, 8.0, 1)], ["slow"]), 120)
    assert m3.busy == m2.busy and m3.base["3-3"].executed == 10


def test_busy_of_a_component_is_its_busiest_executor() -> None:
    a = {"3-3": ExecutorSample("slow", 0, 0, 0.0, 0), "4-4": ExecutorSample("slow", 0, 0, 0.0, 0)}
    b = {"3-3": ExecutorSample("slow", 10, 1000, 10.0 * 5, 10), "4-4": ExecutorSample("slow", 10, 100, 10.0 * 5, 10)}
    assert measure(Meter(0, a), b, 10).busy == {"slow": pytest.approx(0.5)}


def test_backpressure_is_the_share_of_the_time_an_inbox_was_full() -> None:
    a = {"3-3": ExecutorSample("slow", 0, 0, 0.0, 0, 1.0), "4-4": ExecutorSample("slow", 0, 0, 0.0, 0, 0.0)}
    b = {"3-3": ExecutorSample("slow", 10, 100, 10.0, 10, 4.0), "4-4": ExecutorSample("slow", 10, 100, 10.0, 10, 0.5)}
    m = measure(Meter(0, a), b, 10)
    assert m.backpressure == {"slow": pytest.approx(0.3)} and m.of("backpressure") is m.backpressure
    assert m.of("busy") is m.busy
    beats = [WorkerHeartbeat(time_secs=5, uptime_secs=5, executors={
        "3-3": ExecutorStats(component="slow", executed=1, backpressure_secs=2.5)})]
    assert autoscale.samples(beats, ["slow"])["3-3"].backpressure_secs == 2.5


def test_the_backpressure_signal_names_itself_in_the_decision() -> None:
    bp = Settings(**{**S.__dict__, "signal": "backpressure", "target": 0.2})
    ds = _run([(t, Figures(True, 2, {"slow": 0.4, "pass": 0.0}, PAR, TASKS, 8)) for t in range(0, 25, 5)], bp)
    assert ds[-1].reason == SCALE_OUT
    assert ds[-1].message == "numWorkers 2 -> 3, slow parallelism 1 -> 2: backpressure 0.40 (slow) above target 0.2 for 20s"
    assert decide(None, Figures(True, 2, None), 0, bp).state["message"] == (
        "not judged yet: no backpressure figure from the heartbeats")


# --- the spec -----------------------------------------------------------------------------------

def _topology(autoscale: dict[str, Any]) -> Topology:
    return Topology.model_validate({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
        "spec": {"numWorkers": 2, "autoscale": autoscale,
                 "spouts": [{"name": "s", "class": "m:S"}]}})


def test_the_spec_defaults_and_bad_values() -> None:
    spec = _topology({"maxWorkers": 4}).spec.autoscale
    assert spec is not None
    assert Settings.of(spec) == Settings(1, 4, "busy", 0.7, 30.0, 120.0, 0.5, 60.0, 1)
    with pytest.raises(ValidationError, match=r"minWorkers \(5\) is above maxWorkers \(4\)"):
        AutoscaleSpec.model_validate({"minWorkers": 5, "maxWorkers": 4})
    assert AutoscaleSpec.model_validate({"maxWorkers": 2, "signal": "backpressure"}).signal.value == "backpressure"
    for bad in ({}, {"maxWorkers": 2, "target": 1.5}, {"maxWorkers": 2, "signal": "lag"},
                {"maxWorkers": 2, "scaleInBelow": 1}, {"maxWorkers": 0}):
        with pytest.raises(ValidationError):
            AutoscaleSpec.model_validate(bad)


def test_changing_autoscale_is_not_a_spec_change_to_ignore() -> None:
    a, b = _topology({"maxWorkers": 4}), _topology({"maxWorkers": 6, "target": 0.6})
    assert specchange.classify(a.spec, b.spec).kind is specchange.Kind.NONE


# --- the lag signal (a Kafka spout's records not yet processed for good) ------------------------

LAG = Settings(**{**S.__dict__, "signal": "lag", "target": 5000.0})


def lag_figures(lag: float, busy: dict[str, float] | None, workers: int = 2,
                parallelism: dict[str, int] | None = None) -> Figures:
    return Figures(True, workers, {"kafka": lag}, parallelism or PAR, TASKS, 8, busy=busy)


def test_lags_sum_a_spouts_executors_that_report_one() -> None:
    beats = [
        WorkerHeartbeat(time_secs=5, uptime_secs=5, executors={
            "1-1": ExecutorStats(component="kafka", lag=1200), "2-2": ExecutorStats(component="kafka"),
            "3-3": ExecutorStats(component="slow", executed=10)}),
        WorkerHeartbeat(time_secs=5, uptime_secs=5, executors={"4-4": ExecutorStats(component="kafka", lag=300)}),
    ]
    assert autoscale.lags(beats, ["kafka"]) == {"kafka": 1500}
    assert autoscale.lags(beats, ["ids"]) is None  # a spout that reports none: no figure
    # a heartbeat written before the field existed reads as no figure; a reader that predates
    # it ignores the field (extra keys are ignored)
    old = WorkerHeartbeat.model_validate_json(
        '{"time_secs": 1, "uptime_secs": 1, "executors": {"1-1": {"component": "kafka"}}}')
    assert old.executors["1-1"].lag is None and autoscale.lags([old], ["kafka"]) is None


def test_the_lag_signal_scales_out_when_the_lag_stays_above_target() -> None:
    busy = {"pass": 0.2, "slow": 0.9}
    ds = _run([(t, lag_figures(9800 + 100 * t, busy)) for t in range(0, 25, 5)], LAG)
    assert _decisions(ds) == [SCALE_OUT]
    # the bolts that get executors are picked by their busy figures: slow, not pass
    assert ds[-1].workers == 3 and ds[-1].parallelism == {"slow": 2}
    assert ds[-1].message == "numWorkers 2 -> 3, slow parallelism 1 -> 2: lag 11800 (kafka) above target 5000 for 20s"
    assert ds[1].state["message"] == "lag 10300 (kafka) above target 5000 for 5s of 20s"
    # no busy figure: the workers grow, no bolt's parallelism
    d = _run([(t, lag_figures(9800, None)) for t in range(0, 25, 5)], LAG)[-1]
    assert d.reason == SCALE_OUT and d.workers == 3 and d.parallelism == {}
    assert decide(None, Figures(True, 2, None), 0, LAG).state["message"] == (
        "not judged yet: no lag figure from the heartbeats")


def test_the_lag_signal_scales_in_only_where_the_bolts_would_stay_under_their_busy_target() -> None:
    par = {"pass": 2, "slow": 2}
    ds = _run([(t, lag_figures(0, {"pass": 0.1, "slow": 0.3}, parallelism=par)) for t in range(0, 65, 5)], LAG)
    assert _decisions(ds) == [SCALE_IN]
    assert ds[-1].workers == 1 and ds[-1].parallelism == {"pass": 1, "slow": 1}
    assert ds[-1].message == ("numWorkers 2 -> 1, pass parallelism 2 -> 1, slow parallelism 2 -> 1: lag 0 (kafka) "
                              "below target 5000 x 0.5 for 60s, the busiest bolt 0.60 busy with 1 workers")
    # a bolt 0.4 busy would be 0.8 with one worker fewer, above LAG_BUSY_TARGET: no scale-in
    held = _run([(t, lag_figures(0, {"pass": 0.1, "slow": 0.4}, parallelism=par)) for t in range(0, 125, 5)], LAG)
    assert _decisions(held) == [] and held[-1].state["message"].startswith("lag 0 (kafka) within the band")
    # no busy figure: nothing says fewer workers would do
    assert _decisions(_run([(t, lag_figures(0, None)) for t in range(0, 125, 5)], LAG)) == []


# lag of a KafkaSpout every 5 s (records): records arrive faster than the topology takes them,
# the backlog grows until a worker is added (after the figure of 35 s), then drains to 0
BACKLOG_LAG = [0, 0, 2600, 5400, 8100, 10900, 13600, 16200, 17000, 16100, 15000, 14100, 13000, 12100,
                11000, 10100, 9000, 8100, 7000, 6100, 5000, 4100, 3000, 2100, 1000, 300, 0] + [0, 40, 0, 0] * 10


def test_a_backlog_that_grows_then_drains_scales_out_once_and_in_once() -> None:
    """The lag every 5 s with the slow bolt's busy figure (0.95 while a backlog stands, 0.2
    once it is gone), each decision applied to the next figures: out once the backlog grew above
    target for scaleOutAfterSecs, no second scale-out while it drains though it stays above
    target past the cooldown, in once it stayed gone for scaleInAfterSecs."""
    state: dict[str, Any] | None = None
    workers, par = 2, dict(PAR)
    out: list[tuple[float, str, int]] = []
    draining = []
    for i, lag in enumerate(BACKLOG_LAG):
        at = i * 5.0
        busy = {"pass": 0.1, "slow": 0.95 if lag > 1000 else 0.2}
        d = decide(state, lag_figures(lag, busy, workers, par), at, Settings(**{**LAG.__dict__, "min_workers": 2}))
        state = d.state
        if "the backlog drains" in d.message:
            draining.append(at)
        if d.reason:
            out.append((at, d.reason, d.workers))
            workers, par = d.workers, {**par, **d.parallelism}
    assert out == [(35.0, SCALE_OUT, 3), (180.0, SCALE_IN, 2)]
    assert par == {"pass": 1, "slow": 1}
    # past the cooldown (35 + 45 s) the lag was still above target, and falling
    assert draining and min(draining) == 60.0 and max(draining) == 95.0


def test_the_lag_spec_needs_a_target_in_records_and_busy_keeps_its_bound() -> None:
    spec = AutoscaleSpec.model_validate({"maxWorkers": 4, "signal": "lag", "target": 20000})
    assert Settings.of(spec) == Settings(1, 4, "lag", 20000.0, 30.0, 120.0, 0.5, 60.0, 1)
    with pytest.raises(ValidationError, match="signal lag needs a target"):
        AutoscaleSpec.model_validate({"maxWorkers": 4, "signal": "lag"})
    with pytest.raises(ValidationError, match="target 2 is above 1: the backpressure signal is a fraction"):
        AutoscaleSpec.model_validate({"maxWorkers": 4, "signal": "backpressure", "target": 2})
    # the schema gives target no default (it would hold for lag too): the busy signals' 0.7 is
    # the operator's
    assert AutoscaleSpec.model_validate({"maxWorkers": 4}).target is None


# (seconds, lag of the KafkaSpout, busy of the SlowBolt) read every 5 s from the heartbeats of a
# local run on the real broker (a throwaway variant of tests/integration/test_kafka_lag.py, not
# committed): 300 records/s produced for 60 s into 2 partitions, one SlowBolt executor at 5 ms a
# tuple (at most ~200/s), commits and watermarks every second; nothing scaled it, so the backlog
# grew to 6700 while records came and drained in 35 s once they stopped
REAL_LAG_RUN = [(0, 0, None), (5, 734, 0.972), (10, 1274, 0.983), (15, 1814, 0.984), (20, 2354, 0.982),
                (25, 3278, 0.991), (30, 3794, 0.991), (35, 4296, 0.989), (40, 4828, 0.984), (45, 5344, 1.003),
                (50, 5852, 0.984), (55, 6360, 0.994), (60, 6700, 0.994), (65, 5716, 0.989), (70, 4732, 0.985),
                (75, 3748, 0.991), (80, 2748, 0.993), (85, 1756, 0.993), (90, 1356, 0.988), (95, 0, 0.722)] + [
                (t, 0, 0.0) for t in range(100, 150, 5)]
REAL_LAG_SETTINGS = Settings(min_workers=1, max_workers=3, signal="lag", target=2000, scale_out_after_secs=15,
                             scale_in_after_secs=30, scale_in_below=0.5, cooldown_secs=30, step=1)


def test_the_recorded_lag_run_replayed_scales_out_while_it_grows_and_not_while_it_drains() -> None:
    """The real run's figures replayed, the spouts inactive for the figure after a decision (the
    rebalance): out once while the backlog grows, with the busy bolt grown; no second scale-out
    past the cooldown, as the lag, still above target, is falling; in once the bolt idled for
    scaleInAfterSecs (not at 95 s: 0.72 busy would be 1.44 with one worker)."""
    state: dict[str, Any] | None = None
    workers, par, decided = 1, {"slow": 1}, False
    out: list[tuple[int, str, int, dict[str, int]]] = []
    messages: dict[int, str] = {}
    for at, lag, busy in REAL_LAG_RUN:
        f = Figures(not decided, workers, {"kafka": lag}, par, {"slow": 4}, 4,
                    busy=None if busy is None else {"slow": busy})
        d = decide(state, f, at, REAL_LAG_SETTINGS)
        state, decided, messages[at] = d.state, d.reason is not None, d.message
        if d.reason:
            workers, par = d.workers, {**par, **d.parallelism}
            out.append((at, d.reason, workers, dict(par)))
    assert out == [(35, SCALE_OUT, 2, {"slow": 2}), (130, SCALE_IN, 1, {"slow": 1})]
    assert messages[35] == "numWorkers 1 -> 2, slow parallelism 1 -> 2: lag 4296 (kafka) above target 2000 for 15s"
    assert messages[60].startswith("lag 6700 (kafka) above target, cooling down until")
    assert messages[65] == "lag 5716 (kafka) above target 2000 for 20s, but down from 6700: the backlog drains, no scale-out"
    assert messages[95].startswith("lag 0 (kafka) within the band")
