"""squall.worker.transport.PeerQueues (one bounded queue per peer, never blocking the caller) and
the Transfer that the engine loop steps to drain them."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import zmq

from squall.models.cluster import WorkerSlot
from squall.worker.transport import FRAME_BATCHES, FRAMES_PER_TURN, PeerQueues, Transfer

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


def test_an_offer_wakes_the_loop_only_while_it_sleeps() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    rings: list[int] = []
    peers.wake = lambda: rings.append(1)
    peers.offer(A, [[1]])  # the loop is awake (busy): no wake
    assert rings == []
    assert peers.may_sleep(peers.offers) and peers.sleeping
    peers.offer(A, [[2]])
    assert rings == [1] and not peers.sleeping  # woken once, and marked awake
    peers.offer(A, [[3]])
    assert rings == [1]


def test_the_loop_may_not_sleep_past_an_offer_made_while_it_looked() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    seen = peers.offers
    peers.offer(A, [[1]])  # after the loop read the count, before it sleeps
    assert not peers.may_sleep(seen) and not peers.sleeping
    assert peers.may_sleep(peers.offers)
    peers.awake()
    assert not peers.sleeping


def test_many_producers_never_leave_the_loop_asleep_on_an_offer() -> None:
    """The sleep/offer handshake under contention: every offer is taken within its sleep's timeout
    budget, never stuck behind a missed wake (the sleep here would take 10 s)."""
    peers = PeerQueues(bound=1 << 20, hard_limit=1 << 21)
    woken = threading.Event()
    peers.wake = woken.set
    n, producers = 2000, 3
    stop = threading.Event()
    taken = 0

    def loop() -> None:
        nonlocal taken
        while not stop.is_set():
            seen = peers.offers
            q = peers.queues.get(A)
            while q:
                q.popleft()
                taken += 1
            if taken == n * producers:
                return
            if peers.may_sleep(seen):
                woken.wait(10.0)
            woken.clear()
            peers.awake()

    def produce() -> None:
        for i in range(n):
            peers.offer(A, [[i]])
            if i % 50 == 0:
                time.sleep(0.0005)

    t = threading.Thread(target=loop)
    t.start()
    ps = [threading.Thread(target=produce) for _ in range(producers)]
    t0 = time.monotonic()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    t.join(8.0)
    stop.set()
    woken.set()
    assert taken == n * producers and time.monotonic() - t0 < 8.0


def test_drop_forgets_a_peer_and_counts_its_items() -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.offer(A, [[1], [2]])
    peers.offer(A, [[3]])
    assert peers.drop(A) == 3
    assert A not in peers.queues
    assert peers.drop(A) == 0


def test_a_transfer_drops_and_counts_what_it_held_for_a_peer_that_left(caplog: pytest.LogCaptureFixture) -> None:
    peers = PeerQueues(bound=4, hard_limit=8)
    peers.offer(A, [[1], [2]])  # A never registered an address and is no longer assigned
    peers.offer(B, [[3]])  # B is assigned but not registered yet: held
    lost: list[int] = []
    ctx: zmq.Context[Any] = zmq.Context()
    transfer = Transfer(ctx, peers, lambda s: None, lambda s: s == B, lambda items: b"x", lost.append)
    with caplog.at_level(logging.WARNING, logger="squall.transport"):
        try:
            assert not transfer.turn()  # nothing could go out
        finally:
            transfer.close()
            ctx.term()
    assert lost == [2] and A not in peers.queues
    assert list(peers.queues[B]) == [[[3]]]  # still held for a peer that may yet register
    assert "dropped 2 tuples" in caplog.text and "left the assignment" in caplog.text


def test_a_transfer_coalesces_a_peers_batches_and_keeps_what_a_slow_peer_did_not_take() -> None:
    """Batches for one peer go out as frames of up to FRAME_BATCHES batches, at most
    FRAMES_PER_TURN frames a turn; a frame the peer's socket does not take (its high-water mark
    reached) waits as the peer's pending frame and goes first, and its socket is `waiting`."""
    ctx: zmq.Context[Any] = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 1)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    peers = PeerQueues(bound=1 << 10, hard_limit=1 << 11)
    frames: list[int] = []
    transfer = Transfer(ctx, peers, lambda s: f"tcp://127.0.0.1:{port}", lambda s: True,
                        lambda items: (frames.append(len(items)), b"x" * 100_000)[1], lambda n: None)
    try:
        for i in range(FRAME_BATCHES * FRAMES_PER_TURN + 3):
            peers.offer(A, [[i]])
        assert transfer.turn()
        assert frames == [FRAME_BATCHES] * FRAMES_PER_TURN and len(peers.queues[A]) == 3
        assert transfer.turn() and frames[-1] == 3 and not peers.queues[A]
        assert not transfer.turn()  # nothing left
        # the peer stops taking (it reads nothing): a frame waits, and its socket is listed
        deadline = time.monotonic() + 10.0
        while not transfer.pending and time.monotonic() < deadline:
            peers.offer(A, [[0]])
            transfer.turn()
        assert A in transfer.pending and transfer.waiting() == [transfer.socks[A][1]]
        sent = len(frames)
        # the peer reads again: the waiting frame goes out first, then what was queued behind it
        for i in range(5):
            peers.offer(A, [[i]])
        got = 0
        while got < sent + 1 and time.monotonic() < deadline + 10.0:
            if pull.poll(100):
                pull.recv()
                got += 1
            transfer.turn()
        assert not transfer.pending and not peers.queues[A] and transfer.waiting() == []
        assert got == sent + 1 and len(frames) == sent + 1
    finally:
        transfer.close()
        pull.close(0)
        ctx.term()
