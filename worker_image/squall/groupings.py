"""Stream groupings: which target tasks get an emitted tuple.

Each grouping becomes a chooser, `values -> list of task ids`, built once per (stream, consumer)
when the worker's routing changes and called per tuple, so choosers return pre-built lists and
allocate nothing on the hot path. Hashes must agree across processes (Python's `hash` of a str
does not), so fields groupings use CRC-32 of a canonical encoding.
"""

from __future__ import annotations

import importlib
import itertools
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from squall.models.v1alpha1 import Grouping

Chooser = Callable[[Sequence[Any]], list[int]]


class CustomStreamGrouping(Protocol):
    """Storm's CustomStreamGrouping: `prepare` once, then `choose_tasks` per tuple."""

    def prepare(self, context: Any, stream: tuple[str, str], target_tasks: list[int]) -> None: ...
    def choose_tasks(self, task_id: int, values: Sequence[Any]) -> list[int]: ...


def stable_hash(value: Any) -> int:
    """A hash that every process computes alike (unlike `hash` of str under hash randomisation)."""
    if isinstance(value, str):
        return zlib.crc32(value.encode())
    if isinstance(value, bytes):
        return zlib.crc32(value)
    if isinstance(value, (list, tuple)):
        # element-wise, so a tuple and the list msgpack turns it into hash alike
        h = 1
        for v in value:
            h = (h * 31 + stable_hash(v)) & 0xFFFFFFFF
        return h
    if isinstance(value, bool) or not isinstance(value, int):
        return zlib.crc32(repr(value).encode())
    try:
        return zlib.crc32(value.to_bytes(16, "little", signed=True))
    except OverflowError:  # beyond 128 bits
        return zlib.crc32(repr(value).encode())


def fields_hash(values: Sequence[Any], indexes: Sequence[int]) -> int:
    if len(indexes) == 1:
        return stable_hash(values[indexes[0]])
    h = 0
    for i in indexes:
        h = (h * 31 + stable_hash(values[i])) & 0xFFFFFFFF
    return h


def _shuffle(tasks: Sequence[int], rng: random.Random) -> Chooser:
    if len(tasks) == 1:
        only = [tasks[0]]
        return lambda _values: only
    singles = [[t] for t in tasks]
    rng.shuffle(singles)
    nxt = itertools.cycle(singles).__next__
    return lambda _values: nxt()


# Storm 2's LoadAwareShuffleGrouping: scopes from nearest to farthest (Squall has no racks)
WORKER_LOCAL, HOST_LOCAL, EVERYTHING = 0, 1, 2
SCOPE_NAMES = ("worker-local", "host-local", "everything")
RING = 1000  # slots in the ring of choices (Storm's CAPACITY)
MAX_WEIGHT = 100
# Storm's defaults.yaml: topology.localityaware.higher.bound / .lower.bound
HIGHER_BOUND = 0.8
LOWER_BOUND = 0.2
# Squall's CPU side: a worker is one Python process, one GIL, so a busy worker is loaded however
# empty its queues are. Targets' workers whose busy fractions (0.0 idle to 1.0 a saturated
# GIL) differ by less than CPU_BAND are even (noise, and the hysteresis that keeps the split
# still once balanced); past it, a busier one's CPU factor is multiplied by 1 - CPU_GAIN x the
# difference above the band (at least CPU_MIN_STEP) in one step, and the next step waits for
# busy fractions measured wholly after it (the lag of the measure and of the announcement)
CPU_BAND = 0.1
CPU_GAIN = 3.0
CPU_MIN_STEP = 0.25  # one step cuts a CPU factor to no less than a quarter of what it was
CPU_FLOOR = 0.02  # nor below this (its worker keeps a trickle, so its busy fraction stays known)


