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
from collections.abc import Callable, Sequence
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


def _fields(tasks: Sequence[int], indexes: Sequence[int]) -> Chooser:
    singles = [[t] for t in sorted(tasks)]
    n = len(singles)
    if len(indexes) == 1:
        i = indexes[0]

        def choose_one(values: Sequence[Any]) -> list[int]:
            v = values[i]
            return singles[(zlib.crc32(v.encode()) if type(v) is str else stable_hash(v)) % n]

        return choose_one
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
) -> Chooser | None:
    """A chooser for one consumer of a stream, or None for direct grouping (the emitter picks)."""
    rng = rng or random.Random()
    if grouping in (Grouping.SHUFFLE, Grouping.NONE):
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
