"""The compiled window input (`executor.WindowFeed`) in the executor's per-batch mode: a batch's
tuples share one arrival time, read from the (injected) clock at its first tuple, and the next
batch reads the clock again after `end_batch`, as `BoltExecutor.process` and `_fire_timers`
call it. Checked against the real XOR acker ledger with the harness of test_window_acking.py.
"""

from __future__ import annotations

import random

import pytest

from squall.worker.bolt import WindowFeed
from test_window_acking import Run, random_run

pytestmark = pytest.mark.unit


def batched(seed: int = 0, length: str = "2s", sliding: str = "1s") -> Run:
    r = Run(length, sliding, seed=seed, feed=True)
    r.feed = WindowFeed(r.w, per_batch=True)  # as BoltExecutor.run makes it
    return r


def test_a_batch_shares_one_time_read_at_its_first_tuple() -> None:
    r = batched()
    feed = r.feed
    assert feed is not None
    r.clock.now = 100.0
    r.sentence(3)
    r.clock.now = 100.2  # the clock moves within the batch: its tuples keep the first reading
    r.sentence(2)
    stamps = r.w.manager.ts
    assert stamps == [100.0] * 5
    assert all(s is stamps[0] for s in stamps), "one float object for the batch"
    feed.end_batch()
    r.clock.now = 100.4
    r.sentence(1)
    feed.end_batch()
    r.clock.now = 100.3  # the clock stepped back between batches: arrival order is kept
    r.sentence(1)
    assert stamps == [100.0] * 5 + [100.4, 100.4]
    # the window's arrays carry the same times, one per anchor
    rooted = r.w.rooted
    assert rooted is not None and rooted.rts is not None
    assert list(rooted.rts) == stamps


def test_without_per_batch_every_tuple_reads_the_clock() -> None:
    r = Run("2s", "1s", feed=True)
    assert r.feed is not None and not r.feed.per_batch
    for now in (100.0, 100.1):
        r.clock.now = now
        r.sentence(2)
    assert r.w.manager.ts == [100.0, 100.0, 100.1, 100.1]
    assert r.feed.now is None


@pytest.mark.parametrize("seed", range(4))
def test_batched_trees_complete_exactly_and_not_before_they_left(seed: int) -> None:
    """Random batches of sentences (the clock moving within a batch), timers between batches as
    the executor's loop runs them (`end_batch` first): every tree completes exactly once, none
    before its batch's time + 1 s (a 1 s window sliding 500 ms), and none while an output
    anchored to it waits."""
    r = batched(seed, "1s", "500ms")
    assert r.feed is not None
    random_run(r, random.Random(seed), batches=True)
