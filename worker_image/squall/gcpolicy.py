"""The worker's policy for Python's cyclic garbage collector: its young generation sized to what
the windowed bolts hold.

Tuples, their values and anchors and the acker's entries are acyclic: reference counting frees
them, and the cyclic collector never finds garbage among them. It still scans them: a young
collection runs once the container objects allocated and not freed since the last one pass the
young threshold, and walks every one of them that is still alive. Most tuples die within a
millisecond, so the plain topologies rarely reach the threshold; a window keeps each tuple (the
`Tuple` and its values list: two containers) alive for its length and slide, and with the
threshold below what arrives in a window's slide every young collection walks a few hundred
thousand live, cold tuples and moves them to the older generations, where they are walked
again. In the sliding-window word count (docs/performance.md) that was 11-13% of each
worker's time.

So the young threshold is `max(YOUNG, PER_HELD * held)`, with `held` the most tuples this
worker's windows held after they fired. Between two firings a window takes in at most about what
it holds (length >= slide), and each tuple it keeps costs the collector's count at most three
allocations (the `Tuple`, its values list and its anchors dict: dicts count when allocated even
while untracked; a window that copies its tuples' anchors into arrays frees the dict at once,
which takes it off the count again); `PER_HELD` = 6 leaves at least twice that as headroom, so a steady window never
triggers a collection and its tuples leave by reference counting when they expire. The
threshold follows the peak, not each firing: a rate that swings would otherwise lower it under
what the windows still take in. It falls back when the windowed executors stop. Garbage that
does form cycles (rare in a worker: an exception kept with its traceback) then waits for at
most a few times as many allocations as the windows hold, so its memory stays in proportion to
the windows' own.

A threshold counted in allocations alone leaves cyclic garbage in place while a worker
allocates little: an idle worker, or one dropping a stream of garbage frames, could keep it for
good (exceptions kept with their tracebacks held every refused frame). So the main
loop also runs a young collection when none ran for YOUNG_EVERY_SECS (`tick`): cycles that
became garbage since wait at most that long. It walks only what was allocated since the last
collection and is still alive, each object once before it moves to the middle generation.

Pure sizing (`young_threshold`) and a small stateful shell (`GcPolicy`) with the collector's
setter, its collection and its clock injected, so tests run without touching the process's
collector and without sleeping.

It sits beside the worker package, not inside it: the checkpoint harness (squall/checkpoint.py)
reports to the same policy, and nothing outside squall.worker imports the worker.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

# the thresholds without windows: young collection after 100k net container allocations (the
# collector's default of 700 would rescan the live pending tuples every 700 allocations)
YOUNG = 100_000
MIDDLE = 50
OLD = 1000
PER_HELD = 6  # young threshold per tuple held in windows: 3 counted allocations each, twice that
# a young collection at least this often (seconds), however little the worker allocates
YOUNG_EVERY_SECS = 5.0

SetThreshold = Callable[[int, int, int], None]
Collect = Callable[[int], int]


def young_threshold(held: int) -> int:
    """The young generation's threshold for a worker whose windows hold `held` tuples."""
    return max(YOUNG, PER_HELD * held)


class GcPolicy:
    """The worker's collector thresholds; each windowed executor reports what its windows hold
    (`windows_hold`) after they fired, and 0 when it stops (a stateful windowed bolt's harness,
    squall/checkpoint.py, after each tick that fires its windows, and 0 at cleanup). Thread-safe: executors report from
    their own threads."""

    def __init__(self, set_threshold: SetThreshold = gc.set_threshold, collect: Collect = gc.collect,
                 clock: Callable[[], float] = time.monotonic, get_count: Callable[[], tuple[int, int, int]] = gc.get_count,
                 ) -> None:
        self._set = set_threshold
        self._collect = collect
        self._clock = clock
        self._get_count = get_count
        self._lock = threading.Lock()
        self._held: dict[object, int] = {}
        self.young = YOUNG
        # when a young collection last ran (ours; or the collector's own, seen as a young count
        # lower than at our last look) and the young count then
        self._collected = clock()
        self._count = 0
        self.timed_collections = 0

    def tick(self) -> None:
        """The worker's main loop, every turn: a young collection if none ran for
        YOUNG_EVERY_SECS and something was allocated since (called from one thread)."""
        now = self._clock()
        count = self._get_count()[0]
        if count < self._count:  # the collector ran by itself since the last look
            self._collected = now
        self._count = count
        if now - self._collected < YOUNG_EVERY_SECS:
            return
        self._collected = now
        if count:
            self._collect(0)
            self.timed_collections += 1
            self._count = self._get_count()[0]

    def install(self) -> None:
        """Set the thresholds without windows (the worker does this at start)."""
        with self._lock:
            self.young = young_threshold(sum(self._held.values()))
            self._set(self.young, MIDDLE, OLD)

    def windows_hold(self, key: object, held: int) -> None:
        """The windows of executor `key` now hold `held` tuples (0: it stopped)."""
        with self._lock:
            if held:
                if held <= self._held.get(key, 0):
                    return
                self._held[key] = held
            elif self._held.pop(key, None) is None:
                return
            want = young_threshold(sum(self._held.values()))
            if want != self.young:
                self.young = want
                self._set(want, MIDDLE, OLD)


# the process's policy (the collector is per process)
POLICY = GcPolicy()

__all__ = ["MIDDLE", "OLD", "PER_HELD", "POLICY", "YOUNG", "YOUNG_EVERY_SECS", "GcPolicy", "young_threshold"]
