"""Storm's metrics v2 reporters (topology.metrics.reporters, squall.metricreporters): the setting
checked with each problem named, what a console and a CSV report write, and the reporting step
on an injected clock writing real files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from squall import metricreporters, usermetrics
from squall.metricreporters import Reporter, Reporting, parse
from squall.validation import TopologyError, check_topology, parse_topology

STORM_CONSOLE = "org.apache.storm.metrics2.reporters.ConsoleStormReporter"
STORM_CSV = "org.apache.storm.metrics2.reporters.CsvStormReporter"


def test_storms_setting_and_the_short_names_are_read() -> None:
    got, problems = parse([
        {"class": STORM_CONSOLE, "report.period": 10, "report.period.units": "SECONDS"},
        {"class": STORM_CSV, "report.period": 1, "report.period.units": "MINUTES", "csv.log.dir": "/tmp/m"},
        {"class": "console"},
        {"class": "csv", "report.period": 1500, "report.period.units": "milliseconds"},
    ])
    assert problems == []
    assert got == [Reporter("console", 10.0), Reporter("csv", 60.0, "/tmp/m"), Reporter("console", 10.0),
                   Reporter("csv", 1.5, "csvmetrics")]
    assert parse(None) == ([], [])


@pytest.mark.parametrize(("value", "problem"), [
    ({"class": "console"}, ("", "expected a list of reporters")),
    (["console"], ("[0]", "expected a map with `class`")),
    ([{"class": "org.apache.storm.metrics2.reporters.GraphiteStormReporter"}],
     ("[0].class", "unknown reporter 'org.apache.storm.metrics2.reporters.GraphiteStormReporter'")),
    ([{"class": "console", "report.period.units": "FORTNIGHTS"}], ("[0].report.period.units", "unknown unit")),
    ([{"class": "console", "report.period": 0}], ("[0].report.period", "expected a positive number, got 0")),
    ([{"class": "console", "report.period": "10"}], ("[0].report.period", "expected a positive number")),
    ([{"class": "console", "report.period": 100, "report.period.units": "MILLISECONDS"}],
     ("[0].report.period", "at most every 1 s, got 0.1 s")),
    ([{"class": "csv", "csv.log.dir": ""}], ("[0].csv.log.dir", "expected a directory")),
    ([{"class": "console"}] * 9, ("", "at most 8 reporters")),
])
def test_a_bad_setting_names_the_entry_and_key(value: object, problem: tuple[str, str]) -> None:
    got, problems = parse(value)
    assert got == []
    assert len(problems) == 1 and problems[0][0] == problem[0] and problem[1] in problems[0][1], problems


def test_squall_validate_refuses_a_bad_setting_with_its_path() -> None:
    topo = parse_topology({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
        "spec": {"config": {"topology.metrics.reporters": [{"class": "console"}, {"class": "jmx"}]},
                 "spouts": [{"name": "s", "class": "x:Y"}], "bolts": []}})
    with pytest.raises(TopologyError) as err:
        check_topology(topo, resolve_classes=False)
    text = str(err.value)
    assert "spec.config['topology.metrics.reporters'][1].class" in text and "unknown reporter 'jmx'" in text, text


def metrics() -> list[usermetrics.TaskMetrics]:
    a = usermetrics.TaskMetrics("wc", "split", 3)
    a.counter("lines").inc(7)
    a.gauge("queue", lambda: 2.5)
    t = a.timer("work", clock=lambda: 0.0)
    t.update(0.5)
    t.update(1.5)
    b = usermetrics.TaskMetrics("wc", "count", 5)
    b.meter("words").mark(40)
    b.histogram("len").update(4)
    return [a, b]


def test_a_snapshot_has_each_metric_with_the_figures_of_its_kind() -> None:
    assert usermetrics.snapshot(metrics()) == [
        {"component": "count", "task": 5, "name": "len", "kind": "histogram", "value": 4.0, "count": 1, "sum": 4.0},
        {"component": "count", "task": 5, "name": "words", "kind": "meter", "value": 40},
        {"component": "split", "task": 3, "name": "lines", "kind": "counter", "value": 7},
        {"component": "split", "task": 3, "name": "queue", "kind": "gauge", "value": 2.5},
        {"component": "split", "task": 3, "name": "work", "kind": "timer", "value": 1.0, "count": 2, "sum": 2.0},
    ]


def test_console_and_csv_reports() -> None:
    rows = usermetrics.snapshot(metrics())
    text = metricreporters.console_text(rows, "wc", "node-1-6700", 0.0)
    assert text.splitlines() == [
        "metrics of topology wc worker node-1-6700 at 1970-01-01T00:00:00Z: 5 registered",
        "  count task 5 histogram len: count=1 sum=4.0 mean=4.0",
        "  count task 5 meter words: count=40",
        "  split task 3 counter lines: count=7",
        "  split task 3 gauge queue: value=2.5",
        "  split task 3 timer work: count=2 sum=2.0 mean=1.0",
    ]
    csv = metricreporters.csv_rows(rows, "wc", 12.7)
    assert csv["wc.split.3.lines.csv"] == (["t", "count"], [12, 7])
    assert csv["wc.split.3.queue.csv"] == (["t", "value"], [12, 2.5])
    assert csv["wc.split.3.work.csv"] == (["t", "count", "sum", "mean"], [12, 2, 2.0, 1.0])
    assert metricreporters.csv_file_name("a/b", {"component": "c", "task": 1, "name": "x:y/z"}) == "a_b.c.1.x_y_z.csv"


def test_reports_are_written_each_period_on_the_injected_clock(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    tasks = metrics()
    now = [1000.0]
    reporting = Reporting([Reporter("console", 10.0), Reporter("csv", 5.0, str(tmp_path / "m"))], "wc",
                          "node-1-6700", lambda: tasks, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="squall.metrics.console")
    assert reporting.report_due(1004.0) == 1.0  # nothing due yet
    assert not (tmp_path / "m").exists() and not caplog.records
    assert reporting.report_due(1005.0) == 5.0  # the CSV's first report
    tasks[0].metrics["lines"].inc(3)  # type: ignore[union-attr]
    assert reporting.report_due(1010.0) == 5.0  # both
    lines = (tmp_path / "m" / "wc.split.3.lines.csv").read_text().splitlines()
    assert lines == ["t,count", "1005,7", "1010,10"]
    (record,) = caplog.records
    assert "split task 3 counter lines: count=10" in record.getMessage()
    assert len(list((tmp_path / "m").iterdir())) == 5


def test_a_directory_that_cannot_be_written_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    reporting = Reporting([Reporter("csv", 1.0, str(blocker / "m"))], "wc", "n-1", metrics, clock=lambda: 0.0)
    reporting.report_due(1.0)
    reporting.report_due(2.0)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "metrics reporter 0 (csv) cannot write" in errors[0].getMessage()
