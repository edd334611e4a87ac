"""What a Kafka spout may commit: storm-kafka-client's `OffsetManager`, one per partition.

Acks come back out of order. Kafka's committed offset means "everything before this is done", so
the spout may commit only up to the lowest offset it emitted and has not seen acked: offset 7
acked while 5 is still in flight commits nothing past 5. Offsets that were never emitted (removed
by compaction, transaction markers, records a translator skipped) do not block: a gap between the
commit point and the next acked offset is skipped when no emitted offset lies in it.

Pure: plain ints, no client, no clock. The spout marks offsets emitted and acked, asks
`next_commit_offset()` when its commit timer fires, commits, and reports it with `commit()`.
"""

from __future__ import annotations

import bisect

__all__ = ["CommitWatch", "HoldWatch", "OffsetManager"]


class OffsetManager:
    """Offsets of one partition between the committed point and the latest emitted one.

    `committed`: Kafka's meaning, the next offset to read after a restart (every offset below it
    is processed). Memory: one int per emitted, un-committed offset (the spout bounds their number
    with `maxUncommittedOffsets`), plus one per offset acked out of order ahead of the first
    un-acked one.

    The emitted offsets are one sorted list; `_head` counts its leading offsets that are acked
    (the commit point is just past the last of them). Polled records come in order and are
    mostly acked in order, so emitting is an append and an ack moves `_head` by one: no per-offset
    set or heap entry. An ack out of order waits in `_acked` until `_head` reaches it.
    """

    __slots__ = ("committed", "emitted", "_head", "_acked", "_ready", "latest_emitted")

    def __init__(self, committed: int) -> None:
        self.committed = committed
        # sorted, distinct; offsets >= committed (the spout appends to it itself, in order)
        self.emitted: list[int] = []
        self._head = 0  # emitted[:_head] are acked (or below _ready: done)
        self._acked: set[int] = set()  # acked offsets of emitted[_head:] (out of order)
        self._ready = committed  # everything below it is acked (or was never emitted)
        self.latest_emitted: int | None = None

    # -- what the spout tells it -------------------------------------------------------------
    def add_emitted(self, offset: int) -> None:
        if offset < self.committed:
            return  # committed already
        emitted = self.emitted
        if not emitted or offset > emitted[-1]:
            emitted.append(offset)  # the usual case: polled in order
            self.latest_emitted = offset
            return
        i = bisect.bisect_left(emitted, offset)
        if emitted[i] == offset:
            return  # a retry of an offset already counted
        emitted.insert(i, offset)
        if i < self._head:
            self._head += 1  # below the commit point already (a gap it skipped): it cannot hold it back

    def add_acked(self, offset: int) -> None:
        """`offset` is processed (acked, or skipped for good: retries spent, a poison record)."""
        if offset < self._ready:
            return  # acked twice, or already counted as committable
        emitted = self.emitted
        h = self._head
        if h < len(emitted) and emitted[h] == offset:
            h += 1  # the usual case: the first un-acked offset
            acked = self._acked
            if acked:
                n = len(emitted)
                while h < n and emitted[h] in acked:
                    acked.discard(emitted[h])
                    h += 1
            self._head = h
            self._ready = emitted[h - 1] + 1
        elif offset == self._ready and not self.is_emitted(offset):
            self._ready = offset + 1  # never emitted, and next in line
        else:
            self._acked.add(offset)

    def is_emitted(self, offset: int) -> bool:
        latest = self.latest_emitted
        if latest is None or offset > latest:
            return False
        emitted = self.emitted
        i = bisect.bisect_left(emitted, offset)
        return i < len(emitted) and emitted[i] == offset

    # -- what the spout asks ------------------------------------------------------------------
    @property
    def num_uncommitted(self) -> int:
        """Emitted offsets at or above the committed point (acked or not)."""
        return len(self.emitted)

    def first_unacked(self) -> int | None:
        """The emitted offset that holds the commit point back (the lowest not acked), or None
        when every emitted offset is acked."""
        return self.emitted[self._head] if self._head < len(self.emitted) else None

    def next_commit_offset(self) -> int | None:
        """The offset to commit now (Kafka's: the next to read), or None when it would not move."""
        return self._ready if self._ready > self.committed else None

    def commit(self, offset: int) -> None:
        """`offset` was committed: forget what lies below it."""
        if offset <= self.committed:
            return
        self.committed = offset
        emitted = self.emitted
        cut = bisect.bisect_left(emitted, offset)
        del emitted[:cut]
        h = self._head - cut
        acked = self._acked
        if acked:
            self._acked = acked = {o for o in acked if o >= offset}
        if h < 0 or self._ready < offset:
            # committed past the commit point (another reader's commit, a state's start): what
            # lies above it counts from there
            h = 0
            self._ready = offset
            n = len(emitted)
            while h < n and emitted[h] in acked:
                acked.discard(emitted[h])
                h += 1
            if h:
                self._ready = emitted[h - 1] + 1
        self._head = h

    def __repr__(self) -> str:
        return (f"<OffsetManager committed={self.committed} ready={self._ready} "
                f"uncommitted={len(self.emitted)}>")


class CommitWatch:
    """How long the spout's commits have gone unconfirmed. An asynchronous commit that cannot
    reach the group's coordinator waits inside the client with no callback (librdkafka queues it
    until a coordinator is found), so a spout whose commits stall says nothing by itself: this
    tells it when the first commit sent since the last confirmed one is older than `stall_s`.
    Pure: the caller passes the time."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.since: float | None = None  # when the first unconfirmed commit was sent

    def sent(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def confirmed(self) -> None:
        self.since = None

    def stalled(self, now: float) -> float | None:
        """Seconds since the oldest unconfirmed commit, once past `stall_s`; else None."""
        if self.since is None or now - self.since < self.stall_s:
            return None
        return now - self.since


class HoldWatch:
    """How long each partition's commit point has waited on one offset. A tuple that is never
    acked nor failed (or fails on and on) holds its partition's commits back without a word;
    this tells the spout when the same offset has held a partition for `stall_s`, so it can say
    which offset and what became of it. Pure: the caller passes the time."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._held: dict[object, tuple[int, float]] = {}  # partition -> (offset, since)

    def update(self, partition: object, offset: int | None, now: float) -> float | None:
        """`offset` holds `partition` now (None: nothing does); seconds it has held it, once past
        `stall_s`, else None."""
        if offset is None:
            self._held.pop(partition, None)
            return None
        held = self._held.get(partition)
        if held is None or held[0] != offset:
            self._held[partition] = (offset, now)
            return None
        stood = now - held[1]
        return stood if stood >= self.stall_s else None

    def retain(self, partitions: set[object]) -> None:
        """Forget the partitions not in `partitions` (revoked)."""
        for p in [p for p in self._held if p not in partitions]:
            del self._held[p]
