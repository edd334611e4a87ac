"""One worker process: the executors of one slot, and the loops of seeds 000 and 003.

Threads: data receive (PULL bound on the slot port -> executor inboxes), control receive (acker
traffic: the acker ledgers live here and run inline, so acks never wait behind data), data and
control transfer (send queues -> one PUSH socket per peer), one thread per executor, and the
main thread running refresh-connections, refresh-active, heartbeats and error reports.
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import zmq

from squall import loglevels, serialization, wire
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
from squall.plan import ACKER, CHECKPOINT_COMPONENT, build_plan
from squall.state import ACCESS_ERRORS, CONNECTION_ERRORS, ZK_AUTH_ENV, ZK_AUTH_FILE_ENV, ClusterState, NotConnected, ZkCredentials
from squall.worker import allocator, health, metrics
from squall.worker.control import group_inits, route_done, sort_control
from squall.worker.errorlog import ErrorThrottle, throttle_settings
from squall.worker.engine import Engine
from squall.worker.bolt import BoltExecutor
from squall.worker.executor import Executor, is_isolated
from squall.worker.spout import SpoutExecutor
from squall.gcpolicy import POLICY as GC_POLICY
from squall.worker.handover import DRAIN_SECS, Leaving, should_leave
from squall.worker.host import HostedExecutor
from squall.worker.load import ANNOUNCE_SECS, BusyMeter, PeerLoads, load_items
from squall.worker.routing import Inbox, Routing, sort_data
from squall.worker.security import CurveKeyError, CurveKeys, Sealer, keys_from_env, read_keys
from squall.worker.threads import NamedThread
from squall.worker.transport import (
    FRAME_OVERHEAD,
    SOCKET_HWM,
    DirectSender,
    PeerQueues,
    max_frame_bytes,
    run_transfer,
)

log = logging.getLogger("squall.worker")
T = TypeVar("T")

# per peer: batches queued for its transfer thread (a full queue is backpressure on the sender)
SEND_QUEUE_BATCHES = 64
# past this many queued batches for one peer, the receive threads stop reading their socket
SEND_QUEUE_HARD_LIMIT = 4096
# batches parked for one full executor inbox before the receive thread stops reading its socket
PARK_LIMIT = 512
# a backpressured task is re-announced this often; peers forget an announcement after BP_TTL_SECS
BP_REFRESH_SECS = 0.5
BP_TTL_SECS = 2.0


# a slot's port still held by the slot's previous worker (pods of one node sharing its network, a
# replacement pod started while the old one terminates): bind again for at most this long
BIND_WAIT_SECS = 30.0


def _while_in_use(bind: Callable[[], T], what: str, stop: threading.Event, limit: float = BIND_WAIT_SECS,
                  on_busy: Callable[[], None] | None = None) -> T:
    """`bind()`, tried again while its address is in use, for at most `limit` seconds;
    `on_busy()` is called once, when it is first found in use."""
    deadline = time.monotonic() + limit
    said = False
    while True:
        try:
            return bind()
        except (zmq.ZMQError, OSError) as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline or stop.is_set():
                raise
            if not said:
                said = True
                log.info("%s is still in use (the slot's previous worker stopping?); retrying for up to %.0fs",
                         what, limit)
                if on_busy is not None:
                    on_busy()
            stop.wait(0.1)


class Worker:
    def __init__(
        self,
        state: ClusterState,
        topology_id: str,
        slot: WorkerSlot,
        host: str = "127.0.0.1",
        bind_host: str | None = None,
        search_paths: tuple[str, ...] = (),
        metrics_port: int | None = None,
        metrics_bind: str | None = None,
        curve: CurveKeys | None = None,
        handover_secs: float = 0.0,
    ) -> None:
        self.state = state
        self.topology_id = topology_id
        self.slot = slot
        self.host = host
        self.bind_host = bind_host or host
        self.search_paths = search_paths
        # the HTTP endpoint (/readyz, /healthz, /metrics): None: none; 0: any free port
        self.metrics_port = metrics_port
        self.metrics_bind = metrics_bind or self.bind_host
        self.http: health.HealthServer | None = None
        # loop name -> when it last turned (monotonic): readiness and liveness read it
        self.loop_turns: dict[str, float] = {}
        self.peer_reconnects = 0
        self.zk_reconnects = 0
        self.zk_sessions_expired = 0
        # task -> seconds its inbox was full (tuples for it parked by the loop's data receive)
        self.bp_secs: dict[int, float] = {}
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.started = time.time()
        self.zmq = zmq.Context()
        # CURVE between the topology's workers (squall.worker.security); None: plain TCP
        self.sealer = Sealer(self.zmq, curve) if curve is not None else None
        # backpressure signals refused: from a host that runs none of the assignment's workers
        self.refused_signals = 0
        # hosts of the assignment's workers, and the (endpoints, routing) they were read from
        self._hosts: frozenset[str] = frozenset()
        self._hosts_of: tuple[Any, Any] = (None, None)
        self.acker_lock = threading.Lock()
        self.ledgers: dict[int, AckerLedger] = {}
        self.executors: dict[ExecutorId, Executor] = {}
        self.data_peers = PeerQueues(SEND_QUEUE_BATCHES, SEND_QUEUE_HARD_LIMIT)
        self.control_peers = PeerQueues(SEND_QUEUE_BATCHES, SEND_QUEUE_HARD_LIMIT)
        # remote task -> until when it is backpressured (monotonic); written from the control port
        self.remote_bp: dict[int, float] = {}
        # this worker's busy fraction (measured at the data receive) and what its peers announce
        # of theirs (heard on the control port), for the load-aware shuffles
        self.loads = PeerLoads()
        # executors removed by a hot update that are still finishing what they hold
        self.retiring: list[Executor] = []
        # task -> a retiring spout executor of it, for the completions of its pending trees
        self.retiring_spouts: dict[int, Executor] = {}
        # the routing the loop's data receive last dispatched with
        self.recv_routing: Routing | None = None
        # when a stop was requested (SIGTERM), monotonic; see `request_stop`
        self.stop_requested: float | None = None
        # asked to stop, keep serving the slot until its next worker registered, at most this
        # long (squall.worker.handover); 0: stop at once
        self.handover_secs = handover_secs
        # ZooKeeper refuses this worker's credentials (ACLs), warned once per refusal: it cannot
        # see a successor come then
        self.zk_refused = False
        # seconds each step of the start took (logged once registered; issue 12's recovery)
        self.startup: dict[str, float] = {}
        self.endpoints: dict[WorkerSlot, Endpoint] = {}
        self.errors: collections.deque[tuple[str, int, str]] = collections.deque(maxlen=100)
        # the rate of the components' error logs and reports (set from the config by `_load`)
        self.error_throttle = ErrorThrottle()
        self.bad_frames = 0
        self.max_frame = wire.MAX_FRAME_BYTES  # set from the config and environment by `_load`
        self.unsendable = 0
        self.dropped = 0
        self.active = False
        self.storm_active = False
        self.peers_ready = False
        self.threads: list[threading.Thread] = []
        # the engine loop: it steps the executors and reads the ports (squall.worker.engine)
        self.engine: Engine | None = None
        # receive-data's state, kept by the loop: batches parked for a full inbox (in order), the
        # tasks announced backpressured, when last, and this worker's busy meter
        self._parked: dict[Inbox, collections.deque[list[list[Any]]]] = {}
        self._bp_tasks: set[int] = set()
        self._bp_sent = 0.0
        self._bp_at = time.monotonic()
        self._busy = BusyMeter(warmup=1)  # its first second is this worker's start, not its load
        self._next_announce = 0.0
        self.assignment: Assignment | None = None
        # dynamic log levels (squall.loglevels): the topology's config as last read, the levels
        # its loggers had before this worker first changed them, and when a setting lapses next
        self.log_config: dict[str, dict[str, Any]] = {}
        self.log_originals: dict[str, int] = {}
        self.log_next_check: float | None = None
        self.log_config_problem: str | None = None
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
        interval, per_interval, problems = throttle_settings(self.conf)
        for problem in problems:
            log.warning("worker %s: %s", self.slot.key(), problem)
        self.error_throttle = ErrorThrottle(interval, per_interval)
        try:
            self.max_frame, source = max_frame_bytes(self.conf, os.environ)
        except ValueError as exc:
            from squall.errors import NO_VALUE, Problem, TopologyError

            raise TopologyError([Problem("", NO_VALUE, str(exc))]) from None
        if source != "default":
            log.info("worker %s: the largest frame its ports take is %d bytes (%s)", self.slot.key(),
                     self.max_frame, source)
        if any(c.stateful for c in self.spec.components):
            # a state provider that cannot be used (a Redis that cannot be reached) stops the
            # worker at its start, named, before it takes a tuple
            from squall.errors import NO_VALUE, Problem, TopologyError
            from squall.statebackend import PROVIDER_CONFIG_KEY, StateBackendError, open_provider

            try:
                open_provider(self.conf)
            except StateBackendError as exc:
                raise TopologyError([Problem(f"spec.config.{PROVIDER_CONFIG_KEY}", NO_VALUE, str(exc))]) from exc

    def _bind(self) -> None:
        if self.sealer is not None:
            self.sealer.start()
        self.data_sock = self.zmq.socket(zmq.PULL)
        self.data_sock.setsockopt(zmq.RCVHWM, SOCKET_HWM)
        self.data_sock.setsockopt(zmq.LINGER, 0)
        # zmq refuses a larger frame from its header, before buffering it (transport.max_frame_bytes)
        self.data_sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame)
        if self.sealer is not None:
            self.sealer.server(self.data_sock, "data port")
        _while_in_use(lambda: self.data_sock.bind(f"tcp://{self.bind_host}:{self.slot.port}"),
                      f"slot port {self.slot.port}", self.stop_event, on_busy=self._claim_slot)
        self.control_sock = self.zmq.socket(zmq.PULL)
        self.control_sock.setsockopt(zmq.LINGER, 0)
        self.control_sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame)
        if self.sealer is not None:
            self.sealer.server(self.control_sock, "control port")
        self.control_port = self.control_sock.bind_to_random_port(f"tcp://{self.bind_host}")
        if self.sealer is not None:
            self.sealer.watch()

    def _claim_slot(self) -> None:
        """The slot's port is held (pods of one node sharing its network): its previous worker
        may be serving the slot until its successor is there (squall.worker.handover); removing
        the slot's endpoint tells it this worker is, so it leaves and frees the port."""
        try:
            self.state.remove_endpoint(self.topology_id, self.slot)
        except Exception as exc:  # it will still leave at the end of its window
            log.warning("worker %s: could not tell the slot's previous worker to leave: %r", self.slot.key(), exc)

    def start(self) -> None:
        from squall.errors import TopologyError
        from squall.models.cluster import LOAD_ERROR_COMPONENT

        t0 = time.monotonic()
        try:
            self._load()
        except TopologyError as exc:
            # the operator runs no user code: a class missing from this image shows on the Topology
            self.state.report_error(self.topology_id, LOAD_ERROR_COMPONENT, ErrorInfo(
                component=LOAD_ERROR_COMPONENT, task=-1, time_secs=time.time(), host=self.host,
                port=self.slot.port, error="\n".join(exc.lines())))
            raise
        t_load = time.monotonic()
        self._bind()
        if self.metrics_port is not None:
            registry = metrics.registry_for(self.figures)
            port = self.metrics_port
            self.http = _while_in_use(lambda: health.HealthServer(
                self.metrics_bind, port, self.not_ready, self.not_alive,
                lambda accept: metrics.exposition(registry, accept),
            ).start(), f"metrics port {self.metrics_port}", self.stop_event)
        self.endpoint = Endpoint(host=self.host, port=self.slot.port, control_port=self.control_port, pid=os.getpid(),
                                 metrics_port=self.http.port if self.http is not None else 0)
        # the state layer registers the (ephemeral) endpoint again in every new session; the
        # listener re-reads everything then, since watches do not survive a session
        self.state.add_session_listener(self._session_resumed)
        t_bind = time.monotonic()
        self.routing = Routing(build_plan(self.topology, self.streams, self.base.component_executors), frozenset(), {}, {}, {})
        self.engine = Engine(self, self.data_sock, self.control_sock, peer_addresses=self.sealer is None)
        self.refresh()  # the first executors, handed to the loop
        self.engine.start()
        self.threads.append(self.engine.thread)
        for name, target in (
            ("transfer-data", lambda: self._transfer(self.data_peers, "port", "transfer-data")),
            ("transfer-control", lambda: self._transfer(self.control_peers, "control_port", "transfer-control")),
        ):
            t = NamedThread(target=target, name=name, daemon=True)
            t.start()
            self.threads.append(t)
        # registered last: peers (and the slot's previous worker, which leaves when it sees this,
        # squall.worker.handover) find a worker whose executors already run; the endpoints
        # watch then wakes the main loop, whose refresh activates the spouts
        t_run = time.monotonic()
        self.state.register_endpoint(self.topology_id, self.slot, self.endpoint)
        self.wake.set()
        now = time.monotonic()
        self.startup.update(load=t_load - t0, bind=t_bind - t_load, executors=t_run - t_bind, register=now - t_run)
        log.info("worker %s registered %.2fs after its process started (%s)", self.slot.key(),
                 _process_age(), ", ".join(f"{k} {v:.2f}s" for k, v in self.startup.items()))

    # -- refresh-connections and refresh-active ----------------------------------------------
    def _watch(self, *_args: Any) -> None:
        self.wake.set()

    def _session_resumed(self, new_session: bool) -> None:
        log.info("worker %s: ZooKeeper is back%s", self.slot.key(), " in a new session" if new_session else "")
        self.zk_reconnects += 1
        self.zk_sessions_expired += new_session
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
        if self.stop_requested is not None:
            # leaving: the endpoint is the slot's next worker's now (or it removed it to say it
            # is coming); taking it back would turn peers away from it
            return False
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
        self._read_log_config()
        assignment = self.state.get_assignment(self.topology_id, watch=self._watch)
        endpoints = self.state.get_endpoints(self.topology_id, watch=self._watch)
        if endpoints != self.endpoints:
            # a peer at a new address: the transfer threads connect to it again
            self.peer_reconnects += sum(
                1 for s, ep in endpoints.items()
                if s != self.slot and (old := self.endpoints.get(s)) is not None
                and (old.host, old.port) != (ep.host, ep.port)
            )
            self.endpoints = endpoints
            if self.stop_requested is not None and self._successor():
                self.wake.set()  # leave at the next turn, not after a heartbeat period
        if assignment is not None and (assignment != self.assignment or base.component_executors != self.base.component_executors):
            self.base = base
            self._apply_assignment(assignment)
        if not self.peers_ready:
            # spouts start once every worker of the assignment listens, so the first tuples are
            # not dropped; a peer lost later does not deactivate them (its tuples time out and
            # are replayed once nimbus has moved its executors)
            slots_needed = set(self.routing.task_slot.values())
            self.peers_ready = bool(slots_needed) and all(s in self.endpoints for s in slots_needed)
        active = self.storm_active and self.peers_ready
        if active != self.active:
            self.active = active
            if self.engine is not None:
                self.engine.ring()  # spouts (de)activate at their next step

    def _read_log_config(self) -> None:
        """The topology's dynamic log levels from ZooKeeper (watched), applied at once."""
        stored = self.state.get_log_config(self.topology_id, watch=self._watch)
        raw = {} if stored is None else {k: v.model_dump() for k, v in stored.loggers.items()}
        try:
            self.log_config = loglevels.parse_config(raw)
            self.log_config_problem = None
        except loglevels.LogLevelError as exc:
            if self.log_config_problem != str(exc):
                self.log_config_problem = str(exc)
                log.warning("worker %s: the topology's log config is not used: %s", self.slot.key(), exc)
            return
        self.apply_log_levels(time.time())

    def apply_log_levels(self, now: float) -> None:
        """Set the loggers the log config names; give back their own level to those whose
        setting lapsed or left it (`now`: Unix time)."""
        def logger(name: str) -> logging.Logger:
            return logging.getLogger(None if name == loglevels.ROOT else name)

        names = set(self.log_config) | set(self.log_originals)
        plan = loglevels.plan(self.log_config, now, self.log_originals,
                              {name: logger(name).level for name in names})
        for name, level in plan.set.items():
            lg = logger(name)
            self.log_originals.setdefault(name, lg.level)
            lg.setLevel(level)
            log.warning("worker %s: logger %s set to %s (dynamic log level%s)", self.slot.key(), name,
                        logging.getLevelName(level), self._lapse(name))
        for name, level in plan.reset.items():
            logger(name).setLevel(level)
            del self.log_originals[name]
            log.warning("worker %s: logger %s back to %s (its dynamic log level lapsed or was removed)",
                        self.slot.key(), name, logging.getLevelName(level))
        self.log_next_check = plan.next_check

    def _lapse(self, name: str) -> str:
        expires = self.log_config.get(name, {}).get("expires")
        return "" if expires is None else f", for {max(0.0, expires - time.time()):.0f}s"

    def _apply_assignment(self, assignment: Assignment) -> None:
        """Hot update: start executors newly assigned here, retire removed ones, keep the rest.

        Runs on the main thread and never waits for an executor: new executors are built
        against the new plan (no routing is published before they exist), one new routing is
        published, and removed executors retire in their own threads (`_reap` collects them)."""
        plan = build_plan(self.topology, self.streams, self.base.component_executors)
        slots = assignment.slots()
        mine = {e for e, s in slots.items() if s == self.slot}
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
            handover = self._rehome_trees(plan.acker_tasks, local_tasks)
        retire_by = now + float(self.spec.message_timeout_secs) + 5.0
        for e in [e for e in self.executors if e not in mine]:
            gone = self.executors.pop(e)
            gone.retire(retire_by)
            self.retiring.append(gone)
            log.info("executor %s of %s leaves %s; it finishes what it holds", e, gone.component, self.slot.key())
        new_execs: list[Executor] = []
        for e in sorted(mine):
            if e in self.executors:
                continue
            comp = plan.task_component[e[0]]
            if comp == ACKER:
                continue
            if comp == CHECKPOINT_COMPONENT:
                from squall.checkpoint import CheckpointSpout

                ex: Executor = SpoutExecutor(self, plan, e, comp, CheckpointSpout, dict(self.conf))
                ex.isolated = is_isolated(CheckpointSpout, self.conf)
                self.executors[e] = ex
                new_execs.append(ex)
                continue
            spec = next(c for c in self.spec.components if c.name == comp)
            conf = {**self.conf, **spec.config}
            cls = self.classes[comp]
            if plan.checkpointing:
                from squall.checkpoint import wrap

                cls, conf = wrap(cls, comp, plan, conf, spout=comp in plan.spouts, spec=spec)
            if comp in plan.spouts:
                ex = SpoutExecutor(self, plan, e, comp, cls, conf)
            else:
                tick = spec.config.get("topology.tick.tuple.freq.secs", self.spec.tick_tuple_freq_secs)
                # a windowed bolt in a checkpointed topology fires its time windows on ticks
                tick = conf.get("squall.checkpoint.tick.secs", tick)
                ex = BoltExecutor(self, plan, e, comp, cls, conf, float(tick) if tick else None)
            ex.isolated = is_isolated(self.classes[comp], conf)
            self.executors[e] = ex
            new_execs.append(ex)
        for ex in new_execs:
            ex.loads = self.loads
        self.acker_executors = [e for e in sorted(mine) if plan.task_component[e[0]] == ACKER]
        task_dest: dict[int, Any] = dict(task_slot)
        spout_inbox: dict[int, Inbox] = {}
        tree_done: dict[int, Inbox] = {}
        inbox_tasks: dict[Inbox, tuple[int, ...]] = {}
        for ex in self.executors.values():
            inbox_tasks[ex.inbox] = tuple(ex.tasks)
            done_q = ex.tree_done if isinstance(ex, BoltExecutor) and ex.windowed else None
            for t in ex.tasks:
                task_dest[t] = ex.inbox
                if ex.kind == "spout":
                    spout_inbox[t] = ex.inbox
                elif done_q is not None:
                    tree_done[t] = done_q
        for t in self.ledgers:
            task_dest.pop(t, None)
        self.assignment = assignment
        self.routing = Routing(
            plan, local_tasks, task_dest, task_slot, spout_inbox, inbox_tasks, frozenset(slots.values()), tree_done
        )
        self._retiring_spouts()
        if handover:
            # in-flight trees go to their acker's new home (a local ledger, or a peer)
            self.handle_control(handover, None)
        assert self.engine is not None
        for ex in new_execs:
            self.engine.add(ex)
        log.info(
            "worker %s: %d executors (%d new, %d retiring), %d ackers",
            self.slot.key(), len(self.executors), len(new_execs), len(self.retiring), len(self.ledgers),
        )

    def _rehome_trees(self, acker_tasks: tuple[int, ...], local_tasks: frozenset[int]) -> list[list[int]]:
        """Hand the trees of acker tasks that leave this worker, and of every tree whose acker
        changes with the acker count (`root % numAckers`), to their new acker as acker messages
        (an init with the tree's XOR and spout task, or an ack for trees only acks have reached
        yet; a fail if one failed). XOR is order-free, so they merge with whatever the new acker
        already got. Drops the ledgers of tasks that left. Called with `acker_lock` held."""
        n = len(acker_tasks)
        count_changed = tuple(self.routing.plan.acker_tasks) != tuple(acker_tasks)
        out: list[list[int]] = []
        for t in list(self.ledgers):
            gone = t not in local_tasks
            if not gone and not count_changed:
                continue
            led = self.ledgers[t]
            for bucket in led.pending._buckets:
                for root, (xor, spout, failed) in list(bucket.items()):
                    dest = acker_tasks[root % n] if n else None
                    if dest == t and not gone:
                        continue
                    del bucket[root]
                    led.pending.size -= 1
                    if dest is None:
                        continue
                    if spout >= 0:
                        out.append([wire.INIT, dest, root, xor, spout])
                    elif xor:
                        out.append([wire.ACK, dest, root, xor, 0])
                    if failed:
                        out.append([wire.FAIL, dest, root, 0, 0])
            if gone:
                del self.ledgers[t]
        return out

    def _retiring_spouts(self) -> None:
        self.retiring_spouts = {t: ex for ex in self.retiring if ex.kind == "spout" for t in ex.tasks}

    def _reap(self, now: float) -> None:
        """Collect retired executors that finished; tell the others once every reader of the
        routing (executors, the receive thread) has moved to the current one, after which no
        one can hand them anything new; stop those past their deadline. Never waits."""
        routing = self.routing
        live = list(self.executors.values())
        caught_up = self.recv_routing is routing and all(
            ex.routing is routing or ex.routing is None for ex in live + self.retiring
        )
        changed = False
        for ex in list(self.retiring):
            if caught_up:
                ex.settled = True
            if ex.done:
                self.retiring.remove(ex)
                changed = True
                log.info("executor %s of %s retired from %s", ex.id, ex.component, self.slot.key())
            elif now > ex.retire_by and not ex.stop_event.is_set():
                log.warning("executor %s of %s did not finish in time; stopping it", ex.id, ex.component)
                ex.stop()
        if changed:
            self._retiring_spouts()

    def loop_failed(self, exc: BaseException) -> None:
        log.error("worker %s: the engine loop failed; the worker exits so that it is restarted", self.slot.key(),
                  exc_info=exc)
        self.exit_code = 3
        self.stop_event.set()

    def executor_died(self, ex: Executor, exc: BaseException) -> None:
        log.error("executor %s died: %s; the worker exits so that it is restarted", ex.id, exc)
        self.exit_code = 3
        self.stop_event.set()

    # -- acker traffic -----------------------------------------------------------------------
    def handle_control(self, items: list[list[int]], caller: HostedExecutor | None, trusted: bool = True,
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
        routing = self.routing
        ledgers = self.ledgers
        done: list[list[int]] = []
        remote: dict[WorkerSlot, list[list[int]]] = {}
        mine: dict[int, list[list[int]]] = {}
        signals: list[list[int]] = []
        bad, dropped = sort_control(items, trusted, ledgers, routing.task_slot, mine, done, signals, remote)
        if dropped:
            self.dropped += dropped
        for it in signals:
            # a peer's task is (1) or is no longer (0) backpressured, or a peer announces its
            # load; without CURVE, only a host running one of the assignment's workers may say
            # so (else anyone reaching the control port could throttle or steer this worker)
            if peer is not None and not self._known_peer(peer):
                self.refused_signals += 1
                if self.refused_signals <= 10 or self.refused_signals % 1000 == 0:
                    log.warning("worker %s refused a backpressure signal from %s: no worker of the "
                                "assignment runs there (%d so far)", self.slot.key(), peer, self.refused_signals)
                continue
            if it[0] == wire.LOAD:
                self.loads.hear((it,), time.monotonic())
            elif it[2]:
                self.remote_bp[it[1]] = time.monotonic() + BP_TTL_SECS
            else:
                self.remote_bp.pop(it[1], None)
        if mine:
            with self.acker_lock:
                for task, batch in mine.items():
                    led = ledgers.get(task)
                    if led is not None:
                        led.apply(batch, done)
        own: list[list[int]] = []
        if bad:
            self.bad_frame(wire.WireError(f"{bad} malformed acker messages in a control frame"))
        if not done and not remote:
            return own
        local: dict[Inbox, list[list[int]]] = {}
        trees: dict[Inbox, list[list[int]]] = {}
        own_tasks = caller.tasks if caller is not None and caller.kind == "spout" else ()
        dropped = route_done(done, own_tasks, routing.spout_inbox, routing.tree_done, routing.task_slot, self.slot,
                             self.retiring_spouts, own, local, trees, remote)
        if dropped:
            self.dropped += dropped
        for inbox, batch in local.items():
            self._put(inbox, batch)
        for inbox, batch in trees.items():
            if not inbox.offer(batch):  # full: the window times the tree out and fails its spout trees
                self.dropped += len(batch)
        for slot, batch in remote.items():
            self._send_control(slot, batch, caller)
        return own

    def _send_control(self, slot: WorkerSlot, batch: list[list[int]], caller: HostedExecutor | None) -> None:
        peers = self.control_peers
        if caller is None:
            peers.offer(slot, batch, force=True)
        elif not peers.offer(slot, batch):
            # sent again at its next flush; until then the executor takes no new input
            caller.out.control.extend(batch)

    def init_trees(self, inits: list[tuple[int, int, int]], spill: list[list[int]]) -> list[list[int]]:
        """Register a spout's new trees in this worker's ackers (`root % numAckers` names one of
        them). Returns completions of trees with no edges, for the calling spout. A root whose
        acker is not here (the spout picked it just before the acker count or placement changed)
        becomes an init message in `spill`, which the spout sends like its other acker traffic."""
        by_task = group_inits(inits, self.routing.plan.acker_tasks)
        done: list[list[int]] = []
        with self.acker_lock:
            for t, entries in by_task.items():
                led = self.ledgers.get(t)
                if led is None:
                    spill.extend([wire.INIT, t, root, xor, task] for root, xor, task in entries)
                else:
                    led.init_new(entries, done)
        return done

    def _put(self, q: Inbox, item: Any) -> bool:
        """Completions into a local spout's inbox, without waiting (the engine loop that steps
        the spout may be the caller): past the inbox's bound if need be, since completions are
        bounded by the spout's pending trees (each completes once). Dropped if the spout left:
        they are of no use to anyone then."""
        if q.offer(item):
            return True
        if q not in self.routing.inbox_tasks and all(ex.inbox is not q for ex in list(self.retiring)):
            self.dropped += len(item)
            return False
        q.force(item)
        return True

    def _known_peer(self, peer: str) -> bool:
        """Whether `peer` (an IP address) is the host of a worker of the current assignment."""
        endpoints, routing = self.endpoints, self.routing
        if endpoints is not self._hosts_of[0] or routing is not self._hosts_of[1]:
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
            self._hosts = frozenset(hosts)
            self._hosts_of = (endpoints, routing)
        return peer in self._hosts

    # -- receive (the engine loop calls these: squall.worker.engine) ---------------------------
    def bad_frame(self, exc: Exception) -> None:
        self.bad_frames += 1
        if self.bad_frames <= 10 or self.bad_frames % 1000 == 0:
            log.warning("worker %s dropped a bad frame (%d so far): %s", self.slot.key(), self.bad_frames, exc)

    def receive_control(self, items: list[list[int]], peer: str | None) -> None:
        """Acker messages and signals from the control port; `peer`: the sender's address on
        plain TCP (None under CURVE, where every peer is one of the topology's workers)."""
        self.handle_control(items, None, trusted=False, peer=peer)

    def data_turn(self) -> tuple[bool, int]:
        """Each turn of the engine loop, before it reads the data port: move parked batches into
        inboxes that have room again, re-dispatch those parked for an inbox that left the
        routing, and announce which local tasks are backpressured. Returns whether the port may
        be read (no inbox past PARK_LIMIT) and how long the loop may sleep (ms)."""
        routing = self.routing
        self.recv_routing = routing
        parked = self._parked
        if parked:
            for inbox in list(parked):
                backlog = parked[inbox]
                if inbox not in routing.inbox_tasks:
                    del parked[inbox]
                    while backlog:
                        self.dispatch_data(backlog.popleft(), checked=True)
                    continue
                while backlog and inbox.offer(backlog[0]):
                    backlog.popleft()
                if not backlog:
                    del parked[inbox]
        bp = {t for inbox in parked for t in routing.inbox_tasks.get(inbox, ())}
        now = time.monotonic()
        if bp:
            held, bp_secs = now - self._bp_at, self.bp_secs
            for t in bp:
                bp_secs[t] = bp_secs.get(t, 0.0) + held
        self._bp_at = now
        if bp != self._bp_tasks or (bp and now - self._bp_sent > BP_REFRESH_SECS):
            self._announce(bp, routing)
            self._bp_sent = now
        if now >= self._next_announce:
            self._next_announce = now + ANNOUNCE_SECS
            self._announce_load(bp, routing)
        if not parked:
            return True, 100
        full = any(len(b) >= PARK_LIMIT for b in parked.values()) or self.data_peers.over_hard_limit()
        return not full, 1

    def _announce(self, bp: set[int], routing: Routing) -> None:
        """Tell every peer which local tasks are (still) backpressured and which are not any more."""
        items = [[wire.BACKPRESSURE, t, 1, 0, 0] for t in sorted(bp)]
        items += [[wire.BACKPRESSURE, t, 0, 0, 0] for t in sorted(self._bp_tasks - bp)]
        self._bp_tasks = bp
        if not items:
            return
        for slot in routing.slots:
            if slot != self.slot:
                self.control_peers.offer(slot, list(items), force=True)

    def _announce_load(self, bp: set[int], routing: Routing) -> None:
        """Measure how busy this worker was since the last time and tell every peer, with each
        local task's inbox fill (a task whose batches are parked counts as full)."""
        busy = self._busy.sample()
        self.loads.here_since = self._busy.since
        self.loads.busy_here = busy
        fill: dict[int, float] = {}
        for inbox, tasks in routing.inbox_tasks.items():
            f = 1.0 if tasks and tasks[0] in bp else inbox.qsize() / (inbox.maxsize or 1)
            for t in tasks:
                fill[t] = f
        peers = [slot for slot in routing.slots if slot != self.slot]
        if not peers or not fill:
            return
        items = load_items(busy, fill, self._busy.clock() - self._busy.since)
        for slot in peers:
            # advisory: a peer that is not taking control traffic misses this one
            self.control_peers.offer(slot, list(items))

    def dispatch_data(self, items: list[Any], checked: bool = False) -> None:
        """Tuples from the network -> the inboxes of their executors, shape-checked on the way.

        Never blocks: a batch for a full inbox is parked (per inbox, in order) and the rest go
        on; tuples for a task that moved to another worker are forwarded there."""
        groups: dict[Any, list[list[Any]]] = {}
        # the per-tuple loop (shape check, grouping by destination) runs compiled
        bad, dropped = sort_data(items, checked, self.routing.task_dest, self.slot, groups)
        if dropped:
            self.dropped += dropped
        if bad:
            self.bad_frame(wire.WireError(f"{bad} malformed tuples in a data frame"))
        parked = self._parked
        for key, batch in groups.items():
            if type(key) is not Inbox:
                self.data_peers.offer(key, batch, force=True)  # the task moved: forward
                continue
            backlog = parked.get(key)
            if backlog is not None:
                backlog.append(batch)
                continue
            if not key.offer(batch):
                parked[key] = collections.deque([batch])

    # -- transfer ----------------------------------------------------------------------------
    def _address_of(self, port_attr: str) -> Callable[[WorkerSlot], str | None]:
        def address_of(slot: WorkerSlot) -> str | None:
            ep = self.endpoints.get(slot)
            return None if ep is None else f"tcp://{ep.host}:{getattr(ep, port_attr)}"

        return address_of

    def _assigned(self, slot: WorkerSlot) -> bool:
        return slot in self.routing.slots

    def _pack(self, items: list[Any]) -> bytes | None:
        # under the receivers' maximum by what zmq adds to a frame (CURVE's box, its headers)
        frame, bad = wire.pack_data(items, self.max_frame - FRAME_OVERHEAD)
        if bad:
            self._unsendable(bad)
        return frame

    def _count_dropped(self, n: int) -> None:
        self.dropped += n

    def direct_sender(self) -> DirectSender:
        """An isolated executor's own sockets to its peers' data ports (transport.DirectSender)."""
        return DirectSender(self.zmq, self._address_of("port"), self._assigned, self._pack, self._count_dropped,
                            self.sealer.client if self.sealer is not None else None)

    def shared_sender(self) -> DirectSender:
        """The engine loop's sockets to its peers' data ports, shared by the executors it steps:
        one frame per peer per turn with all their batches for it (transport.DirectSender)."""
        return DirectSender(self.zmq, self._address_of("port"), self._assigned, self._pack, self._count_dropped,
                            self.sealer.client if self.sealer is not None else None, combine=self._combine)

    def _combine(self, items: list[Any]) -> bytes | None:
        """A frame of several executors' batches, or None when it is not one plain frame (too
        large, or an item the wire cannot encode): then each batch is packed on its own."""
        frame, bad = wire.pack_data(items, self.max_frame - FRAME_OVERHEAD)
        return None if bad else frame

    def _transfer(self, peers: PeerQueues, port_attr: str, name: str) -> None:
        turns = self.loop_turns

        def turned() -> None:
            turns[name] = time.monotonic()

        run_transfer(self.zmq, peers, self._address_of(port_attr), self._assigned, self._pack, self.stop_event,
                     self._count_dropped, turned, self.sealer.client if self.sealer is not None else None)

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

    # -- readiness, liveness, metrics (the HTTP thread calls these) -------------------------
    def probe(self) -> health.Probe:
        zk = self.state.ready
        endpoint: bool | None = None
        zk_error = ""
        if zk and hasattr(self, "endpoint"):
            try:
                endpoint = self.state.owns_endpoint(self.topology_id, self.slot, self.endpoint)
            except Exception as exc:  # ZooKeeper did not answer in time: not ready, say so
                endpoint, zk_error = False, f"{type(exc).__name__} {exc}".strip()
        a = self.assignment
        threads = self._threads()
        return health.Probe(
            zk_connected=zk,
            endpoint=endpoint,
            zk_error=zk_error,
            assignment_loaded=a is not None and self.slot in set(a.slots().values()),
            loops=dict(self.loop_turns),
            dead=[t.name for t in threads if t.ident is not None and not t.is_alive()],
        )

    def not_ready(self) -> list[str]:
        return health.readiness_problems(self.probe(), time.monotonic())

    def _threads(self) -> list[threading.Thread]:
        """The worker's threads: the loop, the transfers, isolated executors' own."""
        return [*self.threads, *(ex.thread for ex in list(self.executors.values()) if ex.thread is not None)]

    def not_alive(self) -> list[str]:
        threads = self._threads()
        probe = health.Probe(zk_connected=True, endpoint=True, assignment_loaded=True, loops=dict(self.loop_turns),
                             dead=[t.name for t in threads if t.ident is not None and not t.is_alive()])
        return health.liveness_problems(probe, time.monotonic())

    def figures(self) -> metrics.WorkerFigures:
        bp = self.bp_secs
        execs = [
            metrics.ExecutorFigures(
                component=ex.component, tasks=ex.id, kind=ex.kind, stats=ex.stats,
                inbox_batches=ex.inbox.qsize(),
                pending=ex.pending_count() if isinstance(ex, SpoutExecutor) else 0,
                backpressure_secs=sum(bp.get(t, 0.0) for t in ex.tasks),
            )
            for ex in list(self.executors.values())
        ]
        send: dict[str, int] = {}
        for peers in (self.data_peers, self.control_peers):
            for slot, q in list(peers.queues.items()):
                send[slot.key()] = send.get(slot.key(), 0) + len(q)
        # frames held for a slow peer, by the loop's sockets and isolated executors' own
        senders = {id(d): d for ex in list(self.executors.values()) if (d := ex.direct_data) is not None}
        for direct in senders.values():
            for slot, n in direct.held().items():
                send[slot.key()] = send.get(slot.key(), 0) + n
        return metrics.WorkerFigures(
            topology=self.topology_id, worker=self.slot.key(), executors=execs, send_queue_batches=send,
            bad_frames=self.bad_frames, refused=self._refused(), dropped=self.dropped, unsendable=self.unsendable,
            peer_reconnects=self.peer_reconnects, zk_reconnects=self.zk_reconnects,
            zk_sessions_expired=self.zk_sessions_expired, errors_not_logged=self.error_throttle.suppressed_total,
            user=[c.user_metrics for ex in list(self.executors.values()) for c in list(ex.contexts.values())
                  if c.user_metrics is not None],
        )

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
        return WorkerHeartbeat(time_secs=now, uptime_secs=now - self.started, executors=execs, bad_frames=self.bad_frames,
                               refused=self._refused())

    def _refused(self) -> int:
        return self.refused_signals + (self.sealer.refused if self.sealer is not None else 0)

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
        turns = self.loop_turns
        while not self.stop_event.is_set():
            now = time.monotonic()
            turns["main"] = now
            GC_POLICY.tick()
            if self.retiring:
                self._reap(now)
            if self.stop_requested is not None and self._leaving(now):
                self.stop_event.set()
                break
            if self.log_next_check is not None and time.time() >= self.log_next_check:
                self.apply_log_levels(time.time())
            beat_due = now >= next_hb
            if beat_due:
                next_hb = now + hb_every
                for line in self.error_throttle.summaries(now):
                    log.error("%s", line)
                with self.acker_lock:
                    for led in self.ledgers.values():
                        led.expire(now)
            try:
                if not self.state.ready:
                    # ZooKeeper is away (calls would block): the data plane goes on without it
                    raise NotConnected("not connected to ZooKeeper")
                asked = beat_due  # whether ZooKeeper is asked anything this turn
                if self.wake.is_set() or now >= next_poll:
                    self.wake.clear()
                    next_poll = now + poll_every
                    asked = True
                    self.refresh()
                if beat_due:
                    if self._registered():
                        self.state.worker_heartbeat(self.topology_id, self.slot, self.heartbeat())
                        self._flush_errors()
                if zk_down:
                    zk_down = False
                    log.info("worker %s: ZooKeeper reachable again", self.slot.key())
                if self.zk_refused and asked:
                    self.zk_refused = False
                    log.info("worker %s: ZooKeeper accepted again this worker's credentials", self.slot.key())
            except CONNECTION_ERRORS as exc:
                if not zk_down:
                    zk_down = True
                    log.warning("worker %s: ZooKeeper unreachable (%s); tuples keep flowing, retrying",
                                self.slot.key(), type(exc).__name__)
                self.wake.set()  # refresh as soon as it is back
                self.state.wait_ready(min(hb_every, 0.5))
                continue
            except ACCESS_ERRORS as exc:
                # the ACLs-on upgrade: the nodes were closed to credentials this worker lacks
                # until it is rolled onto them; its tuples keep flowing meanwhile
                if not self.zk_refused:
                    self.zk_refused = True
                    log.warning("worker %s: ZooKeeper refuses this worker (%s): its nodes' ACLs do not admit its "
                                "credentials (%s); tuples keep flowing, retrying on every heartbeat",
                                self.slot.key(), type(exc).__name__,
                                f"user {self.state.credentials.user!r}" if self.state.credentials else "none")
            except Exception:
                log.exception("refresh or heartbeat failed; retrying")
            if not self.active and self.storm_active and not self.wake.is_set():
                # waiting for peers' endpoints: poll quickly
                self.wake.wait(0.05)
                self.wake.set()
                continue
            until = min(next_hb, next_poll) - time.monotonic()
            self.wake.wait(max(0.0, min(until, 0.05) if self.retiring else until))
        return self.exit_code

    def _successor(self) -> bool:
        """Whether ZooKeeper's endpoint of the slot is another worker's (or gone)."""
        return hasattr(self, "endpoint") and self.endpoints.get(self.slot) != self.endpoint

    def _leaving(self, now: float) -> bool:
        a = self.assignment
        return should_leave(Leaving(
            now=now, stop_requested=self.stop_requested, handover_secs=self.handover_secs,
            assigned=a is not None and self.slot in a.slots().values(),
            successor=self._successor(), zk_ready=self.state.ready and not self.zk_refused,
            retiring=bool(self.retiring),
        ))

    def request_stop(self) -> None:
        """SIGTERM: stop, but let executors that moved away (the slot left the assignment) hand
        on what they hold first, for at most DRAIN_SECS (supervisors wait longer than that); with
        a hand-over window, serve the slot until its next worker registered
        (squall.worker.handover)."""
        if self.stop_requested is None:
            self.stop_requested = time.monotonic()
            if self.handover_secs > 0 and not self.stop_event.is_set():
                log.info("worker %s asked to stop: serving the slot until its next worker registers, "
                         "for at most %.0fs", self.slot.key(), self.handover_secs)
        self.wake.set()

    def shutdown(self) -> None:
        self.stop_event.set()
        self.active = False
        # the loop closes the executors it steps, spouts first: they fail what is pending, so
        # nothing is forgotten; isolated executors stop on their own threads
        isolated = [ex for ex in [*self.executors.values(), *self.retiring] if ex.thread is not None]
        for ex in isolated:
            ex.stop()
        if self.engine is not None:
            self.engine.ring()
            self.engine.join(5.0)
        for ex in isolated:
            assert ex.thread is not None
            ex.thread.join(5.0)
        for t in self.threads:
            t.join(2.0)
        if self.http is not None:
            self.http.stop()
        try:
            if not self.state.ready:  # ZooKeeper away: its calls would block until it is back
                raise NotConnected("not connected to ZooKeeper")
            self._flush_errors()
            # only a worker that started says it is leaving: a final heartbeat from one whose start
            # failed (a class missing from its image) would tell nimbus the load error is old. And
            # only while the slot is still its own: the slot's next worker (a replacement pod
            # started while this one terminates) has registered its endpoint and heartbeats there
            if hasattr(self, "endpoint") and self.state.owns_endpoint(self.topology_id, self.slot, self.endpoint):
                self.state.worker_heartbeat(self.topology_id, self.slot, self.heartbeat())
                self.state.remove_own_endpoint(self.topology_id, self.slot)
        except Exception:
            pass
        if self.sealer is not None:
            self.sealer.stop()
        # start() may have failed before binding (a port in use): close what exists
        for sock in (getattr(self, "data_sock", None), getattr(self, "control_sock", None)):
            if sock is not None:
                sock.close(0)
        # an executor's thread closes its own sockets when it ends; one that did not end (stuck in
        # a user's component) still holds them, and term() would wait for it forever
        stuck = [f"executor {ex.id}" for ex in [*self.executors.values(), *self.retiring]
                 if ex.thread is not None and ex.thread.is_alive()]
        if self.engine is not None and self.engine.thread.is_alive():
            stuck.append("the engine loop")
        if stuck:
            log.warning("%s did not stop: their sockets stay open until the process exits", ", ".join(stuck))
        else:
            if self.engine is not None:
                self.engine.close()
            self.zmq.term()


def _process_age() -> float:
    """Seconds since this process started (the interpreter's own start and the imports
    included), from /proc; 0 where that cannot be read."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def has_windows(state: ClusterState, topology: str) -> bool:
    """Whether the topology as submitted has a windowed bolt (a bolt with `window`): what the
    worker's allocator goes by under `auto` (squall.worker.allocator). False when it cannot be
    read (the topology is gone, or ZooKeeper is away): the worker then keeps CPython's own."""
    try:
        base = state.get_storm(topology)
        spec = Topology.model_validate(base.topology).spec if base is not None else None
    except Exception as exc:  # a start-up hint only: the worker reads its topology again (`_load`)
        log.info("topology %s not read for the allocator (%s): CPython's own", topology, exc)
        return False
    return spec is not None and any(b.window is not None for b in spec.bolts)


def main(argv: list[str] | None = None) -> int:
    import argparse

    imported = _process_age()  # the interpreter and this module's imports

    p = argparse.ArgumentParser(prog="python -m squall.worker", description="Run one Squall worker slot.")
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string HOST:PORT[,...]")
    p.add_argument("--root", default="/squall", help="ZooKeeper root path")
    p.add_argument("--topology", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--port", type=int, required=True, help="slot port: data tuples arrive here")
    p.add_argument("--host", default=os.environ.get("SQUALL_WORKER_HOST", "127.0.0.1"), help="address peers connect to")
    p.add_argument("--bind", default=None, help="address to bind (default: --host)")
    p.add_argument("--search-path", action="append", default=[], help="directory holding component modules")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve /readyz, /healthz and /metrics on this port (0: any free port, published "
                        "in the worker's endpoint in ZooKeeper); default: no HTTP endpoint")
    p.add_argument("--metrics-bind", default=None, help="address the HTTP endpoint binds (default: --bind)")
    p.add_argument("--log-level", default=os.environ.get("SQUALL_LOG_LEVEL", "INFO"))
    p.add_argument("--curve-keys", default=None, metavar="DIR",
                   help="seal the transport with the topology's CURVE pair from DIR (curve.public, curve.secret); "
                        "without it, from $SQUALL_CURVE_PUBLIC_KEY and $SQUALL_CURVE_SECRET_KEY if set")
    p.add_argument("--zk-session-timeout", type=float,
                   default=float(os.environ.get("SQUALL_ZK_SESSION_TIMEOUT", "10")),
                   help="ZooKeeper session timeout asked of the server, seconds (it clamps it)")
    p.add_argument("--handover-secs", type=float,
                   default=float(os.environ.get("SQUALL_HANDOVER_SECS", "0")),
                   help="asked to stop (SIGTERM), keep serving the slot until its next worker has registered, "
                        "for at most this long (default: $SQUALL_HANDOVER_SECS, else 0: stop at once)")
    p.add_argument("--zk-auth-file", default=None,
                   help=f"file holding 'user:password' for ZooKeeper's digest ACLs (default: "
                        f"${ZK_AUTH_ENV}, else the file ${ZK_AUTH_FILE_ENV} names)")
    args = p.parse_args(argv)
    try:
        credentials = ZkCredentials.from_file(args.zk_auth_file) if args.zk_auth_file else ZkCredentials.from_env()
    except ValueError as exc:
        p.error(str(exc))
    import gc

    # Tuples, anchors and acker entries are acyclic: reference counting frees them. The cyclic
    # collector would otherwise run every 700 allocations and rescan every live pending tuple;
    # windowed bolts size its young generation to what they hold (gcpolicy.py)
    GC_POLICY.install()
    allocator.fix_mmap_threshold()
    logging.basicConfig(level=args.log_level, format=f"%(asctime)s worker {args.node}-{args.port} %(levelname)s %(name)s: %(message)s")
    from squall import _native

    log.info("hot path: %s", _native.reason)
    try:
        curve = read_keys(Path(args.curve_keys)) if args.curve_keys else keys_from_env(os.environ)
    except CurveKeyError as exc:
        log.error("worker %s-%s cannot start: %s", args.node, args.port, exc)
        return 2
    t_zk = time.monotonic()
    state = ClusterState.connect(args.zookeeper, root=args.root, session_timeout=args.zk_session_timeout,
                                 credentials=credentials)
    connected = time.monotonic() - t_zk
    if allocator.active is None:
        # `auto`: jemalloc for a topology with windows; re-executed on it before anything starts
        def _before_exec(decision: allocator.Decision) -> None:
            log.info("%s", decision.message)
            state.close()

        try:
            allocator.select(has_windows(state, args.topology), before_exec=_before_exec,
                             argv=None if argv is None else [sys.executable, "-m", "squall.worker", *argv])
        except ValueError as exc:
            log.error("worker %s-%s cannot start: %s", args.node, args.port, exc)
            state.close()
            return 2
    chosen = allocator.active
    assert chosen is not None
    (log.warning if chosen.warn else log.info)("%s", chosen.message)
    worker = Worker(state, args.topology, WorkerSlot(args.node, args.port), args.host, args.bind, tuple(args.search_path),
                    args.metrics_port, args.metrics_bind, curve, max(0.0, args.handover_secs))

    def _stop(_sig: int, _frame: Any) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker.startup.update(imports=imported, zookeeper=connected)
    code = 0
    try:
        worker.start()
        gc.freeze()  # what start-up loaded (modules, classes, the plan) is never garbage
        code = worker.run()
    finally:
        worker.shutdown()
        state.close()
    return code
