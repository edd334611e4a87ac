"""bench/chaos.py's figures on plain values: the recovery time after a fault (ack rate back above
90% of the steady rate for SUSTAIN seconds), and the records the components write."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from loadfile import load_file

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_chaos() -> ModuleType:
    return load_file(BENCH / "chaos.py", "bench_chaos")


chaos = load_chaos()


# a window that starts up to (1 - 90%) of its length before the rate is back already holds 90%:
# that, plus the 0.1 s step, is the resolution of the figure
RESOLUTION = 0.25


def steady(start: float, end: float, rate: float) -> list[float]:
    """Event times at `rate` per second in [start, end)."""
    n = int(round((end - start) * rate))
    return [start + i / rate for i in range(n)]


def test_no_dip_is_zero_recovery() -> None:
    times = steady(0, 30, 100)
    assert chaos.steady_rate(times, 10.0) == pytest.approx(100)
    assert chaos.recovery_time(times, 10.0, 100, 30) == 0.0


def test_recovery_is_the_start_of_the_first_sustained_good_run() -> None:
    # 100/s, nothing from 10 s to 12.5 s, then 100/s again
    times = steady(0, 10, 100) + steady(12.5, 30, 100)
    got = chaos.recovery_time(times, 10.0, 100, 30)
    assert got == pytest.approx(2.5, abs=RESOLUTION) and got <= 2.5


def test_half_rate_is_not_recovered() -> None:
    # one of two spout tasks gone until 14 s: 50/s is below 90%
    times = sorted(steady(0, 30, 50) + steady(0, 10, 50) + steady(14, 30, 50))
    assert chaos.recovery_time(times, 10.0, 100, 30) == pytest.approx(4.0, abs=RESOLUTION)


def test_a_short_good_burst_inside_the_dip_does_not_count() -> None:
    times = sorted(steady(0, 10, 100) + steady(11, 12, 200) + steady(15, 30, 100))
    assert chaos.recovery_time(times, 10.0, 100, 30) == pytest.approx(5.0, abs=RESOLUTION)


def test_not_recovered_before_the_next_fault_is_none() -> None:
    times = steady(0, 10, 100) + steady(18, 30, 100)
    assert chaos.recovery_time(times, 10.0, 100, 20.0) is None


def test_records_skip_a_line_cut_short_by_a_kill(tmp_path: Path) -> None:
    (tmp_path / "acks-3.log").write_text("0 1.5\n2 1.0\n4")
    (tmp_path / "acks-4.log").write_text("1 1.2\n")
    (tmp_path / "sink-7.log").write_text("0\n1\n2\n2\n")
    times, acked, deliveries = chaos.read_records(tmp_path)
    assert times == [1.0, 1.2, 1.5]
    assert acked == {0, 1, 2}
    assert sorted(deliveries) == [0, 1, 2, 2]


def test_percentile_50() -> None:
    assert chaos.percentile_50([]) is None
    assert chaos.percentile_50([3.0, 1.0, 2.0]) == 2.0