class LoadAwareShuffle:
    """Storm 2's default shuffle (`LoadAwareShuffleGrouping`), locality first and load weighted.

    Targets are grouped by scope: in the emitter's worker, on its node, anywhere. Tuples go to
    the targets of the current scope and every nearer one. `refresh(load)` (the executor calls it
    about once a second with each target's load, 0.0 idle to 1.0 full) widens the scope when the
    scope's average load is above `higher_bound` and narrows it again when the nearer scope's
    average is below `lower_bound`; within the scope, a target whose load is within 0.05 of the
    least loaded one gains weight slowly (+1 up to 100), others lose it fast (-10). Per tuple
    the chooser only steps through a ring of 1000 pre-built choices drawn by weight and
    shuffled, so it costs what uniform shuffle does.

    Squall adds the CPU of the targets' workers (`refresh(load, cpu, ...)`): a Python worker
    whose GIL is saturated cannot take more work however empty its queues are. The scope
    follows each target's `max(load, cpu)`. Within the scope each target also has a CPU factor
    (1.0 at most; the ring is drawn by weight x factor): among targets whose queues are even,
    one whose worker is busier than the least busy one by more than CPU_BAND has its factor cut
    in one step in proportion to the excess, and the factors then stay put until busy fractions
    measured wholly after that step arrive (`now` and `measured_since`: the measure covers the
    last second and a peer's announcement comes up to a second later, so acting on older ones
    would cut again for an imbalance already corrected, and swing the share back and forth).
    Within the band the factors do not move (Storm's +1 recovery is for queue penalties only),
    so a split that evens the workers stays. A target whose worker's busy fraction is not known
    (not announced yet) holds the factors too. A scope change that brings new targets starts
    over from an even split, as Storm's weights do, and its first step waits for busy fractions
    measured on that split (those at hand were measured with the old scope); one that brings none (a single node's HOST_LOCAL and
    EVERYTHING) keeps the weights and factors."""

    def __init__(
        self,
        tasks: Sequence[int],
        scope_of: Mapping[int, int],
        rng: random.Random,
        higher_bound: float = HIGHER_BOUND,
        lower_bound: float = LOWER_BOUND,
    ) -> None:
        if not tasks:
            raise ValueError("a shuffle needs at least one target task")
        self.tasks = sorted(tasks)
        self.scope_of = {t: scope_of.get(t, EVERYTHING) for t in self.tasks}
        self.rng = rng
        self.higher_bound = higher_bound
        self.lower_bound = lower_bound
        self.weight = dict.fromkeys(self.tasks, MAX_WEIGHT)
        self.cpu_factor = dict.fromkeys(self.tasks, 1.0)
        # when the CPU factors last moved (the caller's clock), or None: the next step waits for
        # busy fractions measured since then
        self.cpu_moved_at: float | None = None
        self.singles = {t: [t] for t in self.tasks}
        self.scope = WORKER_LOCAL
        self.ring: list[list[int]] = []
        self._next: Callable[[], list[int]] = iter(()).__next__
        self.refresh(None)

    def __call__(self, _values: Sequence[Any]) -> list[int]:
        return self._next()

    def in_scope(self, scope: int) -> list[int]:
        return [t for t in self.tasks if self.scope_of[t] <= scope]

    def share(self, t: int) -> float:
        """The fraction of the ring (of the tuples) that goes to task `t`."""
        return sum(1 for c in self.ring if c[0] == t) / len(self.ring)

    def _transition(self, load: Mapping[int, float] | None) -> int:
        scope = self.scope
        while not self.in_scope(scope):
            scope += 1  # nothing that near: EVERYTHING always has every target
        if load is None:
            return scope
        targets = self.in_scope(scope)
        avg = sum(load.get(t, 0.0) for t in targets) / len(targets)
        if avg > self.higher_bound and scope < EVERYTHING:
            return scope + 1
        if avg < self.lower_bound and scope > WORKER_LOCAL and self.in_scope(scope - 1):
            return scope - 1
        return scope

    def refresh(
        self,
        load: Mapping[int, float] | None,
        cpu: Mapping[int, float] | None = None,
        now: float | None = None,
        measured_since: float | None = None,
    ) -> None:
        """Re-weigh the targets from their loads (None: no load known yet) and, when given,
        their workers' busy fractions (`cpu`, 0.0 to 1.0; for the scope a target without one
        counts as idle, and it holds the CPU factors), and rebuild the ring. `now` (any
        monotonic clock) and `measured_since` (when the oldest of the `cpu` measures began; None:
        some target's is unknown) let a CPU step wait for measures taken after the previous
        one; without `now` every refresh may step."""
        busy = load
        if load is not None and cpu is not None:
            busy = {t: max(load.get(t, 0.0), cpu.get(t, 0.0)) for t in self.tasks}
        scope = self._transition(busy)
        if scope != self.scope:
            if self.in_scope(scope) != self.in_scope(self.scope):
                self.weight = dict.fromkeys(self.tasks, MAX_WEIGHT)
                self.cpu_factor = dict.fromkeys(self.tasks, 1.0)
                # the busy fractions at hand were measured on the old scope's split: the first
                # step waits for ones measured on this one, as after a step
                self.cpu_moved_at = now
            self.scope = scope
        targets = self.in_scope(scope)
        even = targets
        if load is not None:
            least = min(load.get(t, 0.0) for t in targets)
            even = []
            for t in targets:
                if load.get(t, 0.0) > least + 0.05:
                    self.weight[t] = max(0, self.weight[t] - 10)
                else:
                    self.weight[t] = min(MAX_WEIGHT, self.weight[t] + 1)
                    even.append(t)
            if cpu is not None and len(targets) > 1:
                self._cpu_step(targets, even, cpu, now, measured_since)
        self._build(targets)

    def _cpu_step(self, targets: list[int], even: list[int], cpu: Mapping[int, float],
                  now: float | None, measured_since: float | None) -> None:
        if any(t not in cpu for t in targets):
            return  # some worker's busy fraction is not known yet
        if now is not None and self.cpu_moved_at is not None and (
            measured_since is None or measured_since < self.cpu_moved_at
        ):
            return  # the last step's effect is not measured yet
        least = min(cpu[t] for t in targets)
        factor = self.cpu_factor
        moved = False
        for t in even:
            excess = cpu[t] - least - CPU_BAND
            if excess > 0:
                factor[t] = max(CPU_FLOOR, factor[t] * max(CPU_MIN_STEP, 1.0 - CPU_GAIN * excess))
                moved = True
        if moved:
            top = max(factor[t] for t in targets)
            for t in targets:
                factor[t] = max(CPU_FLOOR, factor[t] / top)
            self.cpu_moved_at = now

    def _build(self, targets: list[int]) -> None:
        weight = {t: self.weight[t] * self.cpu_factor[t] for t in targets}
        total = sum(weight.values())
        ring: list[list[int]] = []
        if total > 0:
            for t in targets:
                ring.extend([self.singles[t]] * int(weight[t] / total * RING))
            while len(ring) < RING:  # rounding left some slots: copies of random ones
                ring.append(ring[self.rng.randrange(len(ring))] if ring else self.singles[targets[0]])
        else:
            ring = [self.singles[targets[i % len(targets)]] for i in range(RING)]
        self.rng.shuffle(ring)
        self.ring = ring
        self._next = itertools.cycle(ring).__next__


