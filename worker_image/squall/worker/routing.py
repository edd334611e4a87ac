"""Where every task of a topology lives, as one immutable snapshot per assignment, and the
sorting of received tuples by where they go (`sort_data`)."""

from __future__ import annotations

import queue
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.models.cluster import WorkerSlot
from squall.plan import TopologyPlan

# how often a blocked `Inbox.put` looks for room again (nobody signals room: a consumer's get
# stays one C call, and only a backpressured producer pays for the wait)
PUT_POLL_SECS = 0.0005


class Inbox:
    """An executor's bounded inbox of batches (bolts: tuples; spouts: acker completions; a
    windowed bolt's completions of its own trees), first in, first out.

    A `queue.SimpleQueue` with the bound kept by its length: a put and a get are one C call each
    and a get that waits is woken by C (a lock release), not by `queue.Queue`'s Python-level
    Condition (its put, notify and get cost ~0.9 us of interpreted locking per batch). The bound
    is checked before the put, so producers racing past the check can overshoot it by at most
    (number of producers - 1) batches: an inbox holds at most `maxsize + producers - 1`, still
    bounded (its producers are the worker's receive and control threads and its upstream
    executors). Nothing signals room: a blocked `put` looks again every `PUT_POLL_SECS` until
    its timeout, as a bolt blocked on a backpressured remote task does (`Executor.flush`).

    The same calls as a `queue.Queue` (`put_nowait` and `put` raise `queue.Full`, `get` and
    `get_nowait` raise `queue.Empty`, `qsize`, `empty`, `maxsize`), plus `offer`, a put that
    returns False instead of raising. The load-aware shuffle reads its fill as
    `qsize() / maxsize`. Compiled with the hot path (setup.py)."""

    def __init__(self, maxsize: int) -> None:
        if maxsize <= 0:
            raise ValueError("an Inbox is bounded: maxsize must be positive")
        self.maxsize = maxsize
        self._q: queue.SimpleQueue[list[list[Any]]] = queue.SimpleQueue()

    def offer(self, item: list[list[Any]]) -> bool:
        """Put without waiting; False when full."""
        q = self._q
        if q.qsize() >= self.maxsize:
            return False
        q.put(item)
        return True

    def force(self, item: list[list[Any]]) -> None:
        """Put past the bound: for what is bounded elsewhere (a spout's completions: at most one
        per pending tree) and must not wait (the engine loop would wait on itself)."""
        self._q.put(item)

    def put_nowait(self, item: list[list[Any]]) -> None:
        if not self.offer(item):
            raise queue.Full

    def put(self, item: list[list[Any]], block: bool = True, timeout: float | None = None) -> None:
        """Put, waiting for room up to `timeout` seconds (None: until there is room)."""
        q = self._q
        if q.qsize() < self.maxsize:
            q.put(item)
            return
        if not block:
            raise queue.Full
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            time.sleep(PUT_POLL_SECS)
            if q.qsize() < self.maxsize:
                q.put(item)
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Full

    def get(self, block: bool = True, timeout: float | None = None) -> list[list[Any]]:
        return self._q.get(block, timeout)

    def get_nowait(self) -> list[list[Any]]:
        return self._q.get_nowait()

    def qsize(self) -> int:
        return self._q.qsize()

    def empty(self) -> bool:
        return self._q.empty()

    def full(self) -> bool:
        return self._q.qsize() >= self.maxsize


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
