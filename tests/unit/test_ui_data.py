"""The UI's pure figures: Storm UI's uptime text and a window's figures from two samples."""

from __future__ import annotations

import pytest

from squall_operator.ui.data import _figures, executor_of, pretty_secs

pytestmark = pytest.mark.unit


def test_pretty_secs_like_storm_ui() -> None:
    assert pretty_secs(0) == "0s"
    assert pretty_secs(59.9) == "59s"
    assert pretty_secs(61) == "1m 1s"
    assert pretty_secs(3600) == "1h 0m 0s"
    assert pretty_secs(86400 + 3 * 3600 + 4 * 60 + 5) == "1d 3h 4m 5s"
    assert pretty_secs(-5) == "0s"


def test_window_figures_are_differences() -> None:
    then = {"s": {"emitted": 100.0, "transferred": 90.0, "executed": 0.0, "acked": 80.0, "failed": 1.0,
                  "lat_sum": 800.0, "lat_n": 80.0}}
    now = {"s": {"emitted": 250.0, "transferred": 240.0, "executed": 0.0, "acked": 230.0, "failed": 3.0,
                 "lat_sum": 800.0 + 150 * 4.0, "lat_n": 230.0}}
    f = _figures(now, then, "s")
    assert f == {"emitted": 150, "transferred": 150, "executed": 0, "acked": 150, "failed": 2, "latencyMs": 4.0}
    assert _figures(now, None, "s")["emitted"] == 250  # all time
    assert _figures(now, then, "missing") == {"emitted": 0, "transferred": 0, "executed": 0, "acked": 0,
                                              "failed": 0, "latencyMs": 0.0}


def test_executor_of_a_task_is_storms_executor_name() -> None:
    keys = ["1-1", "2-3", "4-7"]
    assert executor_of(1, keys) == "[1-1]"
    assert executor_of(3, keys) == "[2-3]"
    assert executor_of(5, keys) == "[4-7]"
    assert executor_of(8, keys) is None
    assert executor_of(1, []) is None
