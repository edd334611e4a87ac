"""Transport between workers: per-peer send queues and the transfer loop that drains them.

Each peer (a remote slot) has its own bounded queue of batches, so a slow or unreachable peer
fills only its own queue: whoever sends to it waits (bolts) or holds its output (spouts), while
sends to every other peer go on. The transfer thread keeps at most one packed frame per peer that
the peer's socket did not take yet and moves on to the next peer instead of waiting on it.
Batches for a peer whose endpoint is not known yet stay queued until it is registered, or until
the peer's slot leaves the assignment (then they are dropped and counted: nobody will take them).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import zmq

from squall.models.cluster import WorkerSlot

log = logging.getLogger("squall.transport")

SOCKET_HWM = 32
# batches coalesced into one frame per destination
FRAME_BATCHES = 16
# frames sent to one peer before the loop looks at the next one (fairness)
FRAMES_PER_TURN = 4


class PeerQueues:
    """Bounded per-peer queues of batches (lists of items), drained by one transfer thread.

    `offer` never blocks: it returns False when the peer's queue is full, and the caller decides
    whether to wait (a bolt: backpressure) or to keep its output and try again later (a spout,
    which must never block). `force=True` queues beyond the bound; only the receive threads use
    it, for traffic they must not block on (acker messages, backpressure signals, tuples that
    arrived for a task that moved away), and they stop reading their socket past `hard_limit`.
    """

    def __init__(self, bound: int, hard_limit: int) -> None:
        self.bound = bound
        self.hard_limit = hard_limit
        self.queues: dict[WorkerSlot, collections.deque[list[Any]]] = {}
        # the transfer thread's doorbell, rung only while it sleeps (`sleeping`): an offer to a
        # transfer thread that is busy sending wakes nothing, and a ring is one C call (a
        # SimpleQueue put), not threading.Event's Python-level Condition
        self.bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self.sleeping = False
        # counts offers, so that the transfer thread sees one made while it was looking
        self.offers = 0
        self._lock = threading.Lock()

    def _queue(self, slot: WorkerSlot) -> collections.deque[list[Any]]:
        q = self.queues.get(slot)
        if q is None:
            with self._lock:
                q = self.queues.get(slot)
                if q is None:
                    q = self.queues[slot] = collections.deque()
        return q

    def offer(self, slot: WorkerSlot, batch: list[Any], force: bool = False) -> bool:
        q = self.queues.get(slot)
        if q is None:
            q = self._queue(slot)
        if not force and len(q) >= self.bound:
            return False
        q.append(batch)
        self.offers += 1
        if self.sleeping:  # read after the append and the count: see `sleep`
            self.sleeping = False
            self.bell.put(None)
        return True

    def ring(self) -> None:
        """Wake the transfer thread now (e.g. to see its stop event)."""
        self.sleeping = False
        self.bell.put(None)

    def sleep(self, seen: int, timeout: float) -> None:
        """The transfer thread: wait up to `timeout` for an offer made after `seen` (the count
        of offers it read before it last looked at the queues). It marks itself sleeping before
        it reads the count again, and an offer counts before it reads the mark, so an offer is
        either seen here or rings the bell: none is missed. Two offers that both see the mark
        ring twice; the extra ring is taken here (or wakes the next sleep early, harmlessly)."""
        self.sleeping = True
        if self.offers != seen:
            self.sleeping = False
            return
        bell = self.bell
        try:
            bell.get(True, timeout)
        except queue.Empty:
            pass
        self.sleeping = False
        while not bell.empty():
            try:
                bell.get_nowait()
            except queue.Empty:
                break

    def over_hard_limit(self) -> bool:
        return any(len(q) >= self.hard_limit for q in list(self.queues.values()))

    def queued(self) -> int:
        return sum(len(q) for q in list(self.queues.values()))

    def drop(self, slot: WorkerSlot) -> int:
        """Forget a peer's queue; returns how many items it held."""
        with self._lock:
            q = self.queues.pop(slot, None)
        return sum(len(b) for b in q) if q else 0


def run_transfer(
    ctx: zmq.Context[Any],
    peers: PeerQueues,
    address_of: Callable[[WorkerSlot], str | None],
    assigned: Callable[[WorkerSlot], bool],
    pack: Callable[[list[Any]], bytes | None],
    stop: threading.Event,
    dropped: Callable[[int], None],
    turned: Callable[[], None] | None = None,
    secure: Callable[[zmq.Socket[bytes]], None] | None = None,
) -> None:
    """The transfer loop: coalesce each peer's queued batches into frames and send them, one
    PUSH socket per peer (connected on first use, re-connected when the peer's address changes,
    closed when it vanishes). Never waits on one peer while another has something to send.
    `pack` returns None when nothing of a frame could be encoded (it reports what could not).
    `turned` (if given) is called at every turn of the loop: the worker's health checks see it
    turning.
    `secure` (if given) sets up each new socket before it connects (CURVE, squall.worker.security)."""
    socks: dict[WorkerSlot, tuple[str, zmq.Socket[bytes]]] = {}
    # a frame a peer's socket did not take yet (its high-water mark is reached): sent first
    pending: dict[WorkerSlot, tuple[bytes, int]] = {}
    poller = zmq.Poller()
    try:
        while not stop.is_set():
            if turned is not None:
                turned()
            seen = peers.offers  # before looking: a batch offered from now on changes it
            sent = False
            for slot, q in list(peers.queues.items()):
                addr = address_of(slot)
                if addr is None:
                    if (q or slot in pending) and not assigned(slot):
                        lost = peers.drop(slot) + pending.pop(slot, (b"", 0))[1]
                        if lost:
                            dropped(lost)
                            log.warning("dropped %d tuples for %s: it left the assignment", lost, slot.key())
                    continue  # not registered yet: held until it is
                have = socks.get(slot)
                if have is None or have[0] != addr:
                    if have is not None:
                        have[1].close(0)
                    s = ctx.socket(zmq.PUSH)
                    s.setsockopt(zmq.SNDHWM, SOCKET_HWM)
                    s.setsockopt(zmq.LINGER, 0)
                    if secure is not None:
                        secure(s)
                    s.connect(addr)
                    have = socks[slot] = (addr, s)
                sock = have[1]
                for _ in range(FRAMES_PER_TURN):
                    got = pending.pop(slot, None)
                    if got is None:
                        if not q:
                            break
                        items: list[Any] = []
                        for _ in range(FRAME_BATCHES):
                            try:
                                items.extend(q.popleft())
                            except IndexError:
                                break
                        frame = pack(items)
                        if frame is None:
                            continue
                        got = (frame, len(items))
                    try:
                        sock.send(got[0], zmq.NOBLOCK, copy=False)
                        sent = True
                    except zmq.Again:
                        pending[slot] = got  # the peer is slow: try again next round
                        break
            for slot in [s for s, (addr, _) in socks.items() if address_of(s) != addr]:
                socks.pop(slot)[1].close(0)
            if sent:
                continue
            if pending:
                # wait for one of the slow peers to take a frame, or for new batches
                for slot in pending:
                    have = socks.get(slot)
                    if have is not None:
                        poller.register(have[1], zmq.POLLOUT)
                poller.poll(5)
                for sock, _flags in list(poller.sockets):
                    poller.unregister(sock)
            else:
                peers.sleep(seen, 0.1)
    finally:
        for _addr, s in socks.values():
            s.close(0)
