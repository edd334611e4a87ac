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
import heapq

__all__ = ["OffsetManager"]


class OffsetManager:
    """Offsets of one partition between the committed point and the latest emitted one.

    `committed`: Kafka's meaning, the next offset to read after a restart (every offset below it
    is processed). Memory: one int per emitted, un-committed offset (the spout bounds their number
    with `maxUncommittedOffsets`).
    """

    __slots__ = ("committed", "_emitted", "_emitted_set", "_acked", "_ready", "latest_emitted")

    def __init__(self, committed: int) -> None:
        self.committed = committed
        self._emitted: list[int] = []  # sorted; offsets >= committed
        self._emitted_set: set[int] = set()
        self._acked: list[int] = []  # a min-heap of acked offsets not yet below _ready
        self._ready = committed  # everything below it is acked (or was never emitted)
        self.latest_emitted: int | None = None

    # -- what the spout tells it -------------------------------------------------------------
    def add_emitted(self, offset: int) -> None:
        if offset < self.committed or offset in self._emitted_set:
            return  # a retry of an offset already counted, or one committed already
        self._emitted_set.add(offset)
        if not self._emitted or offset > self._emitted[-1]:
            self._emitted.append(offset)  # the usual case: polled in order
        else:
            bisect.insort(self._emitted, offset)
        if self.latest_emitted is None or offset > self.latest_emitted:
            self.latest_emitted = offset

    def add_acked(self, offset: int) -> None:
        """`offset` is processed (acked, or skipped for good: retries spent, a poison record)."""
        if offset < self._ready:
            return  # acked twice, or already counted as committable
        heapq.heappush(self._acked, offset)
        self._advance()

    def is_emitted(self, offset: int) -> bool:
        return offset in self._emitted_set

    # -- what the spout asks ------------------------------------------------------------------
    @property
    def num_uncommitted(self) -> int:
        """Emitted offsets at or above the committed point (acked or not)."""
        return len(self._emitted)

    def next_commit_offset(self) -> int | None:
        """The offset to commit now (Kafka's: the next to read), or None when it would not move."""
        return self._ready if self._ready > self.committed else None

    def commit(self, offset: int) -> None:
        """`offset` was committed: forget what lies below it."""
        if offset <= self.committed:
            return
        self.committed = offset
        cut = bisect.bisect_left(self._emitted, offset)
        for o in self._emitted[:cut]:
            self._emitted_set.discard(o)
        del self._emitted[:cut]
        if self._ready < offset:
            self._ready = offset
            while self._acked and self._acked[0] < offset:
                heapq.heappop(self._acked)
            self._advance()

    def _advance(self) -> None:
        nxt = self._ready
        acked = self._acked
        while acked:
            cur = acked[0]
            if cur < nxt:
                heapq.heappop(acked)  # a duplicate
            elif cur == nxt:
                heapq.heappop(acked)
                nxt = cur + 1
            elif nxt in self._emitted_set:
                break  # emitted and not acked yet: the commit point stops here
            else:
                # nxt was never emitted: skip the gap when no emitted offset lies in [nxt, cur)
                i = bisect.bisect_left(self._emitted, nxt)
                if i < len(self._emitted) and self._emitted[i] == cur:
                    heapq.heappop(acked)
                    nxt = cur + 1
                else:
                    break
        self._ready = nxt

    def __repr__(self) -> str:
        return (f"<OffsetManager committed={self.committed} ready={self._ready} "
                f"uncommitted={len(self._emitted)}>")
