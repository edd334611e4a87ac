"""squall.worker.transport.PeerQueues: one bounded queue per peer, never blocking the caller."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import zmq

from squall.models.cluster import WorkerSlot
from squall.worker.transport import PeerQueues, run_transfer

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


def test_offer_wakes_the_transfer_thread_only_while_it_sleeps() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.offer(A, [[1]])  # the transfer thread is busy (not sleeping): no ring
    assert peers.bell.empty()
    peers.sleeping = True
    peers.offer(A, [[2]])
    assert not peers.bell.empty() and not peers.sleeping  # rung once, and marked awake
    peers.offer(A, [[3]])
    assert peers.bell.qsize() == 1


def test_sleep_returns_at_once_for_an_offer_made_while_looking() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    seen = peers.offers
    peers.offer(A, [[1]])  # after the transfer thread read the count, before it sleeps
    t0 = time.monotonic()
    peers.sleep(seen, 5.0)
    assert time.monotonic() - t0 < 1.0 and not peers.sleeping


def test_sleep_times_out_without_offers_and_an_offer_from_another_thread_ends_it() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    t0 = time.monotonic()
    peers.sleep(peers.offers, 0.05)
    assert 0.04 <= time.monotonic() - t0 < 1.0 and not peers.sleeping

    def offer_soon() -> None:
        while not peers.sleeping:
            time.sleep(0.001)
        peers.offer(B, [[1]])

    t = threading.Thread(target=offer_soon)
    t.start()
    t0 = time.monotonic()
    peers.sleep(peers.offers, 10.0)
    assert time.monotonic() - t0 < 5.0
    t.join()
    assert peers.bell.empty() and list(peers.queues[B]) == [[[1]]]


def test_ring_wakes_a_sleeping_transfer_thread() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    t = threading.Timer(0.05, peers.ring)
    t.start()
    t0 = time.monotonic()
    peers.sleep(peers.offers, 10.0)
    assert time.monotonic() - t0 < 5.0
    t.join()


def test_many_producers_never_leave_the_transfer_thread_asleep_on_an_offer() -> None:
    """The sleep/offer handshake under contention: every offer is taken within its sleep's timeout
    budget, never stuck behind a missed ring (the sleep here would take 10 s)."""
    peers = PeerQueues(bound=1 << 20, hard_limit=1 << 21)
    n, producers = 2000, 3
    stop = threading.Event()
    taken = 0

    def transfer() -> None:
        nonlocal taken
        while not stop.is_set():
            seen = peers.offers
            q = peers.queues.get(A)
            while q:
                q.popleft()
                taken += 1
            if taken == n * producers:
                return
            peers.sleep(seen, 10.0)

    def produce() -> None:
        for i in range(n):
            peers.offer(A, [[i]])
            if i % 50 == 0:
                time.sleep(0.0005)

    t = threading.Thread(target=transfer)
    t.start()
    ps = [threading.Thread(target=produce) for _ in range(producers)]
    t0 = time.monotonic()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    t.join(8.0)
    stop.set()
    peers.ring()
    assert taken == n * producers and time.monotonic() - t0 < 8.0


def test_drop_forgets_a_peer_and_counts_its_items() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.offer(A, [[1], [2]])
    peers.offer(A, [[3]])
    assert peers.drop(A) == 3
    assert A not in peers.queues
    assert peers.drop(A) == 0


def test_the_transfer_loop_drops_and_counts_what_it_held_for_a_peer_that_left(caplog: pytest.LogCaptureFixture) -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.offer(A, [[1], [2]])  # A never registered an address and is no longer assigned
    peers.offer(B, [[3]])  # B is assigned but not registered yet: held
    lost: list[int] = []
    stop = threading.Event()
    ctx: zmq.Context[Any] = zmq.Context()
    t = threading.Thread(
        target=run_transfer,
        args=(ctx, peers, lambda s: None, lambda s: s == B, lambda items: b"x", stop, lost.append),
        daemon=True,
    )
    with caplog.at_level(logging.WARNING, logger="squall.transport"):
        try:
            t.start()
            deadline = time.monotonic() + 5.0
            while not lost and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            peers.ring()
            t.join(5.0)
            ctx.term()
    assert not t.is_alive()
    assert lost == [2] and A not in peers.queues
    assert list(peers.queues[B]) == [[[3]]]  # still held for a peer that may yet register
    assert "dropped 2 tuples" in caplog.text and "left the assignment" in caplog.text
