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
- `signals`: backpressure signals and load announcements (`BACKPRESSURE`, `LOAD`), in order;
- `remote`: messages for an acker task placed on another worker, by that worker's slot (from
  `task_slot`), in order. A task in neither map is counted as dropped.

The per-tree parts of the same path are here too: `route_done` sends the ledgers' completions
on to the spouts they are for, `group_inits` sorts a spout's new trees by acker task.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, TypeVar

from squall.acker import AckerLedger

S = TypeVar("S")

# squall.wire's kinds, here as constants mypyc inlines (a unit test checks they are the wire's)
INIT: Final = 0
ACK: Final = 1
FAIL: Final = 2
DONE: Final = 3
BACKPRESSURE: Final = 4
LOAD: Final = 1000


def well_formed(it: Any) -> bool:
    """A network item's shape: a list of five ints, its kind one of the wire's."""
    if type(it) is not list or len(it) != 5:
        return False
    k = it[0]
    return (
        type(k) is int
        and (0 <= k <= BACKPRESSURE or k == LOAD)
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
        if kind == BACKPRESSURE or kind == LOAD:
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


def route_done(
    done: list[list[int]],
    own_tasks: Collection[int],
    spout_inbox: Mapping[int, Any],
    tree_done: Mapping[int, Any],
    task_slot: Mapping[int, S],
    here: S,
    retiring: Mapping[int, Any],
    own: list[list[int]],
    local: dict[Any, list[list[int]]],
    trees: dict[Any, list[list[int]]],
    remote: dict[S, list[list[int]]],
) -> int:
    """Completions (`DONE`, one per finished tree) -> where their spout task is: `own` for the
    calling spout executor's tasks (`own_tasks`), `local` by the inbox of a spout executor of
    this worker (`spout_inbox`), `trees` by the completion queue of a windowed bolt of this
    worker whose windows' own trees they are (`tree_done`), `remote` by the slot of the worker
    it runs in (`task_slot`).
    A completion of a tree that a retiring spout executor (`retiring`: task -> executor, its
    tasks removed by a hot update) still holds goes to that executor's inbox. Returns how many
    have nowhere to go (no such task, or one placed here without an executor)."""
    dropped = 0
    last_t = 0
    last: list[list[int]] | None = None  # the bucket of `last_t` (completions come in runs)
    for it in done:
        t = it[1]
        if retiring:
            old = retiring.get(t)
            if old is not None and old.has_root(t, it[2]):
                # its tasks may already have a new executor, here or elsewhere
                last = None
                got = local.get(old.inbox)
                if got is None:
                    local[old.inbox] = [it]
                else:
                    got.append(it)
                continue
        if last is not None and t == last_t:
            last.append(it)
            continue
        if t in own_tasks:
            last = own
        else:
            inbox = spout_inbox.get(t)
            if inbox is not None:
                last = local.get(inbox)
                if last is None:
                    last = local[inbox] = []
            elif (inbox := tree_done.get(t)) is not None:
                last = trees.get(inbox)  # a windowed bolt's own tree (a window's)
                if last is None:
                    last = trees[inbox] = []
            else:
                slot = task_slot.get(t)
                if slot is None or slot == here:
                    dropped += 1
                    last = None
                    continue
                last = remote.get(slot)
                if last is None:
                    last = remote[slot] = []
        last_t = t
        last.append(it)
    return dropped


def group_inits(
    inits: list[tuple[int, int, int]], acker_tasks: Sequence[int]
) -> dict[int, list[tuple[int, int, int]]]:
    """New trees `(root, xor, spout task)` by their acker task (`root % number of ackers`)."""
    n = len(acker_tasks)
    by_task: dict[int, list[tuple[int, int, int]]] = {}
    for entry in inits:
        t = acker_tasks[entry[0] % n]
        got = by_task.get(t)
        if got is None:
            by_task[t] = [entry]
        else:
            got.append(entry)
    return by_task


__all__ = ["group_inits", "route_done", "sort_control", "well_formed"]
