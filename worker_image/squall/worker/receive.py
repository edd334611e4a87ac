"""What the engine loop does with the data port: tuples dispatched into their executors' inboxes
(parked per inbox when one is full, forwarded when their task moved), and the announcements that
follow from it (backpressured tasks, this worker's load). Functions of the worker's state.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from squall import wire
from squall.worker import acking
from squall.worker.load import ANNOUNCE_SECS, load_items
from squall.worker.routing import Inbox, Routing, sort_data
from squall.worker.workerstate import (
    BP_REFRESH_SECS,
    PARK_LIMIT,
    WorkerState,
)

log = logging.getLogger("squall.worker")


def receive_control(w: WorkerState, items: list[list[int]], peer: str | None) -> None:
    """Acker messages and signals from the control port; `peer`: the sender's address on
    plain TCP (None under CURVE, where every peer is one of the topology's workers)."""
    acking.handle_control(w, items, None, trusted=False, peer=peer)


def data_turn(w: WorkerState, now: float) -> tuple[bool, int]:
    """Each turn of the engine loop, before it reads the data port: move parked batches into
    inboxes that have room again, re-dispatch those parked for an inbox that left the
    routing, and announce which local tasks are backpressured. Returns whether the port may
    be read (no inbox past PARK_LIMIT) and how long the loop may sleep (ms). `now`: the loop's
    clock (monotonic)."""
    routing = w.routing
    w.recv_routing = routing
    parked = w.parked_batches
    if parked:
        for inbox in list(parked):
            backlog = parked[inbox]
            if inbox not in routing.inbox_tasks:
                del parked[inbox]
                while backlog:
                    dispatch_data(w, backlog.popleft(), checked=True)
                continue
            while backlog and inbox.offer(backlog[0]):
                backlog.popleft()
            if not backlog:
                del parked[inbox]
    bp = {t for inbox in parked for t in routing.inbox_tasks.get(inbox, ())}
    # the time since the last turn counts for the tasks that were backpressured then (until
    # this turn found them room), so one parked for a single turn is counted too
    if w.bp_tasks:
        held, bp_secs = now - w.bp_counted_at, w.bp_secs
        for t in w.bp_tasks:
            bp_secs[t] = bp_secs.get(t, 0.0) + held
    w.bp_counted_at = now
    if bp != w.bp_tasks or (bp and now - w.bp_sent_at > BP_REFRESH_SECS):
        announce_backpressure(w, bp, routing)
        w.bp_sent_at = now
    if now >= w.next_load_announce:
        w.next_load_announce = now + ANNOUNCE_SECS
        announce_load(w, bp, routing)
    if not parked:
        return True, 100
    full = any(len(b) >= PARK_LIMIT for b in parked.values()) or w.data_peers.over_hard_limit()
    return not full, 1


def announce_backpressure(w: WorkerState, bp: set[int], routing: Routing) -> None:
    """Tell every peer which local tasks are (still) backpressured and which are not any more."""
    items = [[wire.BACKPRESSURE, t, 1, 0, 0] for t in sorted(bp)]
    items += [[wire.BACKPRESSURE, t, 0, 0, 0] for t in sorted(w.bp_tasks - bp)]
    w.bp_tasks = bp
    if not items:
        return
    for slot in routing.slots:
        if slot != w.slot:
            w.control_peers.offer(slot, list(items), force=True)


def announce_load(w: WorkerState, bp: set[int], routing: Routing) -> None:
    """Measure how busy this worker was since the last time and tell every peer, with each
    local task's inbox fill (a task whose batches are parked counts as full)."""
    busy = w.busy_meter.sample()
    w.loads.here_since = w.busy_meter.since
    w.loads.busy_here = busy
    fill: dict[int, float] = {}
    for inbox, tasks in routing.inbox_tasks.items():
        f = 1.0 if tasks and tasks[0] in bp else inbox.qsize() / (inbox.maxsize or 1)
        for t in tasks:
            fill[t] = f
    peers = [slot for slot in routing.slots if slot != w.slot]
    if not peers or not fill:
        return
    items = load_items(busy, fill, w.busy_meter.clock() - w.busy_meter.since)
    for slot in peers:
        # advisory: a peer that is not taking control traffic misses this one
        w.control_peers.offer(slot, list(items))


def dispatch_data(w: WorkerState, items: list[Any], checked: bool = False) -> None:
    """Tuples from the network -> the inboxes of their executors, shape-checked on the way.

    Never blocks: a batch for a full inbox is parked (per inbox, in order) and the rest go
    on; tuples for a task that moved to another worker are forwarded there."""
    groups: dict[Any, list[list[Any]]] = {}
    # the per-tuple loop (shape check, grouping by destination) runs compiled
    bad, dropped = sort_data(items, checked, w.routing.task_dest, w.slot, groups)
    if dropped:
        w.dropped += dropped
    if bad:
        acking.bad_frame(w, wire.WireError(f"{bad} malformed tuples in a data frame"))
    parked = w.parked_batches
    for key, batch in groups.items():
        if type(key) is not Inbox:
            w.data_peers.offer(key, batch, force=True)  # the task moved: forward
            continue
        backlog = parked.get(key)
        if backlog is not None:
            backlog.append(batch)
            continue
        if not key.offer(batch):
            parked[key] = collections.deque([batch])
