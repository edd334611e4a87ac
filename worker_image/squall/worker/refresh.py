"""Refresh (Storm's refresh-connections and refresh-active): the topology's status, assignment,
peers' endpoints and log config read from ZooKeeper, the worker's own endpoint kept there, and
whether a stopping worker may leave (squall.worker.handover). Functions of the worker's state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Set

from squall.models.cluster import Endpoint, TopologyStatus, WorkerSlot
from squall.worker import eventlog, hotupdate, levels
from squall.worker.handover import Leaving, should_leave
from squall.worker.host import WorkerHost
from squall.worker.workerstate import WorkerState

log = logging.getLogger("squall.worker")


def session_resumed(w: WorkerState, new_session: bool) -> None:
    log.info("worker %s: ZooKeeper is back%s", w.slot.key(), " in a new session" if new_session else "")
    w.zk_reconnects += 1
    w.zk_sessions_expired += new_session
    w.wake.set()


def registered(w: WorkerState) -> bool:
    """Whether peers can find this worker: connected, and its endpoint is what ZooKeeper
    holds (the state layer re-creates it in a new session; this repairs anything else that
    removed it). Only then does the worker heartbeat: one that peers cannot reach is not
    fine, and nimbus should see it stop."""
    if not w.state.ready:
        return False
    if w.endpoints.get(w.slot) == w.endpoint:
        return True
    if w.stop_requested is not None:
        # leaving: the endpoint is the slot's next worker's now (or it removed it to say it
        # is coming); taking it back would turn peers away from it
        return False
    log.warning("worker %s: its endpoint is not in ZooKeeper; registering it again", w.slot.key())
    w.state.register_endpoint(w.topology_id, w.slot, w.endpoint)
    w.endpoints = w.state.get_endpoints(w.topology_id, watch=w.watch)
    return w.endpoints.get(w.slot) == w.endpoint


def refresh(w: WorkerState, host: WorkerHost) -> None:
    base = w.state.get_storm(w.topology_id, watch=w.watch)
    if base is None or base.status is TopologyStatus.KILLED and base.delayed_action is None:
        log.info("topology %s is gone; worker %s stops", w.topology_id, w.slot.key())
        w.stop_event.set()
        return
    # a graph upgrade launched the topology again: this worker runs the old graph and takes
    # nothing of the new one (its plan numbers other tasks); its spouts stay inactive until its
    # supervisor (or the operator) replaces it with a worker of the new launch, and it still
    # follows the endpoints, so that it leaves once its successor has registered
    relaunched = base.launch_time_secs != w.base.launch_time_secs
    if relaunched and not w.relaunched:
        w.relaunched = True
        log.info("worker %s: topology %s was launched again (graph upgrade); this worker of the old "
                 "launch waits to be replaced", w.slot.key(), w.topology_id)
    w.storm_active = base.status is TopologyStatus.ACTIVE and not relaunched
    levels.read_log_config(w)
    eventlog.read_sampling(w)
    assignment = w.state.get_assignment(w.topology_id, watch=w.watch)
    endpoints = w.state.get_endpoints(w.topology_id, watch=w.watch)
    if endpoints != w.endpoints:
        # a peer at a new address: the transfer threads connect to it again
        w.peer_reconnects += sum(
            1 for s, ep in endpoints.items()
            if s != w.slot and (old := w.endpoints.get(s)) is not None
            and (old.host, old.port) != (ep.host, ep.port)
        )
        w.endpoints = endpoints
        if w.stop_requested is not None and has_successor(w):
            w.wake.set()  # leave at the next turn, not after a heartbeat period
    if relaunched:
        if w.active:
            w.active = False
            if w.engine is not None:
                w.engine.ring()
        return
    if base.topology != w.base.topology:
        # a new spec of the same graph (squall update, a kubectl patch): applied in place
        hotupdate.apply_spec(w, host, base)
        if w.sampling:
            eventlog.apply_sampling(w, time.time())  # restarted executors sample too
    if assignment is not None and (assignment != w.assignment or base.component_executors != w.base.component_executors):
        w.base = base
        hotupdate.apply_assignment(w, host, assignment)
        if w.sampling:
            eventlog.apply_sampling(w, time.time())  # new executors sample too
    if not w.peers_ready:
        # spouts start once every worker of the assignment listens, so the first tuples are
        # not dropped; a peer lost later does not deactivate them (its tuples time out and
        # are replayed once nimbus has moved its executors)
        w.peers_ready = peers_listening(w.endpoints, set(w.routing.task_slot.values()), w.base.launch_time_secs)
    active = w.storm_active and w.peers_ready
    if active != w.active:
        w.active = active
        if w.engine is not None:
            w.engine.ring()  # spouts (de)activate at their next step


def peers_listening(endpoints: Mapping[WorkerSlot, Endpoint], slots: Set[WorkerSlot], launch: float) -> bool:
    """Whether a worker of this launch listens on every slot of the assignment. After a graph
    upgrade a slot's endpoint may still be the old launch's worker, which drops what it is sent
    (the new launch's first checkpoint round then failed only after messageTimeoutSecs, with
    nothing committed meanwhile); an endpoint that names no launch (an older worker) counts."""
    return bool(slots) and all(
        (ep := endpoints.get(s)) is not None and ep.launch_secs in (0.0, launch) for s in slots)


def has_successor(w: WorkerState) -> bool:
    """Whether ZooKeeper's endpoint of the slot is another worker's (or gone)."""
    return hasattr(w, "endpoint") and w.endpoints.get(w.slot) != w.endpoint


def leaving(w: WorkerState, now: float) -> bool:
    a = w.assignment
    return should_leave(Leaving(
        now=now, stop_requested=w.stop_requested, handover_secs=w.handover_secs,
        assigned=a is not None and w.slot in a.slots().values(),
        successor=has_successor(w), zk_ready=w.state.ready and not w.zk_refused,
        retiring=bool(w.retiring),
    ))
