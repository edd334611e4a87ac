"""Where every task of a topology lives, as one immutable snapshot per assignment."""

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
