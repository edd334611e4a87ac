"""How busy this worker is, and how busy its peers say they are: the CPU half of the load-aware
shuffle (`squall.groupings.LoadAwareShuffle`).

A Squall worker is one Python process: its engine loop steps every executor on one thread, under
one GIL, so the process saturates at about one core however many the machine has, while its
queues can stay empty (a spout's worker that keeps every sentence local). Storm's
load (queue population) cannot see that; this module measures it.

The measure, `busy`: the share of the last interval during which a Python thread of this
process ran or was ready to run, summed over the threads, capped at 1.0. Per thread it reads
the kernel's schedstat (`/proc/self/task/<tid>/schedstat`: nanoseconds on a CPU, nanoseconds
waiting in the run queue). Why not the process's CPU time: it counts zmq's I/O threads, which
run outside the GIL (a worker can use 1.3 cores with its GIL at 0.9, or 0.9 with its GIL
saturated), and on a machine whose cores are shared it reads low exactly when the worker is
starved; a GIL holder waiting for a core is still a saturated GIL. Threads waiting for the GIL
sleep on a lock, so they add nothing. zmq's own threads (named `ZMQbg/...`) are left out.
Without schedstat (another kernel or OS) it falls back to the process's CPU time.

Each worker announces every local task's load to its peers about once a second (Storm 2's
worker does the same with its receive queues' population: `WorkerState.refreshLoad` and the
messaging server's `sendLoadMetrics`): a control item `[LOAD, task, busy permille, inbox fill
permille, window ms]`, the last the milliseconds the busy fraction was measured over (0 from a
worker that does not say: taken as ANNOUNCE_SECS). Receivers keep what they heard for
ANNOUNCE_TTL_SECS; an announcement that stopped coming counts as unknown (0.0), which is Storm's
view of a remote task it has no metrics for. With each busy fraction a receiver knows when its
measure began (heard - window), so a shuffle can wait for measures taken after its last step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from squall import wire

ANNOUNCE_SECS = 1.0  # a worker measures its load and tells its peers this often
ANNOUNCE_TTL_SECS = 3.5  # an announcement is forgotten after this long (three missed)
MIN_WINDOW_SECS = 0.25  # a busy fraction is measured over at least this long
_TASKS = "/proc/self/task"


def python_thread_secs() -> float | None:
    """Seconds this process's threads other than zmq's have spent on a CPU or ready to run
    (schedstat), or None when the kernel does not say."""
    total = 0
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/comm") as f:
                if f.read().startswith("ZMQbg"):
                    continue
            with open(f"{_TASKS}/{tid}/schedstat") as f:
                on_cpu, waiting, _slices = f.read().split()
        except (OSError, ValueError):
            continue  # the thread ended between the listing and the read, or no schedstat
        total += int(on_cpu) + int(waiting)
    return total / 1e9 if total else None


def process_cpu_secs() -> float:
    return time.process_time()


class BusyMeter:
    """The share of wall time this process's Python threads ran or were ready to run since the
    previous `sample` (0.0 to 1.0). The reader and the clock are injected for tests."""

    def __init__(
        self,
        read: Callable[[], float | None] = python_thread_secs,
        clock: Callable[[], float] = time.monotonic,
        fallback: Callable[[], float] = process_cpu_secs,
        warmup: int = 0,
    ) -> None:
        self.read = read
        self.warmup = warmup
        self.clock = clock
        self.fallback = fallback
        self.busy = 0.0
        self.since = clock()  # when the window `busy` was measured over began
        self._use_fallback = read() is None
        self._last = (clock(), self._secs())

    def _secs(self) -> float:
        if not self._use_fallback:
            got = self.read()
            if got is not None:
                return got
            self._use_fallback = True
        return self.fallback()

    def sample(self) -> float:
        """Busy over the time since the previous sample; a sample less than MIN_WINDOW_SECS
        after it keeps the previous value and window (a worker's first announcement, right
        after its start, would otherwise read a few busy milliseconds as a saturated GIL). The
        first `warmup` windows are not reported either (0.0): they hold the worker's start
        (executors preparing, connections), not its share of the tuples."""
        now = self.clock()
        then, before = self._last
        if now - then < MIN_WINDOW_SECS:
            return self.busy
        secs = self._secs()
        self._last = (now, secs)
        if self.warmup > 0:
            self.warmup -= 1
            return self.busy
        self.busy = min(1.0, max(0.0, (secs - before) / (now - then)))
        self.since = then
        return self.busy


@dataclass
class PeerLoads:
    """What this worker knows of its own and its peers' loads, for its executors' shuffles.

    `busy_here` and `here_since` (when its measure began) are written by the worker's measuring
    loop, `heard` by its control receiver; executors only read (a float, a tuple, a dict entry:
    each read is atomic under the GIL; `busy_here` is written last)."""

    busy_here: float = 0.0
    here_since: float = 0.0
    # remote task -> (busy, inbox fill, heard until, measure began: monotonic)
    heard: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)

    def hear(self, items: Iterable[list[int]], now: float) -> None:
        """Apply LOAD items from a peer (already shape-checked: five ints)."""
        until = now + ANNOUNCE_TTL_SECS
        for it in items:
            window = it[4] / 1000.0 if 0 < it[4] <= 60_000 else ANNOUNCE_SECS
            self.heard[it[1]] = (_fraction(it[2]), _fraction(it[3]), until, now - window)

    def of(self, task: int, now: float) -> tuple[float, float]:
        """(busy, inbox fill) a peer last announced for `task`; (0.0, 0.0) unknown or stale."""
        got = self.heard.get(task)
        if got is None or got[2] < now:
            return 0.0, 0.0
        return got[0], got[1]

    def since(self, task: int, now: float) -> float | None:
        """When the measure of the busy fraction last announced for `task` began; None when
        unknown or stale."""
        got = self.heard.get(task)
        if got is None or got[2] < now:
            return None
        return got[3]


def _fraction(permille: int) -> float:
    return min(1000, max(0, permille)) / 1000.0


def load_items(busy: float, inbox_fill: Mapping[int, float], window: float = 0.0) -> list[list[int]]:
    """The announcement of this worker's tasks: `[LOAD, task, busy, inbox fill, window]`, busy
    and fill in permille, the seconds `busy` was measured over in milliseconds (0: not said)."""
    b = round(1000 * min(1.0, max(0.0, busy)))
    w = round(1000 * min(60.0, max(0.0, window)))
    return [[wire.LOAD, t, b, round(1000 * min(1.0, max(0.0, f))), w] for t, f in sorted(inbox_fill.items())]


__all__ = ["ANNOUNCE_SECS", "ANNOUNCE_TTL_SECS", "MIN_WINDOW_SECS", "BusyMeter", "PeerLoads", "load_items", "python_thread_secs"]
