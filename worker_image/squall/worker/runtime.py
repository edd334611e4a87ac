"""One worker process: the executors of one slot, and the loops of seeds 000 and 003.

Threads: the engine loop (squall.worker.engine: both ports read, every executor stepped, one
frame per peer per turn), the data and control transfer threads (send queues -> one PUSH socket
per peer), isolated executors' own, and the main thread running refresh-connections,
refresh-active, heartbeats and error reports. The worker's state is squall.worker.workerstate's
holder; its jobs are the functions of acking, receive, send, hotupdate, refresh, levels and status.
"""

from __future__ import annotations

import functools
import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import zmq

from squall import serialization
from squall.models.cluster import (
    Endpoint,
    ErrorInfo,
)
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall.state import ACCESS_ERRORS, CONNECTION_ERRORS, NotConnected
from squall.worker import health, metrics
from squall.worker.errorlog import ErrorThrottle, throttle_settings
from squall.worker.engine import Engine
from squall.worker import acking, eventlog, hotupdate, levels, receive, refresh, send, status
from squall.worker.workerstate import WorkerState
from squall.worker.executor import Executor
from squall.gcpolicy import POLICY as GC_POLICY
from squall.worker.routing import Routing
from squall.worker.threads import NamedThread
from squall.worker.transport import (
    SOCKET_HWM,
    max_frame_bytes,
)

log = logging.getLogger("squall.worker")
T = TypeVar("T")

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


class Worker(WorkerState):
    """One worker process: its state (squall.worker.workerstate) with the process's life around
    it: load the topology, bind the ports, start the engine loop and the transfer threads, run
    the main loop (refresh, heartbeats, errors, hand-over), stop. Its jobs are the functions of
    the worker's modules; the names below are what the executors (squall.worker.host) and the
    engine loop (squall.worker.engine) call them by."""

    handle_control = acking.handle_control
    init_trees = acking.init_trees
    bad_frame = acking.bad_frame
    receive_control = receive.receive_control
    data_turn = receive.data_turn
    dispatch_data = receive.dispatch_data
    direct_sender = send.direct_sender
    shared_sender = send.shared_sender
    report_error = status.report_error
    probe = status.probe
    not_ready = status.not_ready
    not_alive = status.not_alive
    figures = status.figures
    heartbeat = status.heartbeat
    apply_log_levels = levels.apply_log_levels

    def refresh(self) -> None:
        refresh.refresh(self, self)

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
        self.conf: dict[str, Any] = hotupdate.topology_conf(self.topology, base.launch_time_secs, base.state_tasks,
                                                            self.topology_id)
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
                                 metrics_port=self.http.port if self.http is not None else 0,
                                 launch_secs=self.base.launch_time_secs)
        # the state layer registers the (ephemeral) endpoint again in every new session; the
        # listener re-reads everything then, since watches do not survive a session
        self.state.add_session_listener(functools.partial(refresh.session_resumed, self))
        t_bind = time.monotonic()
        self.routing = Routing(build_plan(self.topology, self.streams, self.base.component_executors), frozenset(), {}, {}, {})
        self.engine = Engine(self, self.data_sock, self.control_sock, peer_addresses=self.sealer is None)
        self.refresh()  # the first executors, handed to the loop
        self.engine.start()
        self.threads.append(self.engine.thread)
        for name, target in (
            ("transfer-data", lambda: send.transfer(self, self.data_peers, "port", "transfer-data")),
            ("transfer-control", lambda: send.transfer(self, self.control_peers, "control_port", "transfer-control")),
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












    def loop_failed(self, exc: BaseException) -> None:
        log.error("worker %s: the engine loop failed; the worker exits so that it is restarted", self.slot.key(),
                  exc_info=exc)
        self.exit_code = 3
        self.stop_event.set()

    def executor_died(self, ex: Executor, exc: BaseException) -> None:
        log.error("executor %s died: %s; the worker exits so that it is restarted", ex.id, exc)
        self.exit_code = 3
        self.stop_event.set()






    # -- receive (the engine loop calls these: squall.worker.engine) ---------------------------















    # -- readiness, liveness, metrics (the HTTP thread calls these) -------------------------









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
                hotupdate.reap(self, now)
            if self.stop_requested is not None and refresh.leaving(self, now):
                self.stop_event.set()
                break
            if self.log_next_check is not None and time.time() >= self.log_next_check:
                self.apply_log_levels(time.time())
            if self.sampling_next_check is not None and time.time() >= self.sampling_next_check:
                eventlog.apply_sampling(self, time.time())
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
                    if refresh.registered(self):
                        self.state.worker_heartbeat(self.topology_id, self.slot, self.heartbeat())
                        status.flush_errors(self)
                        eventlog.publish_samples(self)
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
            status.flush_errors(self)
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