FIELDS_CACHE = 16384  # str keys a one-field chooser remembers the task of (cleared when full)


class OneFieldChooser:
    """Fields grouping on one field. A str key's task is remembered (a dict lookup on the str's
    cached hash instead of encoding it and a CRC-32 per tuple: about half the chooser's cost);
    the memory is bounded by FIELDS_CACHE and starts over when full. Only str keys are
    remembered: no value of another type equals a str, so a remembered task is always the one
    `stable_hash` gives."""

    def __init__(self, tasks: Sequence[int], index: int) -> None:
        self.singles = [[t] for t in sorted(tasks)]
        self.n = len(self.singles)
        self.index = index
        self.known: dict[str, list[int]] = {}

    def __call__(self, values: Sequence[Any]) -> list[int]:
        v = values[self.index]
        if type(v) is str:
            known = self.known
            got = known.get(v)
            if got is None:
                got = self.singles[zlib.crc32(v.encode()) % self.n]
                if len(known) >= FIELDS_CACHE:
                    known.clear()
                known[v] = got
            return got
        return self.singles[stable_hash(v) % self.n]


def _fields(tasks: Sequence[int], indexes: Sequence[int]) -> Chooser:
    if len(indexes) == 1:
        return OneFieldChooser(tasks, indexes[0])
    singles = [[t] for t in sorted(tasks)]
    n = len(singles)
    return lambda values: singles[fields_hash(values, indexes) % n]


