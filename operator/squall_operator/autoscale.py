"""When the operator scales a topology by itself (`spec.autoscale`): how loaded its bolts are,
and whether that is worth one more worker, one fewer, or nothing.

Two pure steps, as `degraded.assess`: `measure` turns two samples of the executors' cumulative
counts from the heartbeats into each bolt's figures, the two signals: its busy fraction (Storm's
capacity: the share of the time its busiest executor spent in `execute`) and its backpressure
(the share of the time its most held-up executor's inbox was full); `lags` reads the third
signal, each spout's lag (records in its Kafka partitions not yet processed for good, Storm's
totalSpoutLag, as the heartbeats carry it); and `decide` turns the signal's figure, the time
now (the caller's clock) and what the previous status kept (`status.autoscale`, so a restarted operator
judges on) into a `Decision`: the workers and the bolts' parallelism to rebalance to, or none,
with the message its Event says. Nothing here reads a clock or calls anything.

The rules, in order:

* judged only while the spouts are active and nothing else moves the topology (a rebalance, a
  roll): a rebalance deactivates the spouts, so the figures just after one start afresh;
* scale out when the signal stayed above `target` for `scaleOutAfterSecs`: `step` more workers,
  at most `maxWorkers` and the slots the nodes offer, and the bolts above target (at least the
  busiest) get executors in proportion, at most their tasks;
* scale in when the signal stayed below `target x scaleInBelow` for `scaleInAfterSecs` and would
  still be under `target` with `step` fewer workers (value x n / (n - step)), at least
  `minWorkers`: that projection is the hysteresis, a scale-in never lands above the target;
* with `signal: lag` the figure is the spout with the most lag (records); a scale-out also
  needs the lag to be at its highest since the wait began (a backlog that drains is left to
  drain: after a scale-out the lag stays above target for a while, and without this every
  cooldown would add workers up to maxWorkers); and a backlog does not spread over workers as a
  share of time does: the bolts that get executors are those
  whose busy fraction is above LAG_BUSY_TARGET (at least the busiest), and the projection that
  guards a scale-in is the busiest bolt's busy fraction with fewer workers, under
  LAG_BUSY_TARGET (no busy figure: no scale-in);
* no decision within `cooldownSecs` of the last one, and the timers start again after each.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from squall.models.cluster import WorkerHeartbeat
from squall.models.v1alpha1 import AutoscaleSpec

__all__ = [
    "DEFAULT_TARGET",
    "LAG_BUSY_TARGET",
    "MIN_INTERVAL_SECS",
    "SCALE_IN",
    "SCALE_OUT",
    "Decision",
    "ExecutorSample",
    "Figures",
    "Meter",
    "Settings",
    "clamp",
    "decide",
    "lags",
    "measure",
    "samples",
]

SCALE_OUT: Final = "ScaledOut"
SCALE_IN: Final = "ScaledIn"
# the figures are taken over at least this long: the heartbeats come every few seconds
MIN_INTERVAL_SECS: Final = 5.0
# busy and backpressure: the target when the spec gives none
DEFAULT_TARGET: Final = 0.7
# with `signal: lag`: the busy fraction above which a bolt gets executors, and under which the
# busiest bolt must stay with fewer workers for a scale-in (the busy signal's default target)
LAG_BUSY_TARGET: Final = DEFAULT_TARGET


@dataclass(frozen=True)
class Settings:
    """`spec.autoscale` with its defaults filled in."""

    min_workers: int
    max_workers: int
    signal: str = "busy"
    target: float = 0.7
    scale_out_after_secs: float = 30.0
    scale_in_after_secs: float = 120.0
    scale_in_below: float = 0.5
    cooldown_secs: float = 60.0
    step: int = 1

    @classmethod
    def of(cls, spec: AutoscaleSpec) -> Settings:
        return cls(spec.min_workers, spec.max_workers, spec.signal.value,
                   DEFAULT_TARGET if spec.target is None else spec.target,
                   spec.scale_out_after_secs, spec.scale_in_after_secs, spec.scale_in_below,
                   spec.cooldown_secs, spec.step)


def clamp(workers: int, settings: Settings) -> int:
    """`workers` within [minWorkers, maxWorkers]."""
    return min(max(workers, settings.min_workers), settings.max_workers)


# --- the signal: busy fractions from the heartbeats' cumulative counts ----------------------------


@dataclass(frozen=True)
class ExecutorSample:
    """One executor's cumulative counts in one heartbeat: tuples executed, the sampled execute
    latencies (their sum in ms and how many), and the seconds its inbox was full."""

    component: str
    time_secs: float
    executed: int
    latency_ms_sum: float
    latency_samples: int
    backpressure_secs: float = 0.0


def samples(beats: Iterable[WorkerHeartbeat], bolts: Iterable[str]) -> dict[str, ExecutorSample]:
    """The bolts' executors' samples in the workers' heartbeats (executor key -> sample)."""
    wanted = set(bolts)
    return {
        key: ExecutorSample(s.component, beat.time_secs, s.executed, s.latency_ms_mean * s.latency_samples,
                            s.latency_samples, s.backpressure_secs)
        for beat in beats for key, s in beat.executors.items() if s.component in wanted
    }


