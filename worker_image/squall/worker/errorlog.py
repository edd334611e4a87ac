"""Errors raised by user code, logged and reported without flooding.

A spout whose `next_tuple` raises on every call (or a bolt whose `execute` raises on every
tuple) would otherwise write a traceback per call: 494 KB of log a second, and a fifth of a core
spent formatting them. Storm's executor reports a component's errors to ZooKeeper at most
`topology.max.error.report.per.interval` times (5) per `topology.error.throttle.interval.secs`
(10 s) and drops the rest; Squall keeps those names and that rule for what it reports (the
errors `squall list`, `squall errors`-style readers and the UI show) and applies it to the log as
well: the first N errors of a component in each interval are logged with their tracebacks and
reported, the others are only counted, and one line per interval says how many there were and
what the last one was (`ErrorThrottle`).

A spout that keeps raising is also called less often (`error_backoff`): after consecutive
errors its executor waits before calling it again, doubling the wait up to a second, so that a
broken spout does not spin a core (Storm's spout wait strategy waits when a spout emits nothing;
this waits when it only raises). One call that returns normally ends the streak.

Pure: the clock is passed in; the executors call `admit` from their threads, the worker's main
loop calls `summaries` (one lock, taken only when an error happens or once per heartbeat).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INTERVAL_CONFIG = "topology.error.throttle.interval.secs"
PER_INTERVAL_CONFIG = "topology.max.error.report.per.interval"
INTERVAL_SECS = 10.0  # Storm's defaults
PER_INTERVAL = 5

BACKOFF_FIRST_SECS = 0.001
BACKOFF_MAX_SECS = 1.0
_BRIEF_CHARS = 200


def error_backoff(streak: int) -> float:
    """How long a spout task waits before its next call after `streak` consecutive errors (0:
    none)."""
    if streak <= 0:
        return 0.0
    return min(BACKOFF_MAX_SECS, BACKOFF_FIRST_SECS * 2.0 ** min(streak - 1, 30))


def throttle_settings(conf: Mapping[str, Any]) -> tuple[float, int, list[str]]:
    """(interval seconds, errors per interval) from a topology's config, Storm's defaults for
    what is unset, and one line for each value that cannot be used (its default is used then)."""
    problems: list[str] = []
    interval, per = INTERVAL_SECS, PER_INTERVAL
    raw = conf.get(INTERVAL_CONFIG)
    if raw is not None:
        if type(raw) in (int, float) and 0 < raw < float("inf"):
            interval = float(raw)
        else:
            problems.append(f"spec.config.{INTERVAL_CONFIG}={raw!r}: expected a positive number of seconds;"
                            f" using {INTERVAL_SECS:g}")
    raw = conf.get(PER_INTERVAL_CONFIG)
    if raw is not None:
        if type(raw) is int and raw >= 0:
            per = raw
        else:
            problems.append(f"spec.config.{PER_INTERVAL_CONFIG}={raw!r}: expected a whole number (0 or more);"
                            f" using {PER_INTERVAL}")
    return interval, per, problems


@dataclass
class _Window:
    start: float
    admitted: int = 0
    suppressed: int = 0
    last: str = ""


def brief(exc: BaseException) -> str:
    """An exception in one short line: its type and the start of its message."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = text.replace("\n", " ")
    return text if len(text) <= _BRIEF_CHARS else text[: _BRIEF_CHARS - 3] + "..."


class ErrorThrottle:
    """Per component: the first `per_interval` errors of each interval of `interval` seconds
    are admitted (logged in full and reported), the rest counted for one summary line."""

    def __init__(self, interval: float = INTERVAL_SECS, per_interval: int = PER_INTERVAL) -> None:
        self.interval = interval
        self.per_interval = per_interval
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}
        self._ended: list[tuple[str, int, float, str]] = []
        self.suppressed_total = 0

    def admit(self, component: str, exc: BaseException, now: float) -> bool:
        """Whether this error of `component` is logged with its traceback and reported."""
        with self._lock:
            w = self._windows.get(component)
            if w is None or now - w.start >= self.interval:
                if w is not None and w.suppressed:
                    self._ended.append((component, w.suppressed, now - w.start, w.last))
                w = self._windows[component] = _Window(now)
            if w.admitted < self.per_interval:
                w.admitted += 1
                return True
            w.suppressed += 1
            self.suppressed_total += 1
            w.last = brief(exc)
            return False

    def summaries(self, now: float) -> list[str]:
        """One line for each interval that ended with errors left out, and ends those due."""
        with self._lock:
            for component, w in list(self._windows.items()):
                if now - w.start >= self.interval:
                    if w.suppressed:
                        self._ended.append((component, w.suppressed, now - w.start, w.last))
                    del self._windows[component]
            ended, self._ended = self._ended, []
        return [
            f"{component}: {n} more error{'s' if n != 1 else ''} in the last {secs:.0f}s not logged (the first"
            f" {self.per_interval} of every {self.interval:g}s are, and reported; {INTERVAL_CONFIG},"
            f" {PER_INTERVAL_CONFIG}); the last: {last}"
            for component, n, secs, last in ended
        ]


__all__ = [
    "BACKOFF_FIRST_SECS", "BACKOFF_MAX_SECS", "INTERVAL_CONFIG", "INTERVAL_SECS", "PER_INTERVAL",
    "PER_INTERVAL_CONFIG", "ErrorThrottle", "brief", "error_backoff", "throttle_settings",
]
