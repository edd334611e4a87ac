"""One worker process: the executors of one slot, and the loops of seeds 000 and 003.

Threads: data receive (PULL bound on the slot port -> executor inboxes), control receive (acker
traffic: the acker ledgers live here and run inline, so acks never wait behind data), data and
control transfer (send queues -> one PUSH socket per peer), one thread per executor, and the
main thread running refresh-connections, refresh-active, heartbeats and error reports.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import zmq

from squall import serialization, wire
from squall.acker import AckerLedger
from squall.models.cluster import (
    Assignment,
    Endpoint,
    ErrorInfo,
    ExecutorId,
    ExecutorStats,
    StormBase,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
    executor_key,
)
from squall.models.v1alpha1 import Topology
from squall.plan import ACKER, TopologyPlan, build_plan
from squall.state import CONNECTION_ERRORS, ClusterState, NotConnected
from squall.worker.executor import BoltExecutor, Executor, Inbox, SpoutExecutor

log = logging.getLogger("squall.worker")

SEND_QUEUE_BATCHES = 64
SOCKET_HWM = 32
# batches coalesced into one frame per destination
FRAME_BATCHES = 16
CONNECT_CMD = object()


@dataclass(frozen=True)
class Routing:
    """A snapshot of where every task lives, swapped whole when the assignment changes."""

    plan: TopologyPlan
    local_tasks: frozenset[int]
    # every task -> the local executor inbox, or the remote slot
    task_dest: Mapping[int, Any]
    task_slot: Mapping[int, WorkerSlot]
    spout_inbox: Mapping[int, Inbox]


class Worker:
    def __init__(
        self,
        state: ClusterState,
        topology_id: str,
        slot: WorkerSlot,
        host: str = "127.0.0.1",
        bind_host: str | None = None,
        search_paths: tuple[str, ...] = (),
    ) -> None:
        self.state = state
        self.topology_id = topology_id
        self.slot = slot
        self.host = host
        self.bind_host = bind_host or host
        self.search_paths = search_paths
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.started = time.time()
        self.zmq = zmq.Context()
        self.acker_lock = threading.Lock()
        self.ledgers: dict[int, AckerLedger] = {}
        self.executors: dict[ExecutorId, Executor] = {}
        self.data_queue: queue.Queue[Any] = queue.Queue(SEND_QUEUE_BATCHES)
        self.control_queue: queue.Queue[Any] = queue.Queue(SEND_QUEUE_BATCHES)
        self.endpoints: dict[WorkerSlot, Endpoint] = {}
        self.errors: collections.deque[tuple[str, int, str]] = collections.deque(maxlen=100)
        self.bad_frames = 0
        self.unsendable = 0
        self.dropped = 0
        self.active = False
        self.storm_active = False
        self.peers_ready = False
        self.threads: list[threading.Thread] = []
        self.assignment: Assignment | None = None
        self.acker_executors: list[ExecutorId] = []
        self.routing: Routing
        self.exit_code = 0

    # -- setup -----------------------------------------------------------------------------
    def _load(self) -> None:
        from squall.validation import check_topology

        base = self.state.get_storm(self.topology_id)
        if base is None:
            raise RuntimeError(f"topology {self.topology_id!r} is not in ZooKeeper")
        self.base = base
        self.topology = Topology.model_validate(base.topology)
        self.spec = self.topology.spec
        resolved = check_topology(self.topology, resolve_classes=True, search_paths=self.search_paths)
        self.classes = resolved.classes
        serialization.register_all(resolved.serializers)
        self.streams = resolved.streams
        self.conf: dict[str, Any] = {
            "topology.name": self.topology.name,
            "topology.workers": self.spec.num_workers,
            "topology.message.timeout.secs": self.spec.message_timeout_secs,
            "topology.max.spout.pending": self.spec.max_spout_pending,
            "topology.tick.tuple.freq.secs": self.spec.tick_tuple_freq_secs,
            **self.spec.config,
        }
        # A thread woken by a socket or a queue waits for the GIL until the busy thread's switch
        # interval ends; every hop of a tuple pays it. 1 ms instead of CPython's 5 ms: +20-25%
        # throughput and lower latency in bench/run.py at the same window.
        sys.setswitchinterval(float(self.conf.get("worker.switch.interval.secs", 0.001)))

    def _bind(self) -> None:
        self.data_sock = self.zmq.socket(zmq.PULL)
        self.data_sock.setsockopt(zmq.RCVHWM, SOCKET_HWM)
        self.data_sock.setsockopt(zmq.LINGER, 0)
        self.data_sock.bind(f"tcp://{self.bind_host}:{self.slot.port}")
        self.control_sock = self.zmq.socket(zmq.PULL)
        self.control_sock.setsockopt(zmq.LINGER, 0)
        self.control_port = self.control_sock.bind_to_random_port(f"tcp://{self.bind_host}")

    def start(self) -> None:
        self._load()
        self._bind()
        self.endpoint = Endpoint(host=self.host, port=self.slot.port, control_port=self.control_port, pid=os.getpid())
        # the state layer registers the (ephemeral) endpoint again in every new session; the
        # listener re-reads everything then, since watches do not survive a session
        self.state.add_session_listener(self._session_resumed)
        self.state.register_endpoint(self.topology_id, self.slot, self.endpoint)
        self.routing = Routing(build_plan(self.topology, self.streams, self.base.component_executors), frozenset(), {}, {}, {})
        self.refresh()
        for name, target in (
            ("receive-data", self._receive_data),
            ("receive-control", self._receive_control),
            ("transfer-data", lambda: self._transfer(self.data_queue, "port")),
            ("transfer-control", lambda: self._transfer(self.control_queue, "control_port")),
        ):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self.threads.append(t)

    # -- refresh-connections and refresh-active ----------------------------------------------
    def _watch(self, *_args: Any) -> None:
        self.wake.set()

    def _session_resumed(self, new_session: bool) -> None:
        log.info("worker %s: ZooKeeper is back%s", self.slot.key(), " in a new session" if new_session else "")
        self.wake.set()

    def _registered(self) -> bool:
        """Whether peers can find this worker: connected, and its endpoint is what ZooKeeper
        holds (the state layer re-creates it in a new session; this repairs anything else that
        removed it). Only then does the worker heartbeat: one that peers cannot reach is not
        fine, and nimbus should see it stop."""
        if not self.state.ready:
            return False
        if self.endpoints.get(self.slot) == self.endpoint:
            return True
        log.warning("worker %s: its endpoint is not in ZooKeeper; registering it again", self.slot.key())
        self.state.register_endpoint(self.topology_id, self.slot, self.endpoint)
        self.endpoints = self.state.get_endpoints(self.topology_id, watch=self._watch)
        return self.endpoints.get(self.slot) == self.endpoint

    def refresh(self) -> None:
        base = self.state.get_storm(self.topology_id, watch=self._watch)
        if base is None or base.status is TopologyStatus.KILLED and base.delayed_action is None:
            log.info("topology %s is gone; worker %s stops", self.topology_id, self.slot.key())
            self.stop_event.set()
            return
        self.storm_active = base.status is TopologyStatus.ACTIVE
        assignment = self.state.get_assignment(self.topology_id, watch=self._watch)
        endpoints = self.state.get_endpoints(self.topology_id, watch=self._watch)
        if endpoints != self.endpoints:
            self.endpoints = endpoints
        if assignment is not None and (assignment != self.assignment or base.component_executors != self.base.component_executors):
            self.base = base
            self._apply_assignment(assignment)
        if not self.peers_ready:
            # spouts start once every worker of the assignment listens, so the first tuples are
            # not dropped; a peer lost later does not deactivate them (its tuples time out and
            # are replayed once nimbus has moved its executors)
            slots_needed = set(self.routing.task_slot.values())
            self.peers_ready = bool(slots_needed) and all(s in self.endpoints for s in slots_needed)
        self.active = self.storm_active and self.peers_ready

    def _apply_assignment(self, assignment: Assignment) -> None:
        """Hot update: start executors newly assigned here, stop removed ones, keep the rest."""
        plan = build_plan(self.topology, self.streams, self.base.component_executors)
        slots = assignment.slots()
        mine = {e for e, s in slots.items() if s == self.slot}
        for e in [e for e in self.executors if e not in mine]:
            gone = self.executors.pop(e)
            gone.stop()
            gone.join(5.0)
            log.info("executor %s of %s removed from %s", e, gone.component, self.slot.key())
        new_execs: list[Executor] = []
        task_slot: dict[int, WorkerSlot] = {}
        for e, s in slots.items():
            for t in range(e[0], e[1] + 1):
                task_slot[t] = s
        local_tasks = frozenset(t for t, s in task_slot.items() if s == self.slot)
        now = time.monotonic()
        with self.acker_lock:
            for t in plan.acker_tasks:
                if t in local_tasks and t not in self.ledgers:
                    self.ledgers[t] = AckerLedger(float(self.spec.message_timeout_secs), now)
            for t in list(self.ledgers):
                if t not in local_tasks:
                    del self.ledgers[t]
        # build executors before publishing the routing that points at their inboxes
        pending_execs: dict[ExecutorId, Executor] = {}
        for e in sorted(mine):
            if e in self.executors:
                continue
            comp = plan.task_component[e[0]]
            if comp == ACKER:
                continue
            pending_execs[e] = None  # type: ignore[assignment]
        self.acker_executors = [e for e in sorted(mine) if plan.task_component[e[0]] == ACKER]
        task_dest: dict[int, Any] = dict(task_slot)
        spout_inbox: dict[int, Inbox] = {}
        self.assignment = assignment
        # a provisional routing lets new executors read the plan while they are constructed
        self.routing = Routing(plan, local_tasks, task_dest, task_slot, spout_inbox)
        for e in pending_execs:
            comp = plan.task_component[e[0]]
            spec = next(c for c in self.spec.components if c.name == comp)
            conf = {**self.conf, **spec.config}
            if comp in plan.spouts:
                ex: Executor = SpoutExecutor(self, e, comp, self.classes[comp], conf)
            else:
                tick = spec.config.get("topology.tick.tuple.freq.secs", self.spec.tick_tuple_freq_secs)
                ex = BoltExecutor(self, e, comp, self.classes[comp], conf, float(tick) if tick else None)
            self.executors[e] = ex
            new_execs.append(ex)
        for e, ex in self.executors.items():
            for t in ex.tasks:
                task_dest[t] = ex.inbox
                if ex.kind == "spout":
                    spout_inbox[t] = ex.inbox
        for t in self.ledgers:
            task_dest.pop(t, None)
        self.routing = Routing(plan, local_tasks, task_dest, task_slot, spout_inbox)
        for ex in new_execs:
            ex.start()
        log.info(
            "worker %s: %d executors (%d new), %d ackers",
            self.slot.key(), len(self.executors), len(new_execs), len(self.ledgers),
        )

    def executor_died(self, ex: Executor, exc: BaseException) -> None:
        log.error("executor %s died: %s; the worker exits so that it is restarted", ex.id, exc)
        self.exit_code = 3
        self.stop_event.set()

    # -- acker traffic -----------------------------------------------------------------------
    def handle_control(self, items: list[list[int]], caller: Executor | None, trusted: bool = True) -> list[list[int]]:
        """Apply acker messages: local ackers inline, the rest to the spouts or peers they are for.
        Returns completions meant for the calling spout executor (it handles them itself).
        Items from the network (`trusted=False`) are shape-checked here, in the same pass."""
        routing = self.routing
        ledgers = self.ledgers
        done: list[list[int]] = []
        remote: dict[WorkerSlot, list[list[int]]] = {}
        bad = 0
        mine: dict[int, list[list[int]]] = {}
        for it in items:
            if not trusted and not (
                type(it) is list
                and len(it) == 5
                and type(it[0]) is int
                and 0 <= it[0] <= 3
                and type(it[1]) is int
                and type(it[2]) is int
                and type(it[3]) is int
                and type(it[4]) is int
            ):
                bad += 1
                continue
            kind = it[0]
            if kind == wire.DONE:
                done.append(it)
            elif it[1] in ledgers:
                got = mine.get(it[1])
                if got is None:
                    mine[it[1]] = [it]
                else:
                    got.append(it)
            else:
                slot = routing.task_slot.get(it[1])
                if slot is None:
                    self.dropped += 1
                else:
                    remote.setdefault(slot, []).append(it)
        if mine:
            with self.acker_lock:
                for task, batch in mine.items():
                    led = ledgers.get(task)
                    if led is not None:
                        led.apply(batch, done)
        own: list[list[int]] = []
        if bad:
            self._bad_frame(wire.WireError(f"{bad} malformed acker messages in a control frame"))
        if not done and not remote:
            return own
        local: dict[Inbox, list[list[int]]] = {}
        own_tasks = caller.tasks if caller is not None and caller.kind == "spout" else ()
        last_t = None
        last: list[list[int]] | None = None
        for it in done:
            t = it[1]
            if t == last_t and last is not None:
                last.append(it)  # completions mostly go to one spout task in a row
                continue
            last_t = t
            if t in own_tasks:
                last = own
            elif (inbox := routing.spout_inbox.get(t)) is not None:
                last = local.setdefault(inbox, [])
            else:
                slot = routing.task_slot.get(t)
                if slot is None or slot == self.slot:
                    self.dropped += 1
                    last = None
                    continue
                last = remote.setdefault(slot, [])
            last.append(it)
        for inbox, batch in local.items():
            self._put(inbox, batch)
        for slot, batch in remote.items():
            self._put(self.control_queue, (slot, batch))
        return own

    def init_trees(self, inits: list[tuple[int, int, int]]) -> list[list[int]]:
        """Register a spout's new trees in this worker's ackers (`root % numAckers` names one of
        them). Returns completions of trees with no edges, for the calling spout."""
        n = len(self.routing.plan.acker_tasks)
        tasks = self.routing.plan.acker_tasks
        by_task: dict[int, list[tuple[int, int, int]]] = {}
        for entry in inits:
            t = tasks[entry[0] % n]
            got = by_task.get(t)
            if got is None:
                by_task[t] = [entry]
            else:
                got.append(entry)
        done: list[list[int]] = []
        with self.acker_lock:
            for t, entries in by_task.items():
                led = self.ledgers.get(t)
                if led is None:  # moved away since the spout picked the root: the tree times out
                    self.dropped += len(entries)
                else:
                    led.init_new(entries, done)
        return done

    def _put(self, q: queue.Queue[Any], item: Any, stop: threading.Event | None = None) -> bool:
        stop = stop or self.stop_event
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def send_data(self, slot: WorkerSlot, batch: list[list[Any]], block: bool, stop: threading.Event) -> bool:
        if not block:
            try:
                self.data_queue.put_nowait((slot, batch))
                return True
            except queue.Full:
                return False
        return self._put(self.data_queue, (slot, batch), stop)

    # -- receive ---------------------------------------------------------------------------
    def _bad_frame(self, exc: Exception) -> None:
        self.bad_frames += 1
        if self.bad_frames <= 10 or self.bad_frames % 1000 == 0:
            log.warning("worker %s dropped a bad frame (%d so far): %s", self.slot.key(), self.bad_frames, exc)

    def _receive(self, sock: zmq.Socket[bytes], unpack: Any, handle: Any) -> None:
        """A receive loop: drain the socket, decode each frame, hand it on; a frame that does
        not decode is counted and dropped."""
        while not self.stop_event.is_set():
            if not sock.poll(100):
                continue
            while True:
                try:
                    frame = sock.recv(zmq.NOBLOCK, copy=True)
                except zmq.Again:
                    break
                try:
                    items = unpack(frame)
                except wire.WireError as exc:
                    self._bad_frame(exc)
                    continue
                handle(items)

    def _receive_data(self) -> None:
        self._receive(self.data_sock, wire.unpack_data, self._dispatch_data)

    def _receive_control(self) -> None:
        self._receive(self.control_sock, wire.unpack_control, lambda items: self.handle_control(items, None, trusted=False))

    def _dispatch_data(self, items: list[Any]) -> None:
        """Tuples from the network -> the inboxes of their executors, shape-checked on the way."""
        dest = self.routing.task_dest
        groups: dict[Inbox, list[list[Any]]] = {}
        last_task = None
        last_batch: list[list[Any]] = []
        bad = 0
        for it in items:
            # the shape check of wire.check_tuple, inlined: this loop runs per tuple
            if not (
                type(it) is list
                and len(it) == 5
                and type(it[0]) is int
                and type(it[1]) is int
                and type(it[2]) is str
                and type(it[3]) is list
                and (it[4] is None or type(it[4]) is dict)
            ):
                bad += 1
                continue
            if it[4] is not None:
                # anchors come from the network: root and edge ids must be ints
                ok = True
                for k, v in it[4].items():
                    if type(k) is not int or type(v) is not int:
                        ok = False
                if not ok:
                    bad += 1
                    continue
            t = it[0]
            if t != last_task:
                inbox = dest.get(t)
                if type(inbox) is not queue.Queue:
                    self.dropped += 1
                    last_task = None
                    continue
                last_batch = groups.get(inbox)  # type: ignore[assignment]
                if last_batch is None:
                    last_batch = groups[inbox] = []
                last_task = t
            last_batch.append(it)
        if bad:
            self._bad_frame(wire.WireError(f"{bad} malformed tuples in a data frame"))
        for inbox, batch in groups.items():
            self._put(inbox, batch)

    # -- transfer ----------------------------------------------------------------------------
    def _transfer(self, q: queue.Queue[Any], port_attr: str) -> None:
        """Drain a send queue, batch per destination, send; connect and close as endpoints change."""
        socks: dict[WorkerSlot, tuple[Endpoint, zmq.Socket[bytes]]] = {}
        stop = self.stop_event
        try:
            while not stop.is_set():
                try:
                    first = q.get(timeout=0.1)
                except queue.Empty:
                    self._prune(socks)
                    continue
                by_slot: dict[WorkerSlot, list[Any]] = {first[0]: list(first[1])}
                for _ in range(FRAME_BATCHES):
                    try:
                        slot, batch = q.get_nowait()
                    except queue.Empty:
                        break
                    got = by_slot.get(slot)
                    if got is None:
                        by_slot[slot] = list(batch)
                    else:
                        got.extend(batch)
                self._prune(socks)
                for slot, items in by_slot.items():
                    ep = self.endpoints.get(slot)
                    if ep is None:
                        self.dropped += len(items)
                        continue
                    have = socks.get(slot)
                    if have is None or have[0] != ep:
                        if have is not None:
                            have[1].close(0)
                        s = self.zmq.socket(zmq.PUSH)
                        s.setsockopt(zmq.SNDHWM, SOCKET_HWM)
                        s.setsockopt(zmq.LINGER, 0)
                        s.connect(f"tcp://{ep.host}:{getattr(ep, port_attr)}")
                        have = socks[slot] = (ep, s)
                    frame, bad = wire.pack_data(items)
                    if bad:
                        self._unsendable(bad)
                    if frame is None:
                        continue
                    while not stop.is_set():
                        try:
                            have[1].send(frame, zmq.NOBLOCK, copy=False)
                            break
                        except zmq.Again:
                            # the peer is slow (backpressure) or gone: give up only if it is gone
                            if self.endpoints.get(slot) != ep:
                                self.dropped += len(items)
                                break
                            have[1].poll(50, zmq.POLLOUT)
        finally:
            for _ep, s in socks.values():
                s.close(0)

    def _unsendable(self, bad: list[tuple[Any, Exception]]) -> None:
        """Tuples whose values the wire format cannot encode (the rest of their frame was sent):
        each is reported as an error of the component that emitted it, and its trees are failed
        so that their spouts hear `fail` at once rather than a timeout later."""
        plan = self.routing.plan
        n = len(plan.acker_tasks)
        fails: list[list[int]] = []
        for item, exc in bad:
            self.dropped += 1
            if not (type(item) is list and len(item) == 5 and type(item[1]) is int and type(item[2]) is str):
                log.error("worker %s could not encode %r: %s", self.slot.key(), item, exc)  # not a data tuple
                continue
            _dest, src, stream, _values, anchors = item
            comp = plan.task_component.get(src, "?")
            spec = plan.streams.get(comp, {}).get(stream)
            text = wire.unsendable_message(comp, src, stream, list(spec.fields) if spec else [], item, exc)
            self.unsendable += 1
            if self.unsendable <= 10 or self.unsendable % 1000 == 0:
                log.error("%s (%d so far)", text, self.unsendable)
            self.report_error(comp, src, text)
            if anchors and n:
                fails.extend([wire.FAIL, plan.acker_tasks[r % n], r, 0, 0] for r in anchors)
        if fails:
            self.handle_control(fails, None)

    def _prune(self, socks: dict[WorkerSlot, tuple[Endpoint, Any]]) -> None:
        for slot in [s for s, (ep, _) in socks.items() if self.endpoints.get(s) != ep]:
            socks.pop(slot)[1].close(0)

    # -- heartbeats and errors -------------------------------------------------------------
    def report_error(self, component: str, task: int, text: str) -> None:
        self.errors.append((component, task, text))

    def heartbeat(self) -> WorkerHeartbeat:
        execs: dict[str, ExecutorStats] = {}
        for e, ex in list(self.executors.items()):
            s = ex.stats
            hist = dict(s.hist)
            from squall.stats import percentile

            execs[executor_key(e)] = ExecutorStats(
                component=ex.component,
                emitted=s.emitted,
                transferred=s.transferred,
                executed=s.executed,
                acked=s.acked,
                failed=s.failed,
                dropped=s.dropped,
                latency_ms_mean=(s.lat_sum / s.lat_n) if s.lat_n else 0.0,
                latency_ms_p50=percentile(hist, 0.5),
                latency_ms_p99=percentile(hist, 0.99),
                latency_samples=s.lat_n,
                latency_hist=hist,
                pending=ex.pending_count() if isinstance(ex, SpoutExecutor) else 0,
            )
        for e in self.acker_executors:
            execs[executor_key(e)] = ExecutorStats(component=ACKER)
        now = time.time()
        return WorkerHeartbeat(time_secs=now, uptime_secs=now - self.started, executors=execs)

    def _flush_errors(self) -> None:
        latest: dict[str, tuple[int, str]] = {}
        while self.errors:
            comp, task, text = self.errors.popleft()
            latest[comp] = (task, text)
        for comp, (task, text) in latest.items():
            try:
                self.state.report_error(
                    self.topology_id,
                    comp,
                    ErrorInfo(component=comp, task=task, time_secs=time.time(), error=text[-4000:], host=self.host, port=self.slot.port),
                )
            except Exception:
                log.exception("could not report an error to ZooKeeper")

    # -- main loop ---------------------------------------------------------------------------
    def run(self) -> int:
        hb_every = float(self.conf.get("worker.heartbeat.frequency.secs", 1.0))
        poll_every = float(self.conf.get("task.refresh.poll.secs", 10.0))
        next_hb = 0.0
        next_poll = time.monotonic() + poll_every
        zk_down = False  # warned about ZooKeeper being unreachable, once per outage
        while not self.stop_event.is_set():
            now = time.monotonic()
            beat_due = now >= next_hb
            if beat_due:
                next_hb = now + hb_every
                with self.acker_lock:
                    for led in self.ledgers.values():
                        led.expire(now)
            try:
                if not self.state.ready:
                    # ZooKeeper is away (calls would block): the data plane goes on without it
                    raise NotConnected("not connected to ZooKeeper")
                if self.wake.is_set() or now >= next_poll:
                    self.wake.clear()
                    next_poll = now + poll_every
                    self.refresh()
                if beat_due:
                    if self._registered():
                        self.state.worker_heartbeat(self.topology_id, self.slot, self.heartbeat())
                        self._flush_errors()
                if zk_down:
                    zk_down = False
                    log.info("worker %s: ZooKeeper reachable again", self.slot.key())
            except CONNECTION_ERRORS as exc:
                if not zk_down:
                    zk_down = True
                    log.warning("worker %s: ZooKeeper unreachable (%s); tuples keep flowing, retrying",
                                self.slot.key(), exc)
                self.wake.set()  # refresh as soon as it is back
                self.state.wait_ready(min(hb_every, 0.5))
                continue
            except Exception:
                log.exception("refresh or heartbeat failed; retrying")
            if not self.active and self.storm_active and not self.wake.is_set():
                # waiting for peers' endpoints: poll quickly
                self.wake.wait(0.05)
                self.wake.set()
                continue
            self.wake.wait(max(0.0, min(next_hb, next_poll) - time.monotonic()))
        return self.exit_code

    def shutdown(self) -> None:
        self.stop_event.set()
        self.active = False
        # spouts first: they fail what is pending, so nothing is forgotten
        order = sorted(self.executors.values(), key=lambda ex: ex.kind != "spout")
        for ex in order:
            ex.stop()
        for ex in order:
            ex.join(5.0)
        for t in self.threads:
            t.join(2.0)
        try:
            if not self.state.ready:  # ZooKeeper away: its calls would block until it is back
                raise NotConnected("not connected to ZooKeeper")
            self._flush_errors()
            self.state.worker_heartbeat(self.topology_id, self.slot, self.heartbeat())
            self.state.remove_endpoint(self.topology_id, self.slot)
        except Exception:
            pass
        # start() may have failed before binding (a port in use): close what exists
        for sock in (getattr(self, "data_sock", None), getattr(self, "control_sock", None)):
            if sock is not None:
                sock.close(0)
        self.zmq.term()


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m squall.worker", description="Run one Squall worker slot.")
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string HOST:PORT[,...]")
    p.add_argument("--root", default="/squall", help="ZooKeeper root path")
    p.add_argument("--topology", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--port", type=int, required=True, help="slot port: data tuples arrive here")
    p.add_argument("--host", default=os.environ.get("SQUALL_WORKER_HOST", "127.0.0.1"), help="address peers connect to")
    p.add_argument("--bind", default=None, help="address to bind (default: --host)")
    p.add_argument("--search-path", action="append", default=[], help="directory holding component modules")
    p.add_argument("--log-level", default=os.environ.get("SQUALL_LOG_LEVEL", "INFO"))
    p.add_argument("--zk-session-timeout", type=float,
                   default=float(os.environ.get("SQUALL_ZK_SESSION_TIMEOUT", "10")),
                   help="ZooKeeper session timeout asked of the server, seconds (it clamps it)")
    args = p.parse_args(argv)
    import gc

    # Tuples, anchors and acker entries are acyclic: reference counting frees them. The cyclic
    # collector would otherwise run every 700 allocations and rescan every live pending tuple.
    gc.set_threshold(100_000, 50, 1000)
    logging.basicConfig(level=args.log_level, format=f"%(asctime)s worker {args.node}-{args.port} %(levelname)s %(name)s: %(message)s")
    state = ClusterState.connect(args.zookeeper, root=args.root, session_timeout=args.zk_session_timeout)
    worker = Worker(state, args.topology, WorkerSlot(args.node, args.port), args.host, args.bind, tuple(args.search_path))

    def _stop(_sig: int, _frame: Any) -> None:
        worker.stop_event.set()
        worker.wake.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    code = 0
    try:
        worker.start()
        gc.freeze()  # what start-up loaded (modules, classes, the plan) is never garbage
        code = worker.run()
    finally:
        worker.shutdown()
        state.close()
    return code
