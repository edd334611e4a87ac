"""squall.worker.transport.PeerQueues: one bounded queue per peer, never blocking the caller."""

from __future__ import annotations

import pytest

from squall.models.cluster import WorkerSlot
from squall.worker.transport import PeerQueues

pytestmark = pytest.mark.unit

A = WorkerSlot("n1", 6700)
B = WorkerSlot("n2", 6700)


def test_a_full_peer_refuses_without_blocking_and_others_still_take() -> None:
    peers = PeerQueues(bound=2, hard_limit=5)
    assert peers.offer(A, [[1]]) and peers.offer(A, [[2]])
    assert not peers.offer(A, [[3]])  # full: the caller decides to wait or to hold
    assert peers.offer(B, [[4]])  # another peer is not affected
    assert [list(q) for q in (peers.queues[A], peers.queues[B])] == [[[[1]], [[2]]], [[[4]]]]


def test_force_goes_past_the_bound_up_to_the_hard_limit_signal() -> None:
    peers = PeerQueues(bound=1, hard_limit=3)
    for i in range(3):
        assert peers.offer(A, [[i]], force=True)
    assert peers.over_hard_limit()
    assert peers.queued() == 3


def test_offer_wakes_the_transfer_thread() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.wake.clear()
    peers.offer(A, [[1]])
    assert peers.wake.is_set()


def test_drop_forgets_a_peer_and_counts_its_items() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.offer(A, [[1], [2]])
    peers.offer(A, [[3]])
    assert peers.drop(A) == 3
    assert A not in peers.queues
    assert peers.drop(A) == 0
