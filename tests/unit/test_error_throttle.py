"""Errors of user code at a bounded rate (squall.worker.errorlog): Storm's
topology.max.error.report.per.interval per topology.error.throttle.interval.secs, for the log
and for what is reported; one summary line per interval; the spout's back-off. Plain values
and an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from squall.worker.errorlog import (
    BACKOFF_FIRST_SECS,
    BACKOFF_MAX_SECS,
    INTERVAL_CONFIG,
    INTERVAL_SECS,
    PER_INTERVAL,
    PER_INTERVAL_CONFIG,
    ErrorThrottle,
    brief,
    error_backoff,
    throttle_settings,
)


def test_the_first_of_each_interval_are_admitted_the_rest_counted() -> None:
    t = ErrorThrottle(10.0, 3)
    got = [t.admit("spout", ValueError(f"boom {i}"), 100.0 + i * 0.01) for i in range(1000)]
    assert got == [True] * 3 + [False] * 997
    assert t.suppressed_total == 997
    assert t.summaries(105.0) == []  # the interval is not over
    [line] = t.summaries(110.0)
    assert line.startswith("spout: 997 more errors in the last 10s not logged (the first 3 of every 10s are")
    assert INTERVAL_CONFIG in line and PER_INTERVAL_CONFIG in line
    assert line.endswith("the last: ValueError: boom 999")
    assert t.summaries(111.0) == []  # said once
    # a new interval admits again
    assert t.admit("spout", ValueError("again"), 111.0)


def test_components_are_counted_apart() -> None:
    t = ErrorThrottle(10.0, 1)
    assert t.admit("a", ValueError(), 0.0)
    assert t.admit("b", ValueError(), 0.0)
    assert not t.admit("a", ValueError(), 1.0)
    lines = t.summaries(10.0)
    assert len(lines) == 1 and lines[0].startswith("a: 1 more error in the last 10s")


def test_an_interval_that_ends_on_the_next_error_still_gets_its_line() -> None:
    t = ErrorThrottle(10.0, 1)
    t.admit("a", KeyError("k"), 0.0)
    t.admit("a", KeyError("k"), 1.0)
    assert t.admit("a", KeyError("k"), 12.0)  # a new interval, before any summary was asked
    [line] = t.summaries(12.5)
    assert line.startswith("a: 1 more error in the last 12s")


def test_zero_per_interval_admits_none() -> None:
    t = ErrorThrottle(1.0, 0)
    assert not t.admit("a", ValueError(), 0.0)


def test_an_interval_without_left_out_errors_says_nothing() -> None:
    t = ErrorThrottle(10.0, 5)
    for i in range(5):
        assert t.admit("a", ValueError(), float(i))
    assert t.summaries(20.0) == []


def test_brief_is_one_short_line() -> None:
    assert brief(ValueError("a\nb")) == "ValueError: a b"
    assert brief(RuntimeError()) == "RuntimeError"
    assert len(brief(ValueError("x" * 10_000))) == 200


def test_backoff_doubles_up_to_a_second() -> None:
    assert error_backoff(0) == 0.0
    assert error_backoff(1) == BACKOFF_FIRST_SECS
    assert error_backoff(2) == 2 * BACKOFF_FIRST_SECS
    assert error_backoff(11) == BACKOFF_MAX_SECS == 1.0
    assert error_backoff(10**9) == BACKOFF_MAX_SECS
    # a spout that always raises is called about this many times in its first minute
    calls, t = 0, 0.0
    while t < 60:
        calls += 1
        t += error_backoff(calls)
    assert calls < 80


def test_settings_from_the_config() -> None:
    assert throttle_settings({}) == (INTERVAL_SECS, PER_INTERVAL, [])
    assert throttle_settings({INTERVAL_CONFIG: 2, PER_INTERVAL_CONFIG: 0}) == (2.0, 0, [])


@pytest.mark.parametrize("conf", [{INTERVAL_CONFIG: "10s"}, {INTERVAL_CONFIG: 0}, {INTERVAL_CONFIG: float("inf")},
                                  {PER_INTERVAL_CONFIG: -1}, {PER_INTERVAL_CONFIG: 2.5}, {PER_INTERVAL_CONFIG: True}])
def test_a_wrong_setting_is_named_and_its_default_used(conf: dict[str, Any]) -> None:
    interval, per, problems = throttle_settings(conf)
    assert (interval, per) == (INTERVAL_SECS, PER_INTERVAL)
    [problem] = problems
    [key] = conf
    assert problem.startswith(f"spec.config.{key}=")
