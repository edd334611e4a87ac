"""Acker traffic in the worker: acker messages applied to the local ackers inline, completions
routed to their spouts (here or on peers), new trees registered, malformed traffic counted.
Functions of the worker's state (squall.worker.workerstate); the engine loop and the executors
call them through the worker (squall.worker.host).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from typing import Any

from squall import wire
from squall.models.cluster import WorkerSlot
from squall.worker.control import group_inits, route_done, sort_control
from squall.worker.host import HostedExecutor
from squall.worker.routing import Inbox
from squall.worker.workerstate import (
    BP_TTL_SECS,
    WorkerState,
)

log = logging.getLogger("squall.worker")


def handle_control(w: WorkerState, items: list[list[int]], caller: HostedExecutor | None, trusted: bool = True,
                   peer: str | None = None) -> list[list[int]]:
    """Apply acker messages: local ackers inline, the rest to the spouts or peers they are for.
    Returns completions meant for the calling spout executor (it handles them itself).
    Items from the network (`trusted=False`) are shape-checked here, in the same pass;
    `peer` is the address they came from when the transport is not sealed (CURVE).

    Never waits: what a full peer queue does not take goes back to the calling executor's
    `out.control` (a spout stops emitting, a bolt takes no input, until that left; a spout
    keeps taking its completions meanwhile). Traffic from the control port (`caller is None`)
    is queued for a peer past the bound; completions go into a spout's inbox past its bound
    if need be (`_put`): the engine loop that calls this also steps those spouts."""
    routing = w.routing
    ledgers = w.ledgers
    done: list[list[int]] = []
    remote: dict[WorkerSlot, list[list[int]]] = {}
    mine: dict[int, list[list[int]]] = {}
    signals: list[list[int]] = []
    bad, dropped = sort_control(items, trusted, ledgers, routing.task_slot, mine, done, signals, remote)
    if dropped:
        w.dropped += dropped
    for it in signals:
        # a peer's task is (1) or is no longer (0) backpressured, or a peer announces its
        # load; without CURVE, only a host running one of the assignment's workers may say
        # so (else anyone reaching the control port could throttle or steer this worker)
        if peer is not None and not known_peer(w, peer):
            if not all(slot in w.endpoints for slot in w.routing.slots):
                # a worker of the assignment whose endpoint this one has not read yet (at start,
                # after a rebalance) may be that peer: its signal cannot be judged, so it is
                # dropped, not applied, and counted apart rather than warned of as a stranger's
                w.unjudged_signals += 1
                continue
            w.refused_signals += 1
            if w.refused_signals <= 10 or w.refused_signals % 1000 == 0:
                log.warning("worker %s refused a backpressure signal from %s: no worker of the "
                            "assignment runs there (%d so far)", w.slot.key(), peer, w.refused_signals)
            continue
        if it[0] == wire.LOAD:
            w.loads.hear((it,), time.monotonic())
        elif it[2]:
            w.remote_bp[it[1]] = time.monotonic() + BP_TTL_SECS
        else:
            w.remote_bp.pop(it[1], None)
    if mine:
        with w.acker_lock:
            for task, batch in mine.items():
                led = ledgers.get(task)
                if led is not None:
                    led.apply(batch, done)
    own: list[list[int]] = []
    if bad:
        bad_frame(w, wire.WireError(f"{bad} malformed acker messages in a control frame"))
    if not done and not remote:
        return own
    local: dict[Inbox, list[list[int]]] = {}
    trees: dict[Inbox, list[list[int]]] = {}
    own_tasks = caller.tasks if caller is not None and caller.kind == "spout" else ()
    dropped = route_done(done, own_tasks, routing.spout_inbox, routing.tree_done, routing.task_slot, w.slot,
                         w.retiring_spouts, own, local, trees, remote)
    if dropped:
        w.dropped += dropped
    for inbox, batch in local.items():
        put_completions(w, inbox, batch)
    for inbox, batch in trees.items():
        if not inbox.offer(batch):  # full: the window times the tree out and fails its spout trees
            w.dropped += len(batch)
    for slot, batch in remote.items():
        send_control(w, slot, batch, caller)
    return own


def send_control(w: WorkerState, slot: WorkerSlot, batch: list[list[int]], caller: HostedExecutor | None) -> None:
    peers = w.control_peers
    if caller is None:
        peers.offer(slot, batch, force=True)
    elif not peers.offer(slot, batch):
        # sent again at its next flush; until then the executor takes no new input
        caller.out.control.extend(batch)


def init_trees(w: WorkerState, inits: list[tuple[int, int, int]], spill: list[list[int]]) -> list[list[int]]:
    """Register a spout's new trees in this worker's ackers (`root % numAckers` names one of
    them). Returns completions of trees with no edges, for the calling spout. A root whose
    acker is not here (the spout picked it just before the acker count or placement changed)
    becomes an init message in `spill`, which the spout sends like its other acker traffic."""
    by_task = group_inits(inits, w.routing.plan.acker_tasks)
    done: list[list[int]] = []
    with w.acker_lock:
        for t, entries in by_task.items():
            led = w.ledgers.get(t)
            if led is None:
                spill.extend([wire.INIT, t, root, xor, task] for root, xor, task in entries)
            else:
                led.init_new(entries, done)
    return done


def put_completions(w: WorkerState, q: Inbox, item: Any) -> bool:
    """Completions into a local spout's inbox, without waiting (the engine loop that steps
    the spout may be the caller): past the inbox's bound if need be, since completions are
    bounded by the spout's pending trees (each completes once). Dropped if the spout left:
    they are of no use to anyone then."""
    if q.offer(item):
        return True
    if q not in w.routing.inbox_tasks and all(ex.inbox is not q for ex in list(w.retiring)):
        w.dropped += len(item)
        return False
    q.force(item)
    return True


def known_peer(w: WorkerState, peer: str) -> bool:
    """Whether `peer` (an IP address) is the host of a worker of the current assignment."""
    endpoints, routing = w.endpoints, w.routing
    if endpoints is not w.peer_hosts_of[0] or routing is not w.peer_hosts_of[1]:
        hosts = set()
        for slot, ep in endpoints.items():
            if slot in routing.slots:
                hosts.add(ep.host)
                try:
                    ipaddress.ip_address(ep.host)
                except ValueError:  # a name: what it resolves to
                    try:
                        hosts.update(socket.gethostbyname_ex(ep.host)[2])
                    except OSError:
                        pass
        w.peer_hosts = frozenset(hosts)
        w.peer_hosts_of = (endpoints, routing)
    return peer in w.peer_hosts


def bad_frame(w: WorkerState, exc: Exception) -> None:
    w.bad_frames += 1
    if w.bad_frames <= 10 or w.bad_frames % 1000 == 0:
        log.warning("worker %s dropped a bad frame (%d so far): %s", w.slot.key(), w.bad_frames, exc)