def lags(beats: Iterable[WorkerHeartbeat], spouts: Iterable[str]) -> dict[str, float] | None:
    """Each spout's lag in the workers' heartbeats (records, summed over its executors that
    report one: a KafkaSpout once its partitions' watermarks are fetched); None: none reports
    one (no figure)."""
    wanted = set(spouts)
    out: dict[str, float] = {}
    for beat in beats:
        for s in beat.executors.values():
            if s.component in wanted and s.lag is not None:
                out[s.component] = out.get(s.component, 0.0) + s.lag
    return out or None


@dataclass(frozen=True)
class Meter:
    """What `measure` keeps between calls: the samples the next figures are taken against, when
    they were taken, and the last figures (component -> busy fraction, and -> backpressure
    fraction; None: none yet)."""

    at: float
    base: Mapping[str, ExecutorSample]
    busy: Mapping[str, float] | None = None
    backpressure: Mapping[str, float] | None = None

    def of(self, signal: str) -> Mapping[str, float] | None:
        """The figures of a `spec.autoscale.signal`."""
        return self.backpressure if signal == "backpressure" else self.busy


def measure(meter: Meter | None, now: Mapping[str, ExecutorSample], at: float) -> Meter:
    """Each bolt's busy and backpressure fractions between the samples `meter` keeps and `now`
    (taken at `at`), once at least MIN_INTERVAL_SECS passed; until then the last figures stand.

    An executor's busy fraction is executed x mean execute latency / elapsed time (Storm's
    capacity; the latency is sampled, 1 tuple in 16, so its mean over the interval is used), its
    backpressure fraction the seconds its inbox was full / elapsed time; a component's figure is
    its highest executor's. An executor that is new, moved or restarted (counts gone back) has
    no figure until the next interval.
    """
    if meter is None:
        return Meter(at, dict(now))
    if at - meter.at < MIN_INTERVAL_SECS and at >= meter.at:
        return meter
    busy: dict[str, float] = {}
    held: dict[str, float] = {}
    for key, cur in now.items():
        prev = meter.base.get(key)
        if prev is None or prev.component != cur.component:
            continue
        elapsed = cur.time_secs - prev.time_secs
        executed = cur.executed - prev.executed
        sampled = cur.latency_samples - prev.latency_samples
        blocked = cur.backpressure_secs - prev.backpressure_secs
        if elapsed <= 0 or executed < 0 or sampled < 0 or blocked < 0:
            continue
        if sampled > 0:
            mean_ms = (cur.latency_ms_sum - prev.latency_ms_sum) / sampled
        else:
            mean_ms = cur.latency_ms_sum / cur.latency_samples if cur.latency_samples else 0.0
        fraction = max(0.0, executed * mean_ms / 1000.0 / elapsed)
        busy[cur.component] = max(busy.get(cur.component, 0.0), fraction)
        held[cur.component] = max(held.get(cur.component, 0.0), min(1.0, blocked / elapsed))
    if not busy:
        return Meter(at, dict(now), meter.busy, meter.backpressure)
    return Meter(at, dict(now), busy, held)


