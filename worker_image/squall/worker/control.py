"""Sorting a batch of acker messages by where each one goes: the per-item part of the worker's
control path (`runtime.Worker.handle_control`), compiled with mypyc (setup.py's list).

A worker hosting an acker receives one message per ack of every tree it keeps, from its own
executors and from its peers' receive frames; classifying them one by one in the interpreter
was a fifth of that worker's GIL time in the windowed word count (docs/performance.md). This
module keeps that loop free of the worker's state: it is handed the batch and the dicts it
reads, and fills the buckets it is given. It is plain Python too (`SQUALL_PURE=1`, or not built).

Messages are `[kind, task, root, val, extra]` (`squall.wire`). The buckets:
- `mine`: messages for an acker task of this worker (a key of `ledgers`), by task, in order;
- `done`: completions (`DONE`) for spout tasks, in order;
- `signals`: backpressure signals (`BACKPRESSURE`), in order;
- `remote`: messages for an acker task placed on another worker, by that worker's slot (from
  `task_slot`), in order. A task in neither map is counted as dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeVar

from squall.acker import AckerLedger

S = TypeVar("S")

# squall.wire's kinds, here as constants mypyc inlines (a unit test checks they are the wire's)
INIT: Final = 0
ACK: Final = 1
FAIL: Final = 2
DONE: Final = 3
BACKPRESSURE: Final = 4


def well_formed(it: Any) -> bool:
    """A network item's shape: a list of five ints, its kind one of the wire's."""
    if type(it) is not list or len(it) != 5:
        return False
    k = it[0]
    return (
        type(k) is int
        and 0 <= k <= BACKPRESSURE
        and type(it[1]) is int
        and type(it[2]) is int
        and type(it[3]) is int
        and type(it[4]) is int
    )


def sort_control(
    items: list[Any],
    trusted: bool,
    ledgers: dict[int, AckerLedger],
    task_slot: Mapping[int, S],
    mine: dict[int, list[list[int]]],
    done: list[list[int]],
    signals: list[list[int]],
    remote: dict[S, list[list[int]]],
) -> tuple[int, int]:
    """Sort `items` into the buckets; returns (malformed items skipped, items for no known task).
    Items from the network (`trusted=False`) are shape-checked first (see `well_formed`)."""
    bad = 0
    dropped = 0
    last_task = 0
    last: list[list[int]] | None = None  # the bucket of `last_task` (acks mostly come in runs)
    for it in items:
        if not trusted and not well_formed(it):
            bad += 1
            continue
        kind: int = it[0]
        if kind == DONE:
            done.append(it)
            continue
        if kind == BACKPRESSURE:
            signals.append(it)
            continue
        task: int = it[1]
        if last is not None and task == last_task:
            last.append(it)
            continue
        got = mine.get(task)
        if got is None:
            if task in ledgers:
                got = [it]
                mine[task] = got
            else:
                slot = task_slot.get(task)
                if slot is None:
                    dropped += 1
                    last = None
                    continue
                got = remote.get(slot)
                if got is None:
                    got = [it]
                    remote[slot] = got
                else:
                    got.append(it)
                last_task = task
                last = got
                continue
        else:
            got.append(it)
        last_task = task
        last = got
    return bad, dropped


__all__ = ["sort_control", "well_formed"]
