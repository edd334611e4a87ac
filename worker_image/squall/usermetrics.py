"""A component's own metrics: Storm's metrics v2 (`TopologyContext.registerCounter` & co.).

A task registers counters, gauges, histograms, meters and timers through its context
(`context.register_counter(name)`, ...); each call returns a small object the component bumps
on its executor's own thread. An update is a plain attribute add (a histogram: a bisect and a
list add): no lock, since one thread owns the task; the worker's `/metrics` reads the values
at scrape time, racily, as it reads the executors' own `Counters` (a scrape is a snapshot).

Storm -> Squall:
    registerCounter(name)         -> register_counter(name)        Counter.inc(n=1) / dec(n=1)
    registerGauge(name, gauge)    -> register_gauge(name, fn)      fn() read at scrape time
    registerHistogram(name)       -> register_histogram(name)      Histogram.update(value)
    registerMeter(name)           -> register_meter(name)          Meter.mark(n=1)
    registerTimer(name)           -> register_timer(name)          Timer.time() / update(seconds)

Storm's Dropwizard reservoirs and EWMA rates are not kept: a histogram or timer is a Prometheus
histogram (fixed buckets; quantiles and rates are the scraper's `histogram_quantile` and
`rate`), a meter is a Prometheus counter. `families` turns the registered metrics of a worker's
tasks into one metric family per kind (`squall_user_counter_total`, `squall_user_gauge`,
`squall_user_histogram`, `squall_user_meter_total`, `squall_user_timer_seconds`) labelled
`topology`, `component`, `task`, `name` (the name as registered) and `worker`, so two components' metrics
of one name but different kinds never collide in one family.

Bounded: `MAX_METRICS_PER_TASK` names per task; past it, or for a name that breaks `NAME_RULE`,
registration raises `MetricError`, naming the component and task.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

log = logging.getLogger("squall.usermetrics")

MAX_METRICS_PER_TASK = 1000
MAX_NAME_LENGTH = 128
# Dropwizard-style names as Storm users write them: letters, digits, `_`, `.`, `-`, `:`
NAME_RULE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")

# a histogram's default upper bounds (any unit): 1-2.5-5 steps from 1 to 10^6
VALUE_BUCKETS: tuple[float, ...] = tuple(m * 10.0 ** e for e in range(7) for m in (1.0, 2.5, 5.0))[:-2]
# a timer's default upper bounds, seconds (the worker's own latency buckets)
TIMER_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class MetricError(ValueError):
    """A registration refused: a bad name, a name of another kind, too many metrics."""


class Counter:
    """Storm's Counter: `inc(n)`, `dec(n)`; `count` is the value."""

    __slots__ = ("count",)
    kind = "counter"

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n

    def dec(self, n: int = 1) -> None:
        self.count -= n


class Meter:
    """Storm's Meter: `mark(n)`. Exported as a counter; its rates are the scraper's `rate()`."""

    __slots__ = ("count",)
    kind = "meter"

    def __init__(self) -> None:
        self.count = 0

    def mark(self, n: int = 1) -> None:
        self.count += n


class Gauge:
    """Storm's Gauge: `fn()` is called at scrape time, on the scraping thread. A callback that
    raises (or returns no number) is logged once and its gauge is absent from that scrape."""

    __slots__ = ("fn", "failing", "name")
    kind = "gauge"

    def __init__(self, name: str, fn: Callable[[], float]) -> None:
        self.name = name
        self.fn = fn
        self.failing = False

    def read(self, where: str) -> float | None:
        try:
            value = float(self.fn())
        except Exception as exc:
            if not self.failing:
                self.failing = True
                log.warning("%s: gauge %r raised %r; it is left out of /metrics until it answers again",
                            where, self.name, exc)
            return None
        self.failing = False
        return value


