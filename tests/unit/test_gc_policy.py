"""The worker's collector policy (squall.gcpolicy): the young generation sized to what the
windows hold, with the collector's setter injected (the process's collector is not touched)."""

from __future__ import annotations

from squall.gcpolicy import MIDDLE, OLD, PER_HELD, YOUNG, YOUNG_EVERY_SECS, GcPolicy, young_threshold


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


class _Collector:
    """A fake collector: its young count, and the collections asked of it."""

    def __init__(self) -> None:
        self.young = 0
        self.collected: list[int] = []

    def count(self) -> tuple[int, int, int]:
        return (self.young, 0, 0)

    def collect(self, generation: int) -> int:
        self.collected.append(generation)
        self.young = 0
        return 0


def _timed() -> tuple[GcPolicy, _Collector, list[float]]:
    now = [100.0]
    c = _Collector()
    p = GcPolicy(lambda a, b, c: None, c.collect, lambda: now[0], c.count)
    return p, c, now


def test_a_young_collection_at_least_every_few_seconds() -> None:
    # a worker that allocates little (idle, or dropping garbage frames) never reaches the young
    # threshold: its cyclic garbage would stay for good
    p, c, now = _timed()
    c.young = 50
    p.tick()
    assert c.collected == []
    now[0] += YOUNG_EVERY_SECS - 0.1
    p.tick()
    assert c.collected == []
    now[0] += 0.1
    p.tick()
    assert c.collected == [0]
    assert p.timed_collections == 1
    now[0] += YOUNG_EVERY_SECS / 2
    c.young = 10
    p.tick()
    assert c.collected == [0]  # the interval starts again from the last collection


def test_no_timed_collection_when_nothing_was_allocated() -> None:
    p, c, now = _timed()
    now[0] += 3 * YOUNG_EVERY_SECS
    p.tick()
    assert c.collected == []


def test_the_collectors_own_collections_count() -> None:
    # a busy worker's collector runs by itself (its young count is lower than at the last
    # look): no extra collection
    p, c, now = _timed()
    for young in [90_000, 30_000, 95_000, 20_000, 70_000, 5_000, 99_000, 40_000]:
        now[0] += YOUNG_EVERY_SECS * 0.6
        c.young = young
        p.tick()
    assert c.collected == []
