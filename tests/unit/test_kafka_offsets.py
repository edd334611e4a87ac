"""storm-kafka-client's offset bookkeeping with plain values: commits never pass an un-acked
offset, acks out of order keep their gaps, offsets never emitted do not block."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from squall.kafka.offsets import CommitWatch, HoldWatch, OffsetManager

pytestmark = pytest.mark.unit


def manager(committed: int, emitted: list[int]) -> OffsetManager:
    m = OffsetManager(committed)
    for o in emitted:
        m.add_emitted(o)
    return m


def test_nothing_acked_commits_nothing() -> None:
    m = manager(0, [0, 1, 2])
    assert m.next_commit_offset() is None
    assert m.num_uncommitted == 3


def test_acks_in_order_commit_past_the_last() -> None:
    m = manager(0, [0, 1, 2])
    m.add_acked(0)
    m.add_acked(1)
    assert m.next_commit_offset() == 2  # Kafka's meaning: the next offset to read


def test_an_out_of_order_ack_waits_for_the_gap() -> None:
    m = manager(5, [5, 6, 7, 8])
    m.add_acked(7)
    m.add_acked(8)
    assert m.next_commit_offset() is None  # 5 and 6 are still in flight
    m.add_acked(6)
    assert m.next_commit_offset() is None
    m.add_acked(5)
    assert m.next_commit_offset() == 9


def test_commit_forgets_below_and_counts_what_is_left() -> None:
    m = manager(0, [0, 1, 2, 3])
    m.add_acked(0)
    m.add_acked(1)
    m.add_acked(3)
    assert m.next_commit_offset() == 2
    m.commit(2)
    assert m.committed == 2
    assert m.num_uncommitted == 2  # 2 (in flight) and 3 (acked, behind 2)
    assert m.next_commit_offset() is None
    m.add_acked(2)
    assert m.next_commit_offset() == 4


def test_offsets_never_emitted_do_not_block() -> None:
    # 1, 2 and 4 are gone (compaction, transaction markers): 3 and 5 acked commit past 5
    m = manager(0, [0, 3, 5])
    m.add_acked(5)
    assert m.next_commit_offset() is None  # 0 and 3 are in flight
    m.add_acked(0)
    assert m.next_commit_offset() == 1
    m.add_acked(3)
    assert m.next_commit_offset() == 6


def test_a_gap_before_an_unacked_emitted_offset_stops_there() -> None:
    m = manager(0, [2, 4])
    m.add_acked(4)
    assert m.next_commit_offset() is None  # 2 is emitted, not acked


def test_a_log_start_past_the_committed_point() -> None:
    m = manager(0, [100, 101])  # retention deleted 0..99
    m.add_acked(100)
    assert m.next_commit_offset() == 101


def test_duplicate_and_stale_acks_change_nothing() -> None:
    m = manager(0, [0, 1])
    m.add_acked(0)
    m.add_acked(0)
    m.commit(1)
    m.add_acked(0)  # after its commit
    assert m.next_commit_offset() is None
    m.add_acked(1)
    assert m.next_commit_offset() == 2


def test_re_emitting_a_retried_offset_counts_it_once() -> None:
    m = manager(0, [0, 1])
    m.add_emitted(0)
    assert m.num_uncommitted == 2
    assert m.latest_emitted == 1


def test_an_emitted_offset_below_the_commit_is_ignored() -> None:
    m = manager(10, [3])
    assert m.num_uncommitted == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=40, unique=True), st.randoms(use_true_random=False),
       st.integers(0, 40))
def test_never_commits_past_an_unacked_offset(emitted: list[int], rnd: random.Random, n_acked: int) -> None:
    """Whatever is emitted (with gaps) and acked (any order, any subset), commits never pass the
    first emitted offset not acked, and reach just past the last acked offset below it."""
    emitted.sort()
    m = manager(0, emitted)
    order = emitted[:]
    rnd.shuffle(order)
    acked = set(order[:n_acked])
    commits = []
    for o in order[:n_acked]:
        m.add_acked(o)
        nxt = m.next_commit_offset()
        if nxt is not None and rnd.random() < 0.3:
            m.commit(nxt)
            commits.append(nxt)
    unacked = [o for o in emitted if o not in acked]
    first_unacked = min(unacked) if unacked else max(emitted) + 1
    done_below = [o for o in acked if o < first_unacked]
    expected = max(done_below) + 1 if done_below else 0
    assert all(c <= first_unacked for c in commits)
    assert (m.next_commit_offset() or m.committed) == expected


def reference_ready(committed: int, emitted: set[int], acked: set[int]) -> int:
    """The commit point by its definition: just past the last acked offset below the first emitted
    offset not acked (offsets never emitted in between do not count), else the committed point."""
    unacked = [o for o in emitted if o >= committed and o not in acked]
    first_unacked = min(unacked) if unacked else None
    done = [o for o in acked if o >= committed and (first_unacked is None or o < first_unacked)]
    return max(done) + 1 if done else committed


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("eeeaaacx"), st.integers(0, 5)), max_size=120))
def test_matches_its_definition_through_emits_acks_and_commits(ops: list[tuple[str, int]]) -> None:
    """Emits in order with gaps, acks (in order, out of order, twice), re-emits of retried
    offsets, commits of the commit point and commits from elsewhere past it: the manager's commit
    point is always the definition's, and it counts exactly the emitted offsets not committed."""
    m = OffsetManager(3)
    committed, emitted, acked = 3, set(), set()
    nxt = 3
    for op, n in ops:
        if op == "e":
            nxt += n  # a gap of n offsets never emitted (compaction, markers)
            m.add_emitted(nxt)
            emitted.add(nxt)
            nxt += 1
        elif op == "a" and emitted:
            o = sorted(emitted)[n % len(emitted)]
            m.add_acked(o)
            acked.add(o)
        elif op == "x" and emitted:
            o = sorted(emitted)[n % len(emitted)]
            m.add_emitted(o)  # a retry emitted again: counted once
        elif op == "c":
            point = m.next_commit_offset()
            if point is not None:
                m.commit(point)
                committed = point
        if op == "c" and n == 5:
            # a commit from elsewhere (another reader, a state's start) past the commit point
            committed = max(committed, nxt - n)
            m.commit(committed)
        emitted = {o for o in emitted if o >= committed}
        acked = {o for o in acked if o >= committed}
        expected = reference_ready(committed, emitted, acked)
        assert (m.next_commit_offset() or m.committed) == max(expected, m.committed)
        assert m.num_uncommitted == len(emitted)
        assert all(m.is_emitted(o) for o in emitted)


