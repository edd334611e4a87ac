"""A component's own metrics (squall.usermetrics, Storm's metrics v2): the metric objects, the
name rules and the bound, with plain values, and their families on a worker's /metrics parsed
back with prometheus_client's own parser."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from squall import usermetrics
from squall.usermetrics import MetricError, TaskMetrics
from squall.worker.metrics import WorkerFigures, exposition, registry_for

pytestmark = pytest.mark.unit

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(*tasks: TaskMetrics) -> Samples:
    status, _, body = exposition(registry_for(lambda: WorkerFigures("t", "n-1", user=tasks)), "")
    assert status == 200
    out: Samples = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def key(component: str, task: int, name: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"topology": "t", "component": component, "task": str(task), "name": name, "worker": "n-1",
                         **extra}.items()))


def test_counter_and_meter_add_what_they_are_given() -> None:
    tm = TaskMetrics("t", "split", 3)
    c, m = tm.counter("words"), tm.meter("lines")
    c.inc()
    c.inc(5)
    c.dec(2)
    m.mark()
    m.mark(10)
    assert (c.count, m.count) == (4, 11)
    got = scrape(tm)
    assert got["squall_user_counter_total"] == {key("split", 3, "words"): 4.0}
    assert got["squall_user_meter_total"] == {key("split", 3, "lines"): 11.0}


def test_histogram_buckets_are_cumulative_upper_bounds() -> None:
    h = TaskMetrics("t", "b", 1).histogram("size", buckets=[1, 10, 100])
    for v in (0.5, 1, 2, 10, 50, 1000):
        h.update(v)
    assert h.count == 6 and h.sum == pytest.approx(1063.5)
    assert h.buckets() == [("1.0", 2.0), ("10.0", 4.0), ("100.0", 5.0), ("+Inf", 6.0)]


def test_default_buckets() -> None:
    h = TaskMetrics("t", "b", 1).histogram("size")
    assert h.bounds[0] == 1.0 and h.bounds[-1] == 1e6 and list(h.bounds) == sorted(h.bounds)
    assert TaskMetrics("t", "b", 1).timer("work").bounds == usermetrics.TIMER_BUCKETS


def test_timer_times_a_block_and_takes_updates_with_an_injected_clock() -> None:
    now = [100.0]
    t = TaskMetrics("t", "b", 1).timer("work", clock=lambda: now[0])
    with t.time():
        now[0] += 0.003
    ctx = t.time()
    now[0] += 2.0
    assert ctx.stop() == pytest.approx(2.0)
    ctx.stop()  # a second stop records nothing more
    t.update(0.0002)
    assert t.count == 3 and t.sum == pytest.approx(2.0032)
    buckets = dict(t.buckets())
    assert buckets["0.0005"] == 1 and buckets["0.005"] == 2 and buckets["2.5"] == 3 and buckets["+Inf"] == 3


def test_histograms_and_timers_are_prometheus_histograms() -> None:
    tm = TaskMetrics("t", "b", 7)
    tm.histogram("size", buckets=[10]).update(3)
    tm.timer("work").update(0.02)
    got = scrape(tm)
    assert got["squall_user_histogram_bucket"] == {key("b", 7, "size", le="10.0"): 1.0,
                                                   key("b", 7, "size", le="+Inf"): 1.0}
    assert got["squall_user_histogram_sum"] == {key("b", 7, "size"): 3.0}
    assert got["squall_user_timer_seconds_count"] == {key("b", 7, "work"): 1.0}
    assert got["squall_user_timer_seconds_bucket"][key("b", 7, "work", le="0.025")] == 1.0
    assert got["squall_user_timer_seconds_bucket"][key("b", 7, "work", le="0.01")] == 0.0


def test_gauges_are_read_at_scrape_time() -> None:
    value = [1.5]
    tm = TaskMetrics("t", "b", 2)
    tm.gauge("depth", lambda: value[0])
    assert scrape(tm)["squall_user_gauge"] == {key("b", 2, "depth"): 1.5}
    value[0] = 7
    assert scrape(tm)["squall_user_gauge"] == {key("b", 2, "depth"): 7.0}


def test_a_gauge_that_raises_is_absent_reported_once_and_breaks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    calls = [0]

    def broken() -> float:
        calls[0] += 1
        raise RuntimeError("no connection")

    tm = TaskMetrics("t", "b", 2)
    tm.gauge("broken", broken)
    tm.gauge("not_a_number", lambda: "many")  # type: ignore[arg-type,return-value]
    tm.gauge("fine", lambda: 3)
    tm.counter("c").inc()
    with caplog.at_level(logging.WARNING, logger="squall.usermetrics"):
        for _ in range(3):
            got = scrape(tm)
            assert got["squall_user_gauge"] == {key("b", 2, "fine"): 3.0}
            assert got["squall_user_counter_total"] == {key("b", 2, "c"): 1.0}
    assert calls[0] == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "component b task 2" in lines[0] and "'broken'" in lines[0] and "no connection" in lines[0]


def test_every_family_is_there_when_nothing_is_registered() -> None:
    got = scrape()
    assert "squall_user_counter_total" not in got  # no samples...
    status, _, body = exposition(registry_for(lambda: WorkerFigures("t", "n-1")), "")
    text = body.decode()
    for fam, kind in (("squall_user_counter_total", "counter"), ("squall_user_meter_total", "counter"),
                      ("squall_user_gauge", "gauge"), ("squall_user_histogram", "histogram"),
                      ("squall_user_timer_seconds", "histogram")):
        assert f"# TYPE {fam} {kind}\n" in text  # ...but the family is described


def test_registering_a_name_again_returns_the_same_metric() -> None:
    tm = TaskMetrics("t", "b", 1)
    assert tm.counter("n") is tm.counter("n")
    assert tm.meter("m") is tm.meter("m")
    assert tm.timer("w") is tm.timer("w")
    assert tm.histogram("h") is tm.histogram("h")


@pytest.mark.parametrize("first, second", [("counter", "meter"), ("timer", "histogram"), ("histogram", "timer"),
                                           ("gauge", "gauge"), ("counter", "gauge")])
def test_one_name_one_metric(first: str, second: str) -> None:
    tm = TaskMetrics("t", "split", 4)

    def register(kind: str) -> object:
        return tm.gauge("x", lambda: 1) if kind == "gauge" else getattr(tm, kind)("x")

    register(first)
    with pytest.raises(MetricError, match=f"component split task 4: a {first} named 'x' is already registered"):
        register(second)


@pytest.mark.parametrize("name", ["", "1abc", "has space", "tab\there", "é", "a/b", "a{b}", "x" * 129, 7, None])
def test_invalid_names_are_refused_naming_the_component(name: object) -> None:
    tm = TaskMetrics("t", "split", 4)
    with pytest.raises(MetricError, match=r"^component split task 4: .*metric name"):
        tm.counter(name)  # type: ignore[arg-type]
    assert tm.metrics == {}


@pytest.mark.parametrize("name", ["words", "_x", "storm.words-per:sec", "A9", "x" * 128])
def test_storm_style_names_are_kept_as_they_are(name: str) -> None:
    tm = TaskMetrics("t", "split", 4)
    tm.counter(name).inc()
    assert scrape(tm)["squall_user_counter_total"] == {key("split", 4, name): 1.0}


def test_bad_buckets_and_gauge_callbacks_are_refused() -> None:
    tm = TaskMetrics("t", "split", 4)
    for bad in ([], [2, 1], [1, 1], [1, float("inf")], [float("nan")]):
        with pytest.raises(MetricError, match="component split task 4: histogram 'h': .*strictly increasing"):
            tm.histogram("h", buckets=bad)
    with pytest.raises(MetricError, match="component split task 4: gauge 'g' needs a callable"):
        tm.gauge("g", 3)  # type: ignore[arg-type]
    assert tm.metrics == {}


def test_a_task_may_register_a_bounded_number_of_metrics() -> None:
    tm = TaskMetrics("t", "split", 4)
    for i in range(usermetrics.MAX_METRICS_PER_TASK):
        tm.counter(f"c{i}")
    assert tm.counter("c0") is tm.metrics["c0"]  # the ones registered still come back
    with pytest.raises(MetricError, match=r"component split task 4: cannot register meter 'more': a task may "
                       r"register at most 1000 metrics"):
        tm.meter("more")
    assert len(tm.metrics) == usermetrics.MAX_METRICS_PER_TASK
    small = TaskMetrics("t", "b", 1, limit=2)
    small.counter("a")
    small.gauge("b", lambda: 1)
    with pytest.raises(MetricError, match="at most 2 metrics"):
        small.timer("c")


def test_tasks_are_told_apart_by_their_labels() -> None:
    a, b = TaskMetrics("t", "split", 1), TaskMetrics("t", "split", 2)
    a.counter("n").inc(2)
    b.counter("n").inc(3)
    TaskMetrics("t", "count", 5).counter("n")
    got = scrape(a, b)
    assert got["squall_user_counter_total"] == {key("split", 1, "n"): 2.0, key("split", 2, "n"): 3.0}
