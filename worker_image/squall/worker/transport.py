"""Transport between workers: an executor's own sockets to its peers (`DirectSender`: every
tuple an executor sends to another worker), and per-peer send queues with the transfer loop that
drains them (acker traffic, backpressure and load announcements; tuples the receive thread
forwards to a task that moved).

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
import time
from collections.abc import Callable, Mapping
from typing import Any

import zmq

from squall.models.cluster import WorkerSlot
from squall.wire import MAX_FRAME_BYTES

log = logging.getLogger("squall.transport")

# The largest frame a worker's data and control ports take: zmq's MAXMSGSIZE on the receiving
# sockets, checked by zmq from a frame's header before it buffers the frame; a peer that sends a
# larger one has its connection closed (it connects again by itself) and nothing of the frame is
# kept. Senders keep their frames under it (`wire.pack_data`). A topology's config sets it
# (MAX_FRAME_CONFIG), the worker's environment (MAX_FRAME_ENV) overrides that.
MAX_FRAME_CONFIG = "worker.max.frame.bytes"
MAX_FRAME_ENV = "SQUALL_WORKER_MAX_FRAME_BYTES"
MIN_FRAME_BYTES = 64 << 10  # a frame holds at least one batch of small tuples
# what zmq may add to a frame on the wire (CURVE's MESSAGE command: its name, nonce and box;
# ZMTP's header): senders stay this far under the maximum
FRAME_OVERHEAD = 1024
LARGEST_FRAME_BYTES = 1 << 31  # zmq's limit is a signed 64-bit count; a frame is bytes in memory

SOCKET_HWM = 32
# batches coalesced into one frame per destination
FRAME_BATCHES = 16
# frames sent to one peer before the loop looks at the next one (fairness)
FRAMES_PER_TURN = 4


def max_frame_bytes(conf: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[int, str]:
    """The maximum frame size and where it came from (`environ`'s MAX_FRAME_ENV, else the
    topology config's MAX_FRAME_CONFIG, else the default MAX_FRAME_BYTES). Raises ValueError
    with one line naming the setting when it is not a whole number of bytes in range."""
    raw: object = environ.get(MAX_FRAME_ENV) or None
    source = MAX_FRAME_ENV
    if raw is None:
        raw, source = conf.get(MAX_FRAME_CONFIG), f"spec.config.{MAX_FRAME_CONFIG}"
        if raw is None:
            return MAX_FRAME_BYTES, "default"
    value: int | None = None
    if type(raw) is int:
        value = raw
    elif isinstance(raw, str) and raw.strip().isdigit():
        value = int(raw.strip())
    if value is None or not MIN_FRAME_BYTES <= value <= LARGEST_FRAME_BYTES:
        raise ValueError(f"{source}={raw!r}: expected a whole number of bytes from {MIN_FRAME_BYTES} to"
                         f" {LARGEST_FRAME_BYTES} (default {MAX_FRAME_BYTES})")
    return value, source


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


def peer_socket(
    ctx: zmq.Context[Any],
    socks: dict[WorkerSlot, tuple[str, zmq.Socket[bytes]]],
    slot: WorkerSlot,
    addr: str,
    secure: Callable[[zmq.Socket[bytes]], None] | None,
) -> zmq.Socket[bytes]:
    """The PUSH socket in `socks` for `slot` at `addr`: made and connected on first use (high-water
    mark SOCKET_HWM frames, linger 0, `secure` before connect), made again when the peer's
    address changed (the old one closed)."""
    have = socks.get(slot)
    if have is not None and have[0] == addr:
        sock: zmq.Socket[bytes] = have[1]
        return sock
    if have is not None:
        have[1].close(0)
    s: zmq.Socket[bytes] = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, SOCKET_HWM)
    s.setsockopt(zmq.LINGER, 0)
    if secure is not None:
        secure(s)
    s.connect(addr)
    socks[slot] = (addr, s)
    return s


class DirectSender:
    """One executor thread's own PUSH sockets to its peers' data ports (one per peer, made on
    first use, used by that thread only): an executor packs and sends its batches for remote
    tasks itself, with no hand-over to a transfer thread and so no wake of one. Every batch the
    executor sends to a peer goes through that one socket, so a task's tuples to another task
    arrive in the order it emitted them (Storm keeps per-connection order too).

    Same sockets as the transfer thread's: high-water mark SOCKET_HWM (frames), `secure` before
    connect, linger 0 when a peer's address changes (re-connected) or vanishes (closed by
    `prune`). A frame the socket did not take (the peer is slow) is kept as the peer's
    `pending` frame and goes first: `send` takes nothing more for that peer until it left.

    The load-aware shuffle's signal of a slow peer (`fill`): the share of this executor's sends
    to the peer since the last reading that met the high-water mark (Storm reads the pending
    messages of its Netty client; the transfer thread's queue fill before this).

    Shared by the executors of an engine loop (`combine` given), it coalesces: `send` stages a
    batch, and `push_staged` (once per turn of the loop, or when a peer's stage holds
    FRAME_BATCHES batches) sends one frame per peer holding every executor's batches for it, in
    the order they were staged. `combine` packs a frame of them all, or returns None when
    they do not fit one frame (then each batch is packed on its own, as without staging)."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        address_of: Callable[[WorkerSlot], str | None],
        assigned: Callable[[WorkerSlot], bool],
        pack: Callable[[list[Any]], bytes | None],
        dropped: Callable[[int], None],
        secure: Callable[[zmq.Socket[bytes]], None] | None = None,
        combine: Callable[[list[Any]], bytes | None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.combine = combine
        # peer -> batches staged this turn (with `combine`), and their tuples
        self.staged: dict[WorkerSlot, list[list[Any]]] = {}
        self.address_of = address_of
        self.assigned = assigned
        self.pack = pack
        self.dropped = dropped
        self.secure = secure
        self.socks: dict[WorkerSlot, tuple[str, zmq.Socket[bytes]]] = {}
        # peer -> (frame, tuples in it) its socket did not take yet: sent before anything else
        self.pending: dict[WorkerSlot, tuple[bytes, int]] = {}
        # peer -> [sends, sends that met the high-water mark] since `fill` last read them
        self.tries: dict[WorkerSlot, list[int]] = {}
        self.poller = zmq.Poller()

    def _socket(self, slot: WorkerSlot, addr: str) -> zmq.Socket[bytes]:
        return peer_socket(self.ctx, self.socks, slot, addr, self.secure)

    def _gone(self, slot: WorkerSlot, items: int) -> bool:
        """A peer with no address: True (and its pending frame and `items` more dropped and
        counted) when it also left the assignment, as the transfer thread does; else it is held
        until it registers."""
        if self.assigned(slot):
            return False
        lost = items + self.pending.pop(slot, (b"", 0))[1] + sum(len(b) for b in self.staged.pop(slot, ()))
        have = self.socks.pop(slot, None)
        if have is not None:
            have[1].close(0)
        drop_departed(self.dropped, slot, lost)
        return True

    def _flush_pending(self, slot: WorkerSlot, sock: zmq.Socket[bytes]) -> bool:
        got = self.pending.get(slot)
        if got is None:
            return True
        try:
            sock.send(got[0], zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        del self.pending[slot]
        return True

    def send(self, slot: WorkerSlot, items: list[Any]) -> bool:
        """True: `items` are taken (sent, or packed and kept as the peer's pending frame, or
        dropped and counted because the peer left the assignment, or nothing of them could be
        encoded: `pack` reports that). False: not taken, the caller keeps them: the peer's
        pending frame is still waiting (it is slow) or its address is not known yet."""
        tries = self.tries.get(slot)
        if tries is None:
            tries = self.tries[slot] = [0, 0]
        tries[0] += 1
        addr = self.address_of(slot)
        if addr is None:
            if self._gone(slot, len(items)):
                return True
            tries[1] += 1  # not registered (yet): it takes nothing, as a slow peer
            return False
        sock = self._socket(slot, addr)
        if not self._flush_pending(slot, sock):
            tries[1] += 1
            return False
        if self.combine is not None:
            stage = self.staged.get(slot)
            if stage is None:
                self.staged[slot] = [items]
            else:
                stage.append(items)
                if len(stage) >= FRAME_BATCHES:
                    self._send_staged(slot, sock)
            return True
        frame = self.pack(items)
        if frame is not None:
            self._send_frame(slot, sock, frame, len(items))
        return True

    def _send_staged(self, slot: WorkerSlot, sock: zmq.Socket[bytes]) -> None:
        """The peer's staged batches as one frame, or each on its own where they do not fit one.
        A frame its socket does not take becomes the peer's pending frame; batches behind it
        stay staged until it left."""
        stage = self.staged.pop(slot)
        if len(stage) > 1 and self.combine is not None:
            items = [it for batch in stage for it in batch]
            frame = self.combine(items)
            if frame is not None:
                self._send_frame(slot, sock, frame, len(items))
                return
        for i, batch in enumerate(stage):
            if slot in self.pending:
                self.staged[slot] = stage[i:]
                return
            f = self.pack(batch)
            if f is not None:
                self._send_frame(slot, sock, f, len(batch))

    def _send_frame(self, slot: WorkerSlot, sock: zmq.Socket[bytes], frame: bytes, n: int) -> None:
        try:
            sock.send(frame, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.tries.setdefault(slot, [0, 0])[1] += 1
            self.pending[slot] = (frame, n)

    def push_staged(self) -> None:
        """Send every peer's staged batches (the engine loop, at the end of each turn)."""
        for slot in list(self.staged):
            addr = self.address_of(slot)
            if addr is None:
                self._gone(slot, 0)
                continue
            sock = self._socket(slot, addr)
            if self._flush_pending(slot, sock):
                self._send_staged(slot, sock)

    def push(self) -> bool:
        """Send the pending frames the sockets take now; True when none is left."""
        for slot in list(self.pending):
            addr = self.address_of(slot)
            if addr is None:
                self._gone(slot, 0)
                continue
            self._flush_pending(slot, self._socket(slot, addr))
        return not self.pending

    def wait(self, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for a socket with a pending frame to have room."""
        poller = self.poller
        for slot in self.pending:
            have = self.socks.get(slot)
            if have is not None:
                poller.register(have[1], zmq.POLLOUT)
        if not poller.sockets:
            time.sleep(timeout_ms / 1000)
            return
        poller.poll(timeout_ms)
        for sock, _flags in list(poller.sockets):
            poller.unregister(sock)

    def held(self) -> dict[WorkerSlot, int]:
        """Peer -> frames this sender holds for it because its socket did not take them (at
        most one each; what the socket itself queues below its high-water mark is not seen).
        Read by other threads for the metrics: one copy of the dict, made in one C call."""
        return dict.fromkeys(list(self.pending), 1)

    def fill(self, slot: WorkerSlot) -> float:
        """The share of the sends to `slot` since the last reading that met the high-water mark
        (0.0: none did, or none was made); resets the count."""
        tries = self.tries.get(slot)
        if tries is None or not tries[0]:
            return 0.0
        share = tries[1] / tries[0]
        tries[0] = tries[1] = 0
        return share

    def prune(self) -> None:
        """Close the sockets of peers whose address changed or vanished (a pending frame stays
        for the next socket, or is dropped and counted with a peer that left the assignment)."""
        for slot in [s for s, (addr, _) in self.socks.items() if self.address_of(s) != addr]:
            self.socks.pop(slot)[1].close(0)
        for slot in [s for s in self.pending if self.address_of(s) is None]:
            self._gone(slot, 0)
        for slot in [s for s in self.tries if s not in self.socks and s not in self.pending]:
            del self.tries[slot]

    def close(self, linger_ms: int = 0) -> None:
        """Close every socket (the executor's thread, when it ends): what they still hold is
        sent for up to `linger_ms` more (0: dropped)."""
        self.push()
        if self.staged:
            self.push_staged()
        for _addr, s in self.socks.values():
            s.close(linger_ms)
        self.socks.clear()
        self.pending.clear()


def drop_departed(dropped: Callable[[int], None], slot: WorkerSlot, lost: int) -> None:
    """Count and log `lost` tuples held for a peer that left the assignment (nobody will take
    them): the one place both senders (the executors' DirectSender, the transfer loop) do it."""
    if lost:
        dropped(lost)
        log.warning("dropped %d tuples for %s: it left the assignment", lost, slot.key())


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
                        drop_departed(dropped, slot, peers.drop(slot) + pending.pop(slot, (b"", 0))[1])
                    continue  # not registered yet: held until it is
                sock = peer_socket(ctx, socks, slot, addr, secure)
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
