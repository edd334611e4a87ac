"""Where every task of a topology lives, as one immutable snapshot per assignment, and the
sorting of received tuples by where they go (`sort_data`)."""

from __future__ import annotations

import queue
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from squall.models.cluster import WorkerSlot
from squall.plan import TopologyPlan

# an executor's bounded inbox of batches (bolts: tuples; spouts: acker completions)
Inbox: TypeAlias = "queue.Queue[list[list[Any]]]"


@dataclass(frozen=True)
class Routing:
    """A snapshot of where every task lives, swapped whole when the assignment changes.

    Readers (the receive threads, every executor) take the current snapshot at the start of a
    turn and re-read it when it is no longer `worker.routing`; nothing in it is ever mutated."""

    plan: TopologyPlan
    local_tasks: frozenset[int]
    # every task -> the local executor inbox, or the remote slot
    task_dest: Mapping[int, Any]
    task_slot: Mapping[int, WorkerSlot]
    spout_inbox: Mapping[int, Inbox]
    # every live local inbox -> the tasks it serves (backpressure is announced per task)
    inbox_tasks: Mapping[Inbox, tuple[int, ...]] = field(default_factory=dict)
    # every slot of the assignment: tuples for a slot outside it have nowhere to go
    slots: frozenset[WorkerSlot] = frozenset()
    # a local windowed bolt's task -> the queue of completions of its windows' own trees
    tree_done: Mapping[int, Inbox] = field(default_factory=dict)


def sort_data(
    items: list[Any],
    checked: bool,
    task_dest: Mapping[int, Any],
    here: WorkerSlot,
    groups: dict[Any, list[list[Any]]],
) -> tuple[int, int]:
    """The per-tuple part of the worker's data receive path (`Worker._dispatch_data`): sort the
    tuples of a frame into `groups` by destination (a local inbox, or the slot of the worker a
    task moved to), in order, the tuples themselves (not copies). Items from the network
    (`checked=False`) are shape-checked in the same pass (`squall.wire.check_tuple`: a list
    `[int, int, str, list, dict of int -> int | None]`). Returns (malformed items skipped,
    tuples for a task with nowhere to go: unknown, or one whose slot is this worker's but
    which has no inbox here). Compiled with the hot path (setup.py)."""
    bad = 0
    dropped = 0
    last_task = 0
    last: list[list[Any]] | None = None  # the group of `last_task` (frames come in runs)
    for it in items:
        if not checked:
            if not (
                type(it) is list
                and len(it) == 5
                and type(it[0]) is int
                and type(it[1]) is int
                and type(it[2]) is str
                and type(it[3]) is list
            ):
                bad += 1
                continue
            anchors = it[4]
            if anchors is not None:
                # anchors come from the network: root and edge ids must be ints
                if type(anchors) is not dict:
                    bad += 1
                    continue
                ok = True
                for k, v in anchors.items():
                    if type(k) is not int or type(v) is not int:
                        ok = False
                        break
                if not ok:
                    bad += 1
                    continue
        t: int = it[0]
        if last is not None and t == last_task:
            last.append(it)
            continue
        key = task_dest.get(t)
        if key is None or key == here:
            dropped += 1
            last = None
            continue
        got = groups.get(key)
        if got is None:
            got = [it]
            groups[key] = got
        else:
            got.append(it)
        last_task = t
        last = got
    return bad, dropped
