"""The worker's collector policy (squall.worker.gcpolicy): the young generation sized to what the
windows hold, with the collector's setter injected (the process's collector is not touched)."""

from __future__ import annotations

from squall.worker.gcpolicy import MIDDLE, OLD, PER_HELD, YOUNG, GcPolicy, young_threshold


def _policy() -> tuple[GcPolicy, list[tuple[int, int, int]]]:
    calls: list[tuple[int, int, int]] = []
    return GcPolicy(lambda a, b, c: calls.append((a, b, c))), calls


def test_without_windows_the_base_thresholds() -> None:
    assert young_threshold(0) == YOUNG
    assert young_threshold(YOUNG // PER_HELD) == YOUNG
    p, calls = _policy()
    p.install()
    assert calls == [(YOUNG, MIDDLE, OLD)]


def test_raised_at_once_to_what_the_windows_hold() -> None:
    p, calls = _policy()
    p.windows_hold("a", 300_000)
    assert calls == [(PER_HELD * 300_000, MIDDLE, OLD)]
    # a second executor's windows add up
    p.windows_hold("b", 100_000)
    assert calls[-1] == (PER_HELD * 400_000, MIDDLE, OLD)
    assert p.young == PER_HELD * 400_000


def test_follows_the_peak_while_the_windows_run() -> None:
    p, calls = _policy()
    p.windows_hold("a", 1_000_000)
    p.windows_hold("a", 300_000)  # a slower second: what the windows take in may come back
    assert calls == [(PER_HELD * 1_000_000, MIDDLE, OLD)]
    p.windows_hold("a", 1_200_000)
    assert calls[-1] == (PER_HELD * 1_200_000, MIDDLE, OLD)


def test_an_executor_that_stops_leaves_the_sum() -> None:
    p, calls = _policy()
    p.windows_hold("a", 1_000_000)
    p.windows_hold("b", 10)
    p.windows_hold("a", 0)
    assert calls[-1] == (YOUNG, MIDDLE, OLD)
    assert p.young == YOUNG