class PartialKeyChooser:
    """Partial key grouping (Nasir et al.): each key has two candidate tasks and goes to the one
    this emitter has sent fewer tuples to, which splits hot keys over two tasks."""

    def __init__(self, tasks: Sequence[int], indexes: Sequence[int]) -> None:
        self.tasks = sorted(tasks)
        self.indexes = tuple(indexes)
        self.sent = [0] * len(self.tasks)
        self.singles = [[t] for t in self.tasks]

    def __call__(self, values: Sequence[Any]) -> list[int]:
        n = len(self.tasks)
        h = fields_hash(values, self.indexes)
        a = h % n
        b = zlib.crc32(h.to_bytes(4, "little"), 0x9E3779B9) % n
        pick = a if self.sent[a] <= self.sent[b] else b
        self.sent[pick] += 1
        return self.singles[pick]


def load_class(path: str) -> Any:
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def make_chooser(
    grouping: Grouping,
    tasks: Sequence[int],
    *,
    field_indexes: Sequence[int] = (),
    local_tasks: Sequence[int] = (),
    custom_class: str | None = None,
    context: Any = None,
    stream: tuple[str, str] = ("", "default"),
    source_task: int = 0,
    rng: random.Random | None = None,
    load_aware: Mapping[int, int] | None = None,
) -> Chooser | None:
    """A chooser for one consumer of a stream, or None for direct grouping (the emitter picks).

    `load_aware` (each target task's scope: WORKER_LOCAL, HOST_LOCAL or EVERYTHING) makes
    shuffle and none Storm 2's load-aware shuffle (`LoadAwareShuffle`); without it they are
    uniform round robins in a random order."""
    rng = rng or random.Random()
    if grouping in (Grouping.SHUFFLE, Grouping.NONE):
        if load_aware is not None and len(tasks) > 1:
            return LoadAwareShuffle(tasks, load_aware, rng)
        return _shuffle(tasks, rng)
    if grouping is Grouping.LOCAL_OR_SHUFFLE:
        local = [t for t in tasks if t in set(local_tasks)]
        return _shuffle(local or tasks, rng)
    if grouping is Grouping.FIELDS:
        return _fields(tasks, field_indexes)
    if grouping is Grouping.PARTIAL_KEY:
        return PartialKeyChooser(tasks, field_indexes)
    if grouping is Grouping.ALL:
        everyone = sorted(tasks)
        return lambda _values: everyone
    if grouping is Grouping.GLOBAL:
        lowest = [min(tasks)]
        return lambda _values: lowest
    if grouping is Grouping.DIRECT:
        return None
    if grouping is Grouping.CUSTOM:
        if not custom_class:
            raise ValueError(f"custom grouping on {stream[0]}:{stream[1]} needs customClass")
        impl: CustomStreamGrouping = load_class(custom_class)()
        impl.prepare(context, stream, sorted(tasks))
        valid = set(tasks)

        def choose_custom(values: Sequence[Any]) -> list[int]:
            chosen = impl.choose_tasks(source_task, values)
            bad = [t for t in chosen if t not in valid]
            if bad:
                raise ValueError(
                    f"custom grouping {custom_class} chose tasks {bad} outside {sorted(valid)}"
                )
            return chosen

        return choose_custom
    raise ValueError(f"unknown grouping {grouping!r}")
