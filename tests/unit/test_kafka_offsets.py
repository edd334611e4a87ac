"""storm-kafka-client's offset bookkeeping with plain values: commits never pass an un-acked
offset, acks out of order keep their gaps, offsets never emitted do not block."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from squall.kafka.offsets import OffsetManager

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