# --- the decision ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """What the operator knows of the topology now.

    `active`: the spouts are active and no rebalance, roll or spec change is under way (else
    nothing is judged); `workers`: numWorkers; `load`: bolt -> the signal's figure (`lag`:
    spout -> records; None: not measured yet); `parallelism` and `tasks`: bolt -> executors and tasks; `slots`: the most workers the
    nodes can give the topology (its own slots plus the free ones it may use; None: unknown);
    `busy`: bolt -> busy fraction, which with `signal: lag` picks the bolts that get executors.
    """

    active: bool
    workers: int
    load: Mapping[str, float] | None
    parallelism: Mapping[str, int] = field(default_factory=dict)
    tasks: Mapping[str, int] = field(default_factory=dict)
    slots: int | None = None
    busy: Mapping[str, float] | None = None


@dataclass(frozen=True)
class Decision:
    """`reason` SCALE_OUT or SCALE_IN with the workers and the bolts' parallelism (only those
    that change) to rebalance to and the Event's message; reason None: nothing to do. `state` is
    `status.autoscale` (what the next call is given back as `previous`)."""

    reason: str | None
    workers: int
    parallelism: dict[str, int]
    message: str
    state: dict[str, Any]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _iso(secs: float) -> str:
    return dt.datetime.fromtimestamp(secs, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _grown(busy: Mapping[str, float], figures: Figures, workers: int, target: float) -> dict[str, int]:
    """Executors for the bolts above target (at least the busiest): in proportion to the
    workers, one more at least, at most their tasks."""
    known = {c: b for c, b in busy.items() if c in figures.parallelism}
    hot = [c for c, b in known.items() if b > target] or ([max(known, key=lambda c: known[c])] if known else [])
    out: dict[str, int] = {}
    for comp in sorted(hot):
        p = figures.parallelism[comp]
        grown = min(figures.tasks.get(comp, p), max(p + 1, math.ceil(p * workers / figures.workers)))
        if grown > p:
            out[comp] = grown
    return out


def _shrunk(busy: Mapping[str, float], figures: Figures, workers: int, target: float,
            known_only: bool = False) -> dict[str, int]:
    """Fewer executors for the bolts, in proportion to the workers, where the bolt would still be
    under target with them (`known_only`: only bolts with a figure)."""
    out: dict[str, int] = {}
    for comp, p in sorted(figures.parallelism.items()):
        if known_only and comp not in busy:
            continue
        shrunk = max(1, math.floor(p * workers / figures.workers + 0.5))
        if shrunk < p and busy.get(comp, 0.0) * p / shrunk < target:
            out[comp] = shrunk
    return out


def decide(previous: Mapping[str, Any] | None, figures: Figures, at: float, settings: Settings) -> Decision:
    """The decision at time `at` (seconds) on `figures`, after the state `previous` (the last
    `Decision.state`, as the status kept it; None or {} at first). See the module doc."""
    prev = previous or {}
    last = _number(prev.get("lastScaleSecs"))
    state: dict[str, Any] = {"signal": settings.signal, "target": settings.target,
                             "minWorkers": settings.min_workers, "maxWorkers": settings.max_workers}
    for key in ("lastDecision", "lastDecisionTime", "lastScaleSecs"):
        if key in prev:
            state[key] = prev[key]

    def none(message: str) -> Decision:
        state["message"] = message
        return Decision(None, figures.workers, {}, message, state)

    if not figures.active:
        return none("not judged: the spouts are not active, or a rebalance or roll is under way")
    if not figures.load:
        return none(f"not judged yet: no {settings.signal} figure from the heartbeats")
    busy = figures.load
    value = max(busy.values())
    busiest = max(busy, key=lambda c: busy[c])
    state["value"] = round(value, 3)
    state["busiest"] = busiest
    n, step, target = figures.workers, settings.step, settings.target
    fewer = max(settings.min_workers, n - step)
    lag = settings.signal == "lag"
    # the figures that pick the bolts to grow or shrink, and the bound a scale-in must stay under
    pick, pick_target = (figures.busy or {}, LAG_BUSY_TARGET) if lag else (busy, target)
    peak = max(pick.values()) if pick else math.inf
    projected = peak * n / fewer if fewer < n else math.inf
    above = value > target
    below = value < target * settings.scale_in_below and projected < pick_target
    above_since = _number(prev.get("aboveSince")) if above else None
    below_since = _number(prev.get("belowSince")) if below else None
    if above and (above_since is None or above_since > at):
        above_since = at
    if below and (below_since is None or below_since > at):
        below_since = at
    if above_since is not None:
        state["aboveSince"] = above_since
    # lag: the highest figure since the wait began; one below it is a backlog that drains
    above_peak = _number(prev.get("abovePeak")) if lag and above_since is not None else None
    if lag and above_since is not None:
        if above_peak is None or above_since == at or value > above_peak:
            above_peak = value
        state["abovePeak"] = above_peak
    if below_since is not None:
        state["belowSince"] = below_since
    why = f"{settings.signal} {value:.0f} ({busiest})" if lag else f"{settings.signal} {value:.2f} ({busiest})"
    cooling = last is not None and 0 <= at - last < settings.cooldown_secs
    wait_out = above_since is not None and at - above_since >= settings.scale_out_after_secs
    wait_in = below_since is not None and at - below_since >= settings.scale_in_after_secs
    if not (wait_out or wait_in):
        if above_since is not None:
            return none(f"{why} above target {target:g} for {at - above_since:.0f}s of "
                        f"{settings.scale_out_after_secs:g}s")
        if below_since is not None:
            return none(f"{why} below target {target:g} x {settings.scale_in_below:g} for "
                        f"{at - below_since:.0f}s of {settings.scale_in_after_secs:g}s")
        return none(f"{why} within the band: target {target:g}, scale in below "
                    f"{target * settings.scale_in_below:g}")
    if wait_out and above_peak is not None and value < above_peak:
        return none(f"{why} above target {target:g} for {at - (above_since or at):.0f}s, but down from "
                    f"{above_peak:.0f}: the backlog drains, no scale-out")
    if cooling and last is not None:
        return none(f"{why} {'above' if wait_out else 'below'} target, cooling down until "
                    f"{_iso(last + settings.cooldown_secs)} (cooldownSecs {settings.cooldown_secs:g})")
    if wait_out:
        room = min(settings.max_workers, figures.slots if figures.slots is not None else settings.max_workers)
        workers = max(n, min(room, n + step))
        grown = _grown(pick, figures, workers, pick_target) if workers > n else {}
        if workers <= n:
            bound = (f"maxWorkers {settings.max_workers}" if room == settings.max_workers
                     else f"the {figures.slots} slots the nodes offer")
            return none(f"{why} above target {target:g}, but {n} workers is the most: {bound}")
        reason, text = SCALE_OUT, (f"{why} above target {target:g} for "
                                   f"{at - (at if above_since is None else above_since):.0f}s")
        changes = grown
    else:
        workers = fewer
        changes = _shrunk(pick, figures, workers, pick_target, known_only=lag)
        after = (f"the busiest bolt {projected:.2f} busy with {workers} workers" if lag
                 else f"{projected:.2f} with {workers} workers")
        reason, text = SCALE_IN, (f"{why} below target {target:g} x {settings.scale_in_below:g} for "
                                  f"{at - (at if below_since is None else below_since):.0f}s, {after}")
    parts = [f"numWorkers {n} -> {workers}"] + [
        f"{c} parallelism {figures.parallelism[c]} -> {p}" for c, p in sorted(changes.items())]
    message = f"{', '.join(parts)}: {text}"
    for key in ("aboveSince", "abovePeak", "belowSince"):
        state.pop(key, None)
    state.update(lastDecision=f"{reason}: {message}", lastDecisionTime=_iso(at), lastScaleSecs=at,
                 message=message)
    return Decision(reason, workers, changes, message, state)
