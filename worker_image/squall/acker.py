"""Storm's XOR acker and the spout's pending-tuple book, as pure data structures.

The acker keeps `root -> xor of edge ids`; a tuple tree is complete when the xor is back to 0
and the acker knows which spout task to tell. Both books forget entries through rotating buckets
(Storm's RotatingMap): an entry lives between `timeout` and `timeout * (1 + 1/(buckets-1))`.
Time is passed in (`now`), so tests drive it by hand.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

V = TypeVar("V")

ID_BATCH = 512  # ids made per refill of an `Ids`
# each id's most significant byte (native byte order) and a table that clears its top two bits
_TOP = 7 if sys.byteorder == "little" else 0
_MASK62 = bytes(b & 0x3F for b in range(256))


def fresh_ids(rng: random.Random, n: int) -> list[Any]:
    """`n` random 62-bit ids, uniform over [0, 2**62): 8 random bytes of `rng` per id with the
    top two bits cleared, made into ints in a few C calls for all `n`."""
    raw = bytearray(rng.randbytes(8 * n))
    raw[_TOP::8] = raw[_TOP::8].translate(_MASK62)
    ids: list[Any] = memoryview(raw).cast("Q").tolist()
    return ids


class Ids:
    """Random 62-bit root and edge ids for one thread's emits (an executor's collectors).

    XOR acking needs ids that collide as rarely as Storm's random 64-bit ones (a collision in a
    tree can complete it early); 62 random bits keep them small ints that need no big-int
    arithmetic when compiled. `random.getrandbits(62)` per id cost ~700 instructions from compiled
    code (a module-global lookup, a call with a boxed argument, the generator's bits built
    through a byte array); taking the next of
    `ID_BATCH` ids made at once costs a list read, and hands the id out as an object (compiled,
    an `int` return would be boxed into a new object at every use). Its own generator (the
    `random` module's Mersenne Twister, seeded from `os.urandom`), so that a component seeding
    the `random` module cannot make two workers' ids repeat each other. Not shared between
    threads: each executor's collectors have their own."""

    __slots__ = ("rng", "ids", "i")

    def __init__(self) -> None:
        self.rng = random.Random()
        self.ids: list[Any] = []
        self.i = 0

    def take(self) -> Any:
        i = self.i
        if i == 0:
            self.ids = fresh_ids(self.rng, ID_BATCH)
            i = ID_BATCH
        i -= 1
        self.i = i
        return self.ids[i]


class RotatingMap(Generic[V]):
    """A dict split into time buckets; `rotate` drops the oldest bucket and returns it.

    Keys are random 62-bit root ids, so `put` assumes a new key (no search of older buckets);
    the size is kept as a counter because spouts read it before every `next_tuple`."""

    def __init__(self, buckets: int = 3) -> None:
        if buckets < 2:
            raise ValueError("RotatingMap needs at least 2 buckets")
        self._buckets: list[dict[int, V]] = [{} for _ in range(buckets)]
        self._head = self._buckets[0]
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __contains__(self, key: int) -> bool:
        return any(key in b for b in self._buckets)

    def put(self, key: int, value: V) -> None:
        """Insert a key that is not in the map (root ids are random)."""
        self._head[key] = value
        self.size += 1

    def get(self, key: int) -> V | None:
        v = self._head.get(key)
        if v is not None:
            return v
        for b in self._buckets:
            v = b.get(key)
            if v is not None:
                return v
        return None

    def pop(self, key: int) -> V | None:
        for b in self._buckets:
            v = b.pop(key, None)
            if v is not None:
                self.size -= 1
                return v
        return None

    def rotate(self) -> dict[int, V]:
        dead = self._buckets.pop()
        self._head = {}
        self._buckets.insert(0, self._head)
        self.size -= len(dead)
        return dead

    def items(self) -> Iterator[tuple[int, V]]:
        for b in self._buckets:
            yield from b.items()


class Rotator:
    """When to rotate: every `timeout / (buckets - 1)` seconds of the injected clock."""

    def __init__(self, timeout_secs: float, buckets: int, now: float) -> None:
        self.period = timeout_secs / (buckets - 1)
        self.next_at = now + self.period

    def due(self, now: float) -> int:
        """How many rotations are due at `now` (and account for them)."""
        n = 0
        while now >= self.next_at:
            self.next_at += self.period
            n += 1
        return n


class AckerLedger:
    """One acker task's book: root id -> [xor, spout task or -1, failed]."""

    def __init__(self, timeout_secs: float, now: float, buckets: int = 3) -> None:
        self.pending: RotatingMap[list[int]] = RotatingMap(buckets)
        self.rotator = Rotator(timeout_secs, buckets, now)

    def __len__(self) -> int:
        return len(self.pending)

    def init(self, root: int, xor: int, spout_task: int) -> bool | None:
        """A spout emitted root's first tuples; returns True if the tree is already complete."""
        entry = self.pending.get(root)
        if entry is None:
            entry = [xor, spout_task, 0]
            self.pending.put(root, entry)
        else:
            # acks overtook the init: order does not matter for XOR
            entry[0] ^= xor
            entry[1] = spout_task
        return self._settle(root, entry)

    def ack(self, root: int, xor: int) -> tuple[int, bool] | None:
        """A bolt acked a tuple of root's tree; returns (spout task, True) when the tree completes."""
        entry = self.pending.get(root)
        if entry is None:
            entry = [xor, -1, 0]
            self.pending.put(root, entry)
        else:
            entry[0] ^= xor
        done = self._settle(root, entry)
        return None if done is None else (entry[1], done)

    def init_new(self, entries: list[tuple[int, int, int]], done: list[list[int]]) -> None:
        """Register new trees `(root, xor, spout task)` whose tuples have not left the spout yet,
        so no ack for them can have arrived: no lookup needed. A tree with no edges (its tuple
        went nowhere) completes at once."""
        head = self.pending._head
        added = 0
        for root, xor, task in entries:
            if xor == 0:
                done.append([3, task, root, 1, 0])
            else:
                head[root] = [xor, task, 0]
                added += 1
        self.pending.size += added

    def apply(self, items: list[list[int]], done: list[list[int]]) -> None:
        """Apply a batch of wire messages `[kind, acker task, root, val, extra]` (kinds from
        `squall.wire`: 0 init with extra = spout task, 1 ack, 2 fail) and append a completion
        `[3, spout task, root, 1 or 0, 0]` to `done` for every tree that completed or failed.
        The same rules as `init`/`ack`/`fail`, written out once for the per-tuple path."""
        buckets = self.pending._buckets
        head = self.pending._head
        rmap = self.pending
        for kind, _task, root, val, extra in items:
            where = head
            entry = head.get(root)
            if entry is None:
                for where in buckets:
                    entry = where.get(root)
                    if entry is not None:
                        break
            if entry is None:
                if kind == 0:
                    if val == 0:
                        done.append([3, extra, root, 1, 0])  # a tree with no edges: complete
                        continue
                    head[root] = [val, extra, 0]
                elif kind == 1:
                    head[root] = [val, -1, 0]
                else:
                    head[root] = [0, -1, 1]
                rmap.size += 1
                continue
            if kind == 0:
                entry[0] ^= val
                entry[1] = extra
            elif kind == 1:
                entry[0] ^= val
            else:
                entry[2] = 1
            if entry[1] < 0:
                continue
            if entry[2]:
                del where[root]
                rmap.size -= 1
                done.append([3, entry[1], root, 0, 0])
            elif entry[0] == 0:
                del where[root]
                rmap.size -= 1
                done.append([3, entry[1], root, 1, 0])

    def fail(self, root: int) -> tuple[int, bool] | None:
        """A bolt failed a tuple of root's tree; returns (spout task, False) once the spout is known."""
        entry = self.pending.get(root)
        if entry is None:
            self.pending.put(root, [0, -1, 1])
            return None
        entry[2] = 1
        done = self._settle(root, entry)
        return None if done is None else (entry[1], done)

    def _settle(self, root: int, entry: list[int]) -> bool | None:
        if entry[1] < 0:
            return None
        if entry[2]:
            self.pending.pop(root)
            return False
        if entry[0] == 0:
            self.pending.pop(root)
            return True
        return None

    def expire(self, now: float) -> int:
        """Forget trees older than the timeout (their spouts time them out themselves)."""
        dropped = 0
        for _ in range(self.rotator.due(now)):
            dropped += len(self.pending.rotate())
        return dropped


class PendingTuples:
    """A spout task's un-acked messages: root id -> (msg_id, emit time)."""

    def __init__(self, timeout_secs: float, now: float, buckets: int = 3) -> None:
        self.pending: RotatingMap[tuple[Any, float]] = RotatingMap(buckets)
        self.rotator = Rotator(timeout_secs, buckets, now)

    def __len__(self) -> int:
        return self.pending.size

    def add(self, root: int, msg_id: Any, now: float) -> None:
        self.pending.put(root, (msg_id, now))

    def complete(self, root: int) -> tuple[Any, float] | None:
        """Remove and return (msg_id, emit time), or None if it already timed out."""
        return self.pending.pop(root)

    def expire(self, now: float) -> list[Any]:
        """Message ids whose trees timed out: the spout must fail them."""
        failed: list[Any] = []
        for _ in range(self.rotator.due(now)):
            failed.extend(msg_id for msg_id, _t in self.pending.rotate().values())
        return failed

    def drain(self) -> list[Any]:
        """Every pending message id (on shutdown: nothing is forgotten silently)."""
        out = [msg_id for _root, (msg_id, _t) in self.pending.items()]
        while len(self.pending):
            self.pending.rotate()
        return out
