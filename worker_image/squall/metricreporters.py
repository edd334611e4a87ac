"""Storm's metrics v2 reporters (`topology.metrics.reporters`) for the metrics components register
(squall.usermetrics): every `report.period` a worker writes its tasks' metrics to its log
(console) or to CSV files, as Storm's ConsoleStormReporter and CsvStormReporter do.

The setting is Storm's list, in the topology's config:

    topology.metrics.reporters:
      - class: org.apache.storm.metrics2.reporters.ConsoleStormReporter   # or: console
        report.period: 10
        report.period.units: SECONDS
      - class: org.apache.storm.metrics2.reporters.CsvStormReporter       # or: csv
        report.period: 1
        report.period.units: MINUTES
        csv.log.dir: /var/log/squall/metrics

`parse` checks it (a problem names the entry and key; `squall validate` reports them);
`console_text` and `csv_rows` are what a report writes, pure; `Reporting` is the worker's thread
that writes them, on an injected clock. Storm's metric filters and its other reporters
(Graphite, JMX) are not built: another class is refused by name.

Console: one block of lines in the worker's log (logger ``squall.metrics.console``), a line per
metric: component, task, name, kind and its figures. CSV: Dropwizard's CsvReporter layout, one
file per metric (``<topology>.<component>.<task>.<name>.csv`` in `csv.log.dir`), a header and
then a row per report: ``t`` (Unix seconds) and the figures of its kind (counter and meter:
count; gauge: value; histogram and timer: count, sum, mean).
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from squall import usermetrics

__all__ = ["CONFIG_KEY", "Reporter", "Reporting", "console_text", "csv_file_name", "csv_rows", "parse"]

CONFIG_KEY: Final = "topology.metrics.reporters"
CONSOLE: Final = "console"
CSV: Final = "csv"
# Storm's class names and the short ones
KINDS: Final = {
    "org.apache.storm.metrics2.reporters.ConsoleStormReporter": CONSOLE,
    "ConsoleStormReporter": CONSOLE,
    CONSOLE: CONSOLE,
    "org.apache.storm.metrics2.reporters.CsvStormReporter": CSV,
    "CsvStormReporter": CSV,
    CSV: CSV,
}
# Storm's report.period.units (java.util.concurrent.TimeUnit names) -> seconds
UNITS: Final = {"MILLISECONDS": 0.001, "SECONDS": 1.0, "MINUTES": 60.0, "HOURS": 3600.0, "DAYS": 86400.0}
DEFAULT_PERIOD_SECS: Final = 10.0  # Storm's reporters' default: 10 seconds
MIN_PERIOD_SECS: Final = 1.0
MAX_REPORTERS: Final = 8
DEFAULT_CSV_DIR: Final = "csvmetrics"  # Storm's default is <storm.local.dir>/csvmetrics
_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")

log = logging.getLogger("squall.metricreporters")
console_log = logging.getLogger("squall.metrics.console")


@dataclass(frozen=True)
class Reporter:
    """One entry of `topology.metrics.reporters`, checked."""

    kind: str  # CONSOLE or CSV
    period_secs: float
    csv_dir: str | None = None


def parse(value: object) -> tuple[list[Reporter], list[tuple[str, str]]]:
    """`topology.metrics.reporters` -> (the reporters, problems as (key path under the setting,
    message)); a setting with problems gives no reporters."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [("", ("expected a list of reporters, each a map with `class` (console or csv, "
                          "or Storm's ConsoleStormReporter / CsvStormReporter)"))]
    if len(value) > MAX_REPORTERS:
        return [], [("", f"at most {MAX_REPORTERS} reporters, got {len(value)}")]
    out: list[Reporter] = []
    problems: list[tuple[str, str]] = []
    for i, entry in enumerate(value):
        where = f"[{i}]"
        if not isinstance(entry, Mapping):
            problems.append((where, "expected a map with `class`"))
            continue
        cls = entry.get("class")
        kind = KINDS.get(cls) if isinstance(cls, str) else None
        if kind is None:
            problems.append((f"{where}.class", (f"unknown reporter {cls!r}: Squall has console and csv "
                                                 "(Storm's ConsoleStormReporter, CsvStormReporter)")))
            continue
        units = entry.get("report.period.units", "SECONDS")
        scale = UNITS.get(units.upper()) if isinstance(units, str) else None
        if scale is None:
            problems.append((f"{where}.report.period.units", f"unknown unit {units!r}: one of {', '.join(UNITS)}"))
            continue
        raw = entry.get("report.period", DEFAULT_PERIOD_SECS / scale)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw <= 0:
            problems.append((f"{where}.report.period", f"expected a positive number, got {raw!r}"))
            continue
        period = float(raw) * scale
        if period < MIN_PERIOD_SECS:
            problems.append((f"{where}.report.period",
                             f"a report at most every {MIN_PERIOD_SECS:g} s, got {period:g} s"))
            continue
        csv_dir = None
        if kind == CSV:
            d = entry.get("csv.log.dir", DEFAULT_CSV_DIR)
            if not isinstance(d, str) or not d.strip():
                problems.append((f"{where}.csv.log.dir", f"expected a directory, got {d!r}"))
                continue
            csv_dir = d
        out.append(Reporter(kind, period, csv_dir))
    return ([] if problems else out), problems