def test_commit_watch_says_how_long_commits_went_unconfirmed_once_past_its_bound() -> None:
    watch = CommitWatch(30.0)
    assert watch.stalled(1000.0) is None  # nothing sent
    watch.sent(100.0)
    watch.sent(105.0)  # a later commit does not restart the count: the first is still waiting
    assert watch.stalled(129.9) is None
    assert watch.stalled(131.0) == 31.0
    watch.confirmed()
    assert watch.stalled(200.0) is None
    watch.sent(200.0)
    assert watch.stalled(230.0) == 30.0


def test_first_unacked_is_the_offset_that_holds_the_commit_point() -> None:
    m = manager(10, [10, 11, 13, 14])
    assert m.first_unacked() == 10
    m.add_acked(11)  # out of order: 10 still holds it
    assert m.first_unacked() == 10
    m.add_acked(10)
    assert m.first_unacked() == 13 and m.next_commit_offset() == 12
    m.add_acked(14)
    m.add_acked(13)
    assert m.first_unacked() is None and m.next_commit_offset() == 15
    m.commit(15)
    assert m.first_unacked() is None


def test_hold_watch_reports_one_offset_holding_a_partition_past_its_limit() -> None:
    watch = HoldWatch(30.0)
    assert watch.update("t/0", 5, 100.0) is None  # first seen
    assert watch.update("t/0", 5, 129.0) is None  # not yet 30 s
    assert watch.update("t/0", 5, 131.0) == pytest.approx(31.0)
    assert watch.update("t/0", 6, 140.0) is None  # moved on: counts from now
    assert watch.update("t/0", 6, 165.0) is None
    assert watch.update("t/0", 6, 171.0) == pytest.approx(31.0)
    assert watch.update("t/0", None, 172.0) is None  # nothing un-acked: forgotten
    assert watch.update("t/0", 6, 180.0) is None  # so the count starts again
    assert watch.update("t/1", 6, 0.0) is None  # partitions are counted apart
    watch.retain({"t/0"})  # t/1 revoked: forgotten
    assert watch.update("t/1", 6, 100.0) is None
    assert watch.update("t/0", 6, 211.0) == pytest.approx(31.0)