class Histogram:
    """Storm's Histogram: `update(value)`. Prometheus buckets (`bounds`, upper edges) instead of
    Dropwizard's reservoir."""

    __slots__ = ("bounds", "counts", "sum")
    kind = "histogram"

    def __init__(self, bounds: Sequence[float] = VALUE_BUCKETS) -> None:
        self.bounds = check_buckets(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def update(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative Prometheus buckets, from one copy of the counts (an update in between
        cannot make +Inf disagree with the lower buckets)."""
        counts = list(self.counts)
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip([*self.bounds, math.inf], counts):
            total += n
            out.append(("+Inf" if bound == math.inf else repr(bound), float(total)))
        return out


class Timer(Histogram):
    """Storm's Timer: `with timer.time(): ...` (or `t = timer.time(); ...; t.stop()`), or
    `update(seconds)`; durations in seconds."""

    __slots__ = ("clock",)
    kind = "timer"

    def __init__(self, bounds: Sequence[float] = TIMER_BUCKETS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(bounds)
        self.clock = clock

    def time(self) -> TimerContext:
        return TimerContext(self)


class TimerContext:
    """One timing: started when made, recorded by `stop()` or the end of its `with` block."""

    __slots__ = ("timer", "start", "stopped")

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.start = timer.clock()
        self.stopped = False

    def stop(self) -> float:
        """Records the time since the start (once) and returns it, seconds."""
        elapsed = self.timer.clock() - self.start
        if not self.stopped:
            self.stopped = True
            self.timer.update(elapsed)
        return elapsed

    def __enter__(self) -> TimerContext:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


UserMetric = Counter | Meter | Gauge | Histogram | Timer


def check_buckets(bounds: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(b) for b in bounds)
    if not out or any(not math.isfinite(b) for b in out) or any(a >= b for a, b in zip(out, out[1:])):
        raise MetricError(f"histogram buckets must be finite and strictly increasing, got {list(bounds)}")
    return out


def name_problem(name: object) -> str | None:
    """Why `name` cannot name a metric, or None."""
    if not isinstance(name, str):
        return f"a metric name must be a string, got {type(name).__name__}"
    if len(name) > MAX_NAME_LENGTH:
        return f"metric name {name[:40]!r}... is longer than {MAX_NAME_LENGTH} characters"
    if not NAME_RULE.fullmatch(name):
        return (f"metric name {name!r} is not allowed: use letters, digits, '_', '.', '-', ':' "
                "and start with a letter or '_'")
    return None


class TaskMetrics:
    """The metrics one task registered, by name (at most `limit`)."""

    def __init__(self, topology: str, component: str, task: int, limit: int = MAX_METRICS_PER_TASK) -> None:
        self.topology = topology
        self.component = component
        self.task = task
        self.limit = limit
        self.metrics: dict[str, UserMetric] = {}

    def where(self) -> str:
        return f"component {self.component} task {self.task}"

    def _register(self, name: str, kind: str, make: Callable[[], UserMetric]) -> UserMetric:
        problem = name_problem(name)
        if problem is not None:
            raise MetricError(f"{self.where()}: {problem}")
        have = self.metrics.get(name)
        if have is not None:
            if have.kind != kind or kind == "gauge":
                raise MetricError(f"{self.where()}: a {have.kind} named {name!r} is already registered")
            return have  # Storm (Dropwizard) hands back the registered counter, meter, ...
        if len(self.metrics) >= self.limit:
            raise MetricError(f"{self.where()}: cannot register {kind} {name!r}: a task may register at "
                              f"most {self.limit} metrics")
        metric = make()
        self.metrics[name] = metric
        return metric

    def counter(self, name: str) -> Counter:
        m = self._register(name, "counter", Counter)
        assert isinstance(m, Counter)
        return m

    def meter(self, name: str) -> Meter:
        m = self._register(name, "meter", Meter)
        assert isinstance(m, Meter)
        return m

    def gauge(self, name: str, fn: Callable[[], float]) -> Gauge:
        if not callable(fn):
            raise MetricError(f"{self.where()}: gauge {name!r} needs a callable returning a number, "
                              f"got {type(fn).__name__}")
        m = self._register(name, "gauge", lambda: Gauge(name, fn))
        assert isinstance(m, Gauge)
        return m

    def histogram(self, name: str, buckets: Sequence[float] = VALUE_BUCKETS) -> Histogram:
        try:
            bounds = check_buckets(buckets)
        except MetricError as exc:
            raise MetricError(f"{self.where()}: histogram {name!r}: {exc}") from None
        m = self._register(name, "histogram", lambda: Histogram(bounds))
        assert type(m) is Histogram
        return m

    def timer(self, name: str, buckets: Sequence[float] = TIMER_BUCKETS,
              clock: Callable[[], float] = time.perf_counter) -> Timer:
        try:
            bounds = check_buckets(buckets)
        except MetricError as exc:
            raise MetricError(f"{self.where()}: timer {name!r}: {exc}") from None
        m = self._register(name, "timer", lambda: Timer(bounds, clock))
        assert isinstance(m, Timer)
        return m


def families(tasks: Iterable[TaskMetrics], worker: str = "") -> list[Metric]:
    """The user metrics of a worker's tasks for one scrape: one family per kind, present (with
    no samples) even when nothing is registered; `worker` (node-port) labels each sample, as
    the worker's own figures are labelled."""
    labels = ["topology", "component", "task", "name", "worker"]
    counters = CounterMetricFamily("squall_user_counter", "Components' own counters (register_counter).",
                                   labels=labels)
    meters = CounterMetricFamily("squall_user_meter", "Components' own meters (register_meter): events marked.",
                                 labels=labels)
    gauges = GaugeMetricFamily("squall_user_gauge", "Components' own gauges (register_gauge), read at scrape time.",
                               labels=labels)
    hists = HistogramMetricFamily("squall_user_histogram", "Components' own histograms (register_histogram).",
                                  labels=labels)
    timers = HistogramMetricFamily("squall_user_timer_seconds", "Components' own timers (register_timer), seconds.",
                                   labels=labels)
    for tm in tasks:
        for name, m in list(tm.metrics.items()):
            lv = [tm.topology, tm.component, str(tm.task), name, worker]
            if isinstance(m, Counter):
                counters.add_metric(lv, m.count)
            elif isinstance(m, Meter):
                meters.add_metric(lv, m.count)
            elif isinstance(m, Gauge):
                value = m.read(tm.where())
                if value is not None:
                    gauges.add_metric(lv, value)
            else:
                buckets = m.buckets()
                (timers if isinstance(m, Timer) else hists).add_metric(lv, buckets, m.sum)
    return [counters, meters, gauges, hists, timers]


def snapshot(tasks: Iterable[TaskMetrics]) -> list[dict[str, object]]:
    """The registered metrics of a worker's tasks as plain rows, for the UI's component page and
    the reporters (`squall.worker.reporters`): component, task, name, kind, and `value` (a
    counter's or meter's count, a gauge's reading, a histogram's or timer's mean) plus `count`
    and `sum` for histograms and timers. A gauge that raises is left out, as on /metrics."""
    rows: list[dict[str, object]] = []
    for tm in tasks:
        for name, m in sorted(tm.metrics.items()):
            row: dict[str, object] = {"component": tm.component, "task": tm.task, "name": name, "kind": m.kind}
            if isinstance(m, (Counter, Meter)):
                row["value"] = m.count
            elif isinstance(m, Gauge):
                value = m.read(tm.where())
                if value is None:
                    continue
                row["value"] = value
            else:
                n, total = m.count, m.sum
                row.update(value=total / n if n else 0.0, count=n, sum=total)
            rows.append(row)
    return sorted(rows, key=lambda r: (str(r["component"]), int(str(r["task"])), str(r["name"])))