def _figures(row: Mapping[str, object]) -> list[tuple[str, object]]:
    kind = row["kind"]
    if kind in ("counter", "meter"):
        return [("count", row["value"])]
    if kind == "gauge":
        return [("value", row["value"])]
    return [("count", row["count"]), ("sum", row["sum"]), ("mean", row["value"])]


def console_text(rows: Sequence[Mapping[str, object]], topology: str, worker: str, now: float) -> str:
    """One console report: a heading and a line per metric (as Storm's ConsoleReporter, grouped
    by component and task)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    lines = [f"metrics of topology {topology} worker {worker} at {stamp}: {len(rows)} registered"]
    for r in rows:
        figures = " ".join(f"{k}={v}" for k, v in _figures(r))
        lines.append(f"  {r['component']} task {r['task']} {r['kind']} {r['name']}: {figures}")
    return "\n".join(lines)


def csv_file_name(topology: str, row: Mapping[str, object]) -> str:
    """The CSV file of one metric: topology, component, task and name, characters a file name
    should not hold replaced by '_'."""
    return _FILE_CHARS.sub("_", f"{topology}.{row['component']}.{row['task']}.{row['name']}") + ".csv"


def csv_rows(rows: Sequence[Mapping[str, object]], topology: str,
             now: float) -> dict[str, tuple[list[str], list[object]]]:
    """One CSV report: file name -> (its header's fields, the fields of the row this report
    appends)."""
    out: dict[str, tuple[list[str], list[object]]] = {}
    for r in rows:
        figures = _figures(r)
        out[csv_file_name(topology, r)] = (["t", *(k for k, _ in figures)], [int(now), *(v for _, v in figures)])
    return out


class Reporting:
    """The worker's reporters: a thread that, each reporter's period, takes `rows()` (the
    worker's registered metrics, squall.usermetrics.snapshot) and writes them. `stop()` ends
    it; `report_due(now)` is one step (tests call it with their own clock)."""

    def __init__(self, reporters: Sequence[Reporter], topology: str, worker: str,
                 tasks: Callable[[], Iterable[usermetrics.TaskMetrics]], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.reporters = list(reporters)
        self.topology = topology
        self.worker = worker
        self.tasks = tasks
        self.clock = clock
        start = clock()
        self.due = [start + r.period_secs for r in self.reporters]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="squall-metric-reporters", daemon=True)
        self.failing: set[int] = set()

    def start(self) -> Reporting:
        if self.reporters:
            self.thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def report_due(self, now: float) -> float:
        """Write the reports due at `now`; seconds until the next one is due."""
        rows: list[dict[str, object]] | None = None
        for i, r in enumerate(self.reporters):
            if now < self.due[i]:
                continue
            self.due[i] = max(self.due[i] + r.period_secs, now + r.period_secs / 2)
            if rows is None:
                rows = usermetrics.snapshot(self.tasks())
            try:
                if r.kind == CONSOLE:
                    console_log.info("%s", console_text(rows, self.topology, self.worker, now))
                else:
                    assert r.csv_dir is not None
                    self._write_csv(Path(r.csv_dir), rows, now)
                self.failing.discard(i)
            except OSError as exc:  # a full or read-only disk: said once, tried again next period
                if i not in self.failing:
                    self.failing.add(i)
                    log.error("metrics reporter %d (%s) cannot write: %s", i, r.kind, exc)
        return max(0.0, min(self.due, default=now + DEFAULT_PERIOD_SECS) - now)

    def _write_csv(self, where: Path, rows: Sequence[Mapping[str, object]], now: float) -> None:
        where.mkdir(parents=True, exist_ok=True)
        for name, (header, line) in csv_rows(rows, self.topology, now).items():
            path = where / name
            fresh = not path.exists()
            with open(path, "a", encoding="utf-8", newline="") as f:
                out = csv.writer(f, lineterminator="\n")
                if fresh:
                    out.writerow(header)
                out.writerow(line)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                wait = self.report_due(self.clock())
            except Exception:  # a report must never take the worker down
                log.exception("metrics reporters")
                wait = DEFAULT_PERIOD_SECS
            self.stopping.wait(min(max(wait, 0.05), 60.0))


def from_conf(conf: Mapping[str, Any], topology: str, worker: str,
              tasks: Callable[[], Iterable[usermetrics.TaskMetrics]]) -> Reporting:
    """The reporters a topology's config asks for (none when it asks for none or its setting is
    bad: `squall validate` and submission refuse a bad one, so this only logs it)."""
    reporters, problems = parse(conf.get(CONFIG_KEY))
    for key, message in problems:
        log.error("%s%s: %s; no metrics reporters", CONFIG_KEY, key, message)
    if reporters:
        log.info("metrics reporters: %s", ", ".join(
            f"{r.kind} every {r.period_secs:g}s" + (f" into {os.path.abspath(r.csv_dir)}" if r.csv_dir else "")
            for r in reporters))
    return Reporting(reporters, topology, worker, tasks)
