"""Nimbus on Kubernetes: supervisors are Nodes, workers are pods, the user's view is the
Topology resource.

`KubeNimbus` is `squall_operator.nimbus.Nimbus` (same lifecycle table, scheduler and monitor,
same ZooKeeper layout) with three things added:

* supervisors come from the Nodes the API server lists (`kube_state.KubeClusterState`), not
  from ephemeral ZooKeeper nodes: a NotReady or cordoned node offers no slots, so the scheduler
  moves its executors;
* a reconcile round (every `monitor_freq_secs`, and at once when a handler wakes it) that turns
  each Topology resource's spec into nimbus actions (submit, activate, deactivate, rebalance,
  kill), runs nimbus's monitor round, makes the worker pods match the assignment, and writes the
  resource's status. What the spec asks is decided by `reconcile.decide`, the roll of the
  workers by `roll.step` (on `roll.roll_input`, `roll.observe_canary`), the status and its
  Events by `status.build` and `status.transitions`, all pure: this module reads what they
  decide on and carries out what they return (`carry_out`, `reconcile_roll`, `write_status`);
* Events on the resource for everything a user would ask "why?" about.

Everything that must survive an operator restart is in ZooKeeper (lifecycle state, pending
delayed actions, assignments) or on the resource (spec, status, finalizer): the in-memory
registry of resources (`resources.Resource`) is rebuilt by kopf's resume handlers, and
`startup()` resumes pending kills and rebalances from ZooKeeper. The API calls are
`kube_api.KubeApi`'s, the leader Lease is `lease.LeaseElector`'s, readiness is `health.Health`'s.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.errors import TopologyError
from squall.models.cluster import (
    LOAD_ERROR_COMPONENT,
    Assignment,
    StormBase,
    TopologyStatus,
    WorkerSlot,
)
from squall.models.v1alpha1 import Topology, WorkerSpec
from squall.state import CONNECTION_ERRORS, NotConnected, StateError, TopologyKey, ZkCredentials, topology_key
from squall.validation import check_topology, parse_topology
from squall.worker.security import CurveKeys
from squall_operator import canary as canaries
from squall_operator import degraded, monitor, pods, scheduler
from squall_operator import placement as placements
from squall_operator import reconcile, stored
from squall_operator import roll as rolls
from squall_operator import status as statuses
from squall_operator.autoscaler import Autoscaler
from squall_operator.health import Health
from squall_operator.kube_api import ApiConflict, ApiNotFound, ApiRejected, KubeApi, parse_time
from squall_operator.kube_state import KubeClusterState
from squall_operator.metrics import NimbusMetrics
from squall_operator.nimbus import Nimbus, NimbusError
from squall_operator.resources import Resource, owns, submitted_for, topology_resource

log = logging.getLogger("squall.operator")

__all__ = ["KubeNimbus", "OperatorConfig"]


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the operator is told at start (the chart turns its values into these)."""

    zookeeper: str
    worker: pods.WorkerPodConfig
    zk_root: str = "/squall"
    # namespaces whose Topologies this operator runs; empty: every namespace
    namespaces: tuple[str, ...] = ()
    slots: pods.SlotConfig = field(default_factory=pods.SlotConfig)
    monitor_freq_secs: float = 2.0
    task_timeout_secs: float = 10.0
    launch_timeout_secs: float = 120.0
    # leader election
    lease_name: str = "squall-operator"
    lease_namespace: str = "default"
    lease_duration_secs: float = 15.0
    identity: str = field(default_factory=lambda: os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or f"pid-{os.getpid()}")
    # the status is written when it changed, and at least this often (uptime)
    status_refresh_secs: float = 30.0
    # digest credentials of Squall's ZooKeeper nodes (None: open nodes); handed to each
    # topology's workers in a Secret of its own (pods.zk_auth_secret)
    zk_credentials: ZkCredentials | None = None
    # a PodDisruptionBudget per Topology: at most this many of its worker pods evicted at once
    # (0: none; the operator removes the ones it made)
    disruption_budget: int = 1


class KubeNimbus(Nimbus):
    """Nimbus for the operator (see the module doc)."""

    def __init__(self, state: KubeClusterState, api: KubeApi, config: OperatorConfig,
                 *, clock: Callable[[], float] = time.time, health: Health | None = None,
                 metrics: NimbusMetrics | None = None) -> None:
        super().__init__(
            state,
            clock=clock,
            timeouts=monitor.MonitorTimeouts(config.task_timeout_secs, config.launch_timeout_secs),
            monitor_freq_secs=config.monitor_freq_secs,
        )
        self.kstate = state
        self.health = health
        self._raw_nodes: list[dict[str, Any]] | None = None
        self._zk_down = False
        self.api = api
        self.config = config
        self.resources: dict[str, Resource] = {}
        self.loop_wake = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self._reported_unhealthy: dict[str, str] = {}
        self._last_orphan_check = 0.0
        # Topologies (uid) whose ZooKeeper credentials Secret this operator wrote
        self._zk_auth_done: set[str] = set()
        # Topology (uid) -> its canary's executors' counts when the analysis window began
        # (squall_operator.roll.observe_canary)
        self._canary_base: dict[str, rolls.Baseline] = {}
        # spec.autoscale (squall_operator.autoscaler), at each status write
        self.autoscaler = Autoscaler(self)
        if metrics is not None:
            self.metrics = metrics
        self.metrics.watch_phases(self._phases)

    def _phases(self) -> list[str]:
        with self.lock:
            return [str(res.status.get("phase") or pods.PHASE_PENDING) for res in self.resources.values()]

    # -- events ----------------------------------------------------------------------------------
    def _event(self, text: str) -> None:
        super()._event(text)
        # nimbus's event lines begin with the topology's key
        topo, sep, message = text.partition(": ")
        res = self._owner(TopologyKey(topo)) if sep else None
        if res is None:
            return
        if message.startswith("assignment "):
            self.post(res, "Normal", "Assigned", message)
        elif message == "removed" and res.deleting:
            self.post(res, "Normal", "Removed", "worker pods and ZooKeeper state are being removed")
        elif message.startswith(("Upgrading: ", "Upgraded: ")):
            reason, _, rest = message.partition(": ")
            self.post(res, "Normal", reason, rest)

    def relaunched(self, topo: TopologyKey) -> None:
        """An upgrade launched the new graph: every worker pod now runs the old launch and is
        deleted (each serves its slot until the slot's new pod, made in this round's
        reconcile_pods, has registered; squall.worker.handover)."""
        res = self._owner(topo)
        if res is None:
            return
        for pod in self._pods_of(res):
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") is None:
                self.api.delete_pod(res.namespace, name)
                log.info("topology %s: deleted worker pod %s of the old launch (graph upgrade)", topo, name)

    def key(self, res: Resource) -> TopologyKey:
        """res's topology key in ZooKeeper, decided once (reconcile.storm_key): NAMESPACE~NAME,
        or the bare name of a topology an older operator stored for res, which keeps running
        under it. Decided before anything reads or writes under the key, so never both."""
        if res.topo is None:
            res.topo = reconcile.storm_key(res, self.state.get_storm(topology_key(res.name)))
        return res.topo

    def _owner(self, topo: TopologyKey) -> Resource | None:
        found = [r for r in self.resources.values() if not r.removed and self.key(r) == topo]
        owned = [r for r in found if r.owned]
        return next(iter(owned or found), None)

    def post(self, res: Resource, type_: str, reason: str, message: str) -> None:
        try:
            self.api.post_event(res.namespace, res.name, res.uid, type_, reason, message)
        except Exception:
            log.warning("cannot post event %s on %s/%s: %s", reason, res.namespace, res.name, message,
                        exc_info=True)

    # -- what the kopf handlers call ---------------------------------------------------------------
    def register(self, namespace: str, name: str, uid: str, generation: int,
                 spec: Mapping[str, Any], labels: Mapping[str, str] | None = None,
                 status: Mapping[str, Any] | None = None, deleting: bool = False,
                 rebalance_wait: tuple[int, float] | None = None,
                 log_levels: tuple[dict[str, dict[str, Any]], str | None] | None = None) -> Resource:
        """Record the resource as the API server has it now and wake the reconcile loop;
        `rebalance_wait`: see `rebalance_wait_from_annotations`; `log_levels`: see
        `log_levels_from_annotations` (None: leave the recorded ones)."""
        with self.lock:
            res = self.resources.get(uid)
            if res is None:
                res = Resource(namespace, name, uid, generation, dict(spec), dict(labels or {}),
                               status=dict(status or {}))
                self.resources[uid] = res
            res.generation = generation
            res.spec = dict(spec)
            res.labels = dict(labels or {})
            res.deleting = res.deleting or deleting
            res.rebalance_wait = rebalance_wait
            if log_levels is not None:
                res.log_levels, problem = log_levels
                if problem is not None and problem != res.log_levels_problem:
                    self.post(res, "Warning", "LogLevelsRefused", problem)
                res.log_levels_problem = problem
            if status and not res.status:
                res.status = dict(status)
            saved = res.status.get("roll")
            if res.roll is None and isinstance(saved, Mapping) and saved.get("step"):
                # a roll this resource was in when the operator stopped: resume it
                # (a roll saved before `mode` and `since` were kept is a drain, the only roll there
                # was, that ends at its due time as it would have)
                due = parse_time(saved.get("due")) or 0.0
                analysing = saved.get("analysingSince")
                res.roll = rolls.Roll(str(saved["step"]), due, str(saved.get("image", "")),
                                      tuple(saved.get("from") or ()), str(saved.get("mode") or rolls.DRAIN),
                                      parse_time(saved.get("since")) or due, str(saved.get("template") or ""),
                                      tuple(str(k) for k in saved.get("canarySlots") or ()),
                                      float(analysing) if isinstance(analysing, (int, float)) else None)
            if res.upgrade == canaries.Upgrade():
                # the last good pod settings (and a rollback's) survive an operator restart
                res.upgrade = canaries.Upgrade.from_status(res.status.get("upgrade"), parse_time)
        self.loop_wake.set()
        return res

    def request_kill(self, namespace: str, name: str, uid: str, generation: int,
                     spec: Mapping[str, Any], status: Mapping[str, Any] | None = None,
                     kill_wait: float | None = None) -> bool:
        """The resource is being deleted: start Storm's kill (waiting `kill_wait`, else the
        topology's killWaitSecs); True once everything is gone."""
        with self.lock:
            res = self.register(namespace, name, uid, generation, spec, status=status, deleting=True)
            if kill_wait is not None:
                res.kill_wait = kill_wait
            if res.removed:
                self.resources.pop(uid, None)
                return True
        return False

    def kill_done(self, uid: str) -> bool:
        """Whether the kill `request_kill` started for `uid` is over (then the resource is
        forgotten); a cheap look, which unlike `request_kill` does not wake the loop."""
        with self.lock:
            res = self.resources.get(uid)
            if res is not None and res.removed:
                self.resources.pop(uid, None)
                return True
        return False

    def forget(self, uid: str) -> None:
        with self.lock:
            self.resources.pop(uid, None)
            self._zk_auth_done.discard(uid)
            self.autoscaler.forget(uid, clamped=True)

    # -- placement -------------------------------------------------------------------------------
    REJECT_COOLDOWN_SECS = 300.0

    def allowed_slots(self, topo: TopologyKey, base: StormBase) -> frozenset[WorkerSlot] | None:
        """Nimbus still decides the assignment, but offers a topology only the slots whose node
        its pods may use (pods.allowed_slots), minus slots whose pod the kubelet refused lately."""
        nodes, raw = self.kstate.nodes, self._raw_nodes
        if nodes is None or raw is None:
            return None
        res = self._owner(topo)
        worker = (self.worker_spec(res, base) if res is not None
                  else stored.topology(base).spec.worker)
        allowed, refused = pods.allowed_slots(raw, nodes, worker, pods.worker_requests(self.config.worker, worker))
        if res is not None:
            now = self.clock()
            res.rejected = {s: t for s, t in res.rejected.items() if t > now}
            allowed = allowed - set(res.rejected)
            res.allowed_count = len(allowed)
            res.refused_nodes = refused
        return allowed

    def placement(self, topo: TopologyKey, base: StormBase) -> scheduler.Placement:
        """The pod (anti-)affinity and preferred node affinity of `topo`'s `spec.worker`, which
        nimbus honours when it places the workers (see squall_operator.placement)."""
        res = self._owner(topo)
        if res is None or self._raw_nodes is None:
            return scheduler.NO_PLACEMENT
        worker = self.worker_spec(res, base)
        return placements.topology_placement(res.name, res.namespace, self.config.worker, worker,
                                             placements.node_labels(self._raw_nodes))

    def node_labels(self) -> Mapping[str, Mapping[str, str]]:
        return placements.node_labels(self._raw_nodes or ())

    # -- startup and the loop --------------------------------------------------------------------
    def refresh_nodes(self) -> pods.NodeSlots:
        raw = self.api.list_nodes()
        nodes = pods.node_slots(raw, self.config.slots)
        self._raw_nodes = raw
        if self.health is not None:
            self.health.api_ok()
        with self.lock:
            old = self.kstate.nodes
            self.kstate.set_nodes(nodes)
            if old is not None and (old.slots != nodes.slots):
                self.wake.set()
            for node, why in nodes.unhealthy.items():
                if self._reported_unhealthy.get(node) != why:
                    self._report_node(node, why)
            self._reported_unhealthy = dict(nodes.unhealthy)
        return nodes

    def _report_node(self, node: str, why: str) -> None:
        for res in list(self.resources.values()):
            if not res.owned:
                continue
            try:
                assignment = self.state.get_assignment(self.key(res))
            except StateError:
                continue
            if assignment is None:
                continue
            on_node = sorted({s.key() for s in assignment.slots().values() if s.node == node})
            if on_node:
                self.post(res, "Warning", "NodeNotReady",
                          f"{node}: {why}; moving the executors of slots {', '.join(on_node)} to healthy slots")

    def start_operator(self, stop: threading.Event) -> None:
        """List the Nodes (retrying until it works), resume pending kills and rebalances, and
        start the reconcile loop."""
        while not stop.is_set():
            try:
                self.refresh_nodes()
                break
            except Exception:
                log.exception("cannot list Nodes; retrying")
                stop.wait(2.0)
        self.startup()
        self._loop_thread = threading.Thread(target=self._run, args=(stop,), name="squall-nimbus", daemon=True)
        self._loop_thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()
            self.loop_wake.wait(self.config.monitor_freq_secs)
            self.loop_wake.clear()

    def run_once(self) -> None:
        """One round of the loop, ZooKeeper outages included."""
        if self.health is not None:
            # the liveness probe: a round that hangs stops these (health.liveness)
            self.health.loop_turned()
        started = time.monotonic()
        outcome = "ok"
        try:
            self.round()
            self.zookeeper_reachable()
        except CONNECTION_ERRORS as exc:
            # workers keep running; nothing is judged until ZooKeeper is back
            outcome = "zookeeper_unreachable"
            self.zookeeper_unreachable(exc)
        except Exception:
            outcome = "failed"
            log.exception("reconcile round failed; retrying")
        self.metrics.rounds.labels(outcome).inc()
        self.metrics.round_seconds.observe(time.monotonic() - started)

    def pod_event(self, namespace: str, name: str, deleting: bool, gone: bool, finished: bool) -> None:
        """A worker pod changed (the pod watch, `handlers.worker_pod_event`): a pod being deleted,
        gone or finished (Failed/Succeeded) wakes the reconcile loop at once, so that its slot gets
        a new pod without waiting for the next round (`monitor_freq_secs`)."""
        if deleting or gone or finished:
            log.debug("worker pod %s/%s %s: reconciling now", namespace, name,
                      "gone" if gone else "deleting" if deleting else "finished")
            self.loop_wake.set()

    def stop_operator(self) -> None:
        self.loop_wake.set()
        if self._loop_thread is not None:
            self._loop_thread.join(10)

    def round(self) -> None:
        """One reconcile round: nodes, specs -> actions, nimbus's monitor, pods, status."""
        started = time.monotonic()
        marks: list[tuple[str, float]] = []
        try:
            self.refresh_nodes()
        except Exception:
            log.warning("cannot list Nodes; keeping the last list", exc_info=True)
        marks.append(("nodes", time.monotonic()))
        if not self.state.ready:
            raise NotConnected("not connected to ZooKeeper")
        with self.lock:
            resources = list(self.resources.values())
        for res in resources:
            try:
                with self.lock:
                    self.reconcile_spec(res)
            except CONNECTION_ERRORS:
                raise
            except Exception:
                log.exception("topology %s/%s: reconcile failed", res.namespace, res.name)
        marks.append(("specs", time.monotonic()))
        for res in resources:
            if res.log_levels != res.log_levels_written and not res.deleting:
                try:
                    self.write_log_levels(res)
                except CONNECTION_ERRORS:
                    raise
                except Exception:
                    log.exception("topology %s/%s: writing its log levels failed", res.namespace, res.name)
        self.tick()
        marks.append(("monitor", time.monotonic()))
        now = self.clock()
        for res in resources:
            try:
                with self.lock:
                    self.reconcile_roll(res, now)
                self.reconcile_pods(res)
                if res.deleting:
                    with self.lock:
                        self._reconcile_kill(res)
                self.write_status(res, now)
                self.reconcile_budget(res)
            except CONNECTION_ERRORS:
                raise
            except Exception:
                log.exception("topology %s/%s: pods or status failed", res.namespace, res.name)
        marks.append(("pods+status", time.monotonic()))
        if now - self._last_orphan_check > 30:
            self._last_orphan_check = now
            self.kill_orphans()
        took = time.monotonic() - started
        if took > 5:
            steps, last = [], started
            for name, t in marks:
                steps.append(f"{name} {t - last:.1f}s")
                last = t
            log.warning("slow reconcile round: %.1fs (%s)", took, ", ".join(steps))

    def zookeeper_unreachable(self, exc: BaseException) -> None:
        super().zookeeper_unreachable(exc)
        with self.lock:
            resources = list(self.resources.values())
        self._report_zookeeper_down(resources, self.clock())

    def zookeeper_reachable(self) -> None:
        super().zookeeper_reachable()
        if self._zk_down:
            self._zk_down = False
            with self.lock:
                resources = list(self.resources.values())
            for res in resources:
                self.post(res, "Normal", "ZooKeeperReachable", "connected to ZooKeeper again")

    def _report_zookeeper_down(self, resources: list[Resource], now: float) -> None:
        """ZooKeeper is unreachable: nothing can be read or decided, but every Topology says so
        (state ZooKeeperUnreachable, condition, one Event) instead of showing stale news."""
        first = not self._zk_down
        self._zk_down = True
        message = (f"ZooKeeper ({self.config.zookeeper}) is not reachable: the workers keep running "
                   "as assigned, nothing is scheduled or changed until it is back")
        for res in resources:
            if res.removed:
                continue
            previous = list(res.status.get("conditions") or [])
            cond = pods.condition("ZooKeeperReachable", False, "Disconnected", message, now, previous)
            status = {**res.status, "state": "ZooKeeperUnreachable", "message": message,
                      "conditions": pods.merge_conditions(previous, [cond])}
            if status == res.status:
                continue
            try:
                self.api.patch_status(res.namespace, res.name, status)
                res.status = status
                res.last_status_write = now
            except Exception:
                log.warning("cannot write the status of %s/%s", res.namespace, res.name, exc_info=True)
            if first:
                self.post(res, "Warning", "ZooKeeperUnreachable", message)

    # -- spec -> nimbus actions ----------------------------------------------------------------------
    def validate(self, res: Resource) -> None:
        if res.validated_generation == res.generation:
            return
        res.validated_generation = res.generation
        problem: str | None = None
        topology: Topology | None = None
        try:
            topology = parse_topology(topology_resource(res))
            # graph checks only: the operator runs no user code; the workers check the classes
            # in the topology's own image and report what does not load (LOAD_ERROR_COMPONENT)
            check_topology(topology, resolve_classes=False)
        except TopologyError as exc:
            problem = "; ".join(exc.lines())
            topology = None
        except Exception as exc:  # an import that blew up in a surprising way
            problem = f"cannot check the topology: {type(exc).__name__}: {exc}"
            topology = None
        if problem is not None and problem != res.problem:
            self.post(res, "Warning", "InvalidSpec", problem)
        res.problem = problem
        res.topology = topology

    def snapshot(self, res: Resource) -> reconcile.Snapshot:
        """What `reconcile.decide` decides on: the stored topology of res's name, and for a
        deleted resource whose topology is gone, whether its worker pods are."""
        base = self.state.get_storm(self.key(res))
        return reconcile.Snapshot(base, reconcile.needs_pods(res, base) and bool(self._pods_of(res)))

    def reconcile_spec(self, res: Resource) -> None:
        """Spec -> nimbus actions: validate, read, decide, carry out."""
        if not res.deleting:
            self.validate(res)
        self.carry_out(res, reconcile.decide(res, self.snapshot(res)))

    def write_log_levels(self, res: Resource) -> None:
        """The resource's dynamic log levels into ZooKeeper, where its workers read them (once
        its topology is stored: a log config never comes before its topology)."""
        from squall.models.cluster import LogConfig, LogSetting

        if self.state.get_storm(self.key(res)) is None:
            return
        wanted = dict(res.log_levels)
        self.state.set_log_config(self.key(res), LogConfig(loggers={k: LogSetting(**v) for k, v in wanted.items()}))
        res.log_levels_written = wanted
        log.info("topology %s/%s: log levels %s", res.namespace, res.name,
                 ", ".join(f"{k}={v['level']}" for k, v in sorted(wanted.items())) or "none (each logger its own)")

    def _reconcile_kill(self, res: Resource) -> None:
        self.carry_out(res, reconcile.decide_kill(res, self.snapshot(res)))

    def carry_out(self, res: Resource, intents: list[reconcile.Intent]) -> None:
        """Do what `reconcile.decide` asked, in order; a rebalance nimbus rejects ends it (the
        generation is recorded as rejected and observed, with a Warning saying why)."""
        topo = self.key(res)
        for intent in intents:
            if isinstance(intent, reconcile.Record):
                for name, value in intent.fields.items():
                    setattr(res, name, value)
            elif isinstance(intent, reconcile.Event):
                self.post(res, intent.type, intent.reason, intent.message)
            elif isinstance(intent, reconcile.Submit):
                self.submit(intent.topology, topo)
            elif isinstance(intent, reconcile.Update):
                try:
                    self.update(topo, intent.topology)
                except NimbusError as exc:  # nimbus's own guard: decide saw it applicable
                    res.refused_change = str(exc)
                    self.post(res, "Warning", "SpecChangeRefused", str(exc))
                    return
            elif isinstance(intent, reconcile.Rebalance):
                try:
                    self.rebalance(topo, intent.workers, intent.executors, intent.wait)
                except NimbusError as exc:
                    res.rejected_generation = res.generation
                    res.observed_generation = res.generation
                    self.post(res, "Warning", "RebalanceRejected", str(exc))
                    return
            elif isinstance(intent, reconcile.Activate):
                self.activate(topo)
            elif isinstance(intent, reconcile.Deactivate):
                self.deactivate(topo)
            elif isinstance(intent, reconcile.Kill):
                self.kill(topo, intent.wait)
            elif isinstance(intent, reconcile.Teardown):
                self.state.teardown_topology(topo)

    def _pods_of(self, res: Resource) -> list[dict[str, Any]]:
        """The worker pods this resource owns."""
        return [
            p for p in self.api.list_pods(res.namespace, pods.worker_selector(res.name))
            if any(o.get("uid") == res.uid for o in p["metadata"].get("ownerReferences") or [])
        ]

    def kill_orphans(self) -> None:
        """Kill topologies in ZooKeeper whose resource no longer exists (deleted while no
        operator ran and its finalizer was removed by hand), and remove the leftovers of
        topologies that are gone."""
        try:
            namespaces: list[str | None] = list(self.config.namespaces) or [None]
            listed = [t["metadata"] for ns in namespaces for t in self.api.list_topologies(ns)]
        except Exception:
            log.warning("cannot list Topologies; not looking for orphans", exc_info=True)
            return
        # a listed resource the handlers have not registered yet owns its namespaced key, or the
        # bare name an older operator stored it under (reconcile.storm_key, below)
        keys = {topology_key(m["name"], m["namespace"]) for m in listed}
        keys |= {self.key(r) for r in list(self.resources.values())}
        bare = {m["name"] for m in listed}
        running = set(self.state.storm_ids())
        for topo in self.state.topologies_with_state() - running:
            # leftovers (heartbeats, errors) of a topology that is gone and has no resource
            if topo not in keys and topo not in bare:
                self.state.teardown_topology(topo)
        for topo in sorted(running):
            if topo in keys:
                continue
            base = self.state.get_storm(topo)
            if base is None or base.status is TopologyStatus.KILLED:
                continue
            if topo in bare and any(submitted_for(base, m["namespace"], m.get("uid", ""))
                                    for m in listed if m["name"] == topo):
                continue
            owner = (base.topology.get("metadata") or {}).get("namespace")
            if self.config.namespaces and owner not in self.config.namespaces:
                continue
            log.warning("topology %s has no Topology resource any more: killing it", topo)
            try:
                self.kill(topo)
            except NimbusError:
                pass

    # -- pods ------------------------------------------------------------------------------------------
    def reconcile_pods(self, res: Resource) -> None:
        """Make the worker pods match the assignment: create, replace, delete."""
        base = self.state.get_storm(self.key(res))
        mine = owns(res, base)
        assignment = self.state.get_assignment(self.key(res)) if mine else None
        wanted = set(assignment.slots().values()) if assignment is not None else set()
        listed = self._pods_of(res)
        if mine and base is not None and self._replace_older_launch(res, listed, base.launch_time_secs):
            listed = self._pods_of(res)
        existing = [pods.pod_view(p) for p in listed]
        nodes = self.kstate.nodes
        healthy = set(nodes.slots) if nodes is not None else {p.node for p in existing}
        unhealthy = {p.node for p in existing if p.node not in healthy}
        plan = pods.plan_pods(wanted, existing, unhealthy)
        for view in existing:
            if pods.refused_by_kubelet(view) and view.slot is not None and view.slot in wanted \
                    and view.slot not in res.rejected and not view.deleting:
                # the kubelet refused to admit it: move the slot instead of recreating it there
                res.rejected[view.slot] = self.clock() + self.REJECT_COOLDOWN_SECS
                self.post(res, "Warning", "PodRejected",
                          f"node {view.node} refused worker pod {view.name} ({view.reason}"
                          + (f": {view.message}" if view.message else "")
                          + f"); moving slot {view.slot.key()} elsewhere")
                self.wake.set()
        for name, why in sorted(plan.delete.items()):
            forced = name in plan.force
            self.api.delete_pod(res.namespace, name, 0 if forced else None)
            if "no longer assigned" not in why:
                self.post(res, "Warning", "WorkerReplaced",
                          f"worker pod {name} deleted: {why}; it is created again")
            log.info("topology %s: deleted worker pod %s (%s%s)", res.name, name, why,
                     ", forced" if forced else "")
        if not mine or res.deleting and not wanted:
            return
        worker = self.worker_spec(res, base)
        if plan.create and self.config.zk_credentials is not None and res.uid not in self._zk_auth_done:
            creds = self.config.zk_credentials
            self.api.apply_secret(res.namespace, pods.zk_auth_secret(
                res.name, res.uid, res.namespace, f"{creds.user}:{creds.password}"))
            self._zk_auth_done.add(res.uid)
        if plan.create and not res.sealed and not self.seal(res):
            return
        for slot in plan.create:
            # a name of its own (a new generation): the slot's old pod may still be terminating
            body = pods.worker_pod(res.name, res.uid, res.namespace, slot, self.config.worker, worker,
                                   generation=pods.pod_generation(secrets.randbelow), key=self.key(res),
                                   launch=base.launch_time_secs if base is not None else None)
            try:
                self.api.create_pod(res.namespace, body)
                log.info("topology %s: created worker pod %s", res.name, body["metadata"]["name"])
                res.pod_problem = None
            except ApiConflict:
                pass  # the name is taken (a generation drawn twice): another one next round
            except ApiRejected as exc:
                if res.pod_problem != str(exc):
                    self.post(res, "Warning", "InvalidPodTemplate",
                              f"the API server refused worker pod {body['metadata']['name']}: {exc}")
                res.pod_problem = str(exc)
                break

    def _replace_older_launch(self, res: Resource, listed: list[dict[str, Any]], launch: float) -> bool:
        """Delete the worker pods made for a launch before the stored one (roll.older_launch):
        the graph upgrade that stored it deletes them at once (`relaunched`), so any found here
        were left by an operator that stopped between the two. Each serves its slot until the
        slot's new pod has registered, as in `relaunched`. Returns whether any was deleted."""
        stale = rolls.older_launch(listed, launch)
        for name in stale:
            self.api.delete_pod(res.namespace, name)
            log.info("topology %s: deleted worker pod %s of a launch before the stored one", res.name, name)
        if stale:
            self.post(res, "Normal", "UpgradeResumed", (
                f"worker pod(s) {', '.join(stale)} still ran the launch before the graph upgrade (the "
                "operator stopped before replacing them): deleted, each serving its slot until its new "
                "pod has registered"))
        return bool(stale)

    def reconcile_budget(self, res: Resource) -> None:
        """Once per resource and operator start: the PodDisruptionBudget of its worker pods made
        or brought up to date (owned by the Topology, so it goes with it), or removed when the
        chart turned budgets off (`pods.disruption_budget`)."""
        if res.budgeted or not res.owned or res.deleting:
            return
        most = self.config.disruption_budget
        try:
            if most > 0:
                self.api.apply_disruption_budget(
                    res.namespace, pods.disruption_budget(res.name, res.uid, res.namespace, most))
            else:
                self.api.delete_disruption_budget(res.namespace, pods.disruption_budget_name(res.name))
        except ApiRejected as exc:
            self.post(res, "Warning", "DisruptionBudgetRefused",
                      f"the API server refused PodDisruptionBudget {pods.disruption_budget_name(res.name)}: {exc}")
        res.budgeted = True

    def seal(self, res: Resource) -> bool:
        """Before a Topology's first worker pod: its CURVE Secret (a new key pair, owned by the
        Topology, so a resubmission gets a new one) and its NetworkPolicy, as configured. One that
        exists already (made by a previous operator) is kept. Returns whether pods may be made."""
        cfg = self.config.worker
        wanted: list[tuple[str, Callable[[str, dict[str, Any]], None], dict[str, Any]]] = []
        if cfg.curve:
            keys = CurveKeys.generate()
            wanted.append(("Secret", self.api.create_secret,
                           pods.curve_secret(res.name, res.uid, res.namespace, keys.public, keys.secret)))
        if cfg.network_policy:
            wanted.append(("NetworkPolicy", self.api.create_network_policy,
                           pods.network_policy(res.name, res.uid, res.namespace)))
        for kind, create, body in wanted:
            try:
                create(res.namespace, body)
                log.info("topology %s: created %s %s", res.name, kind, body["metadata"]["name"])
            except ApiConflict:
                pass
            except ApiRejected as exc:
                if res.pod_problem != str(exc):
                    self.post(res, "Warning", "InvalidPodTemplate",
                              f"the API server refused {kind} {body['metadata']['name']}: {exc}")
                res.pod_problem = str(exc)
                return False
        res.sealed = True
        return True

    def worker_spec(self, res: Resource, base: StormBase | None) -> WorkerSpec | None:
        """The worker pod settings the topology asks for: its latest valid spec's, else (an
        invalid change) the running one's; but the last good ones while a failed canary rolls
        back, and while the spec still asks for the settings it rolled back from."""
        if res.topology is not None:
            asked = res.topology.spec.worker
        elif base is not None:
            asked = stored.topology(base).spec.worker
        else:
            return None
        good, rejected = res.upgrade.last_good, res.upgrade.rejected
        if good is not None and (
                res.roll is not None and res.roll.step == rolls.ROLLING_BACK
                or rejected is not None and rejected.hash == pods.template_hash(self.config.worker, asked)):
            try:
                return WorkerSpec.model_validate_json(json.dumps(good.worker)) if good.worker is not None else None
            except ValueError as exc:  # kept by an operator whose model took other fields
                log.warning("topology %s: the last good spec.worker in status.upgrade is not valid here (%s); "
                            "keeping the spec's", res.name, exc)
        return asked

    # -- rolling the workers to new pod settings -----------------------------------------------------
    def reconcile_roll(self, res: Resource, now: float) -> None:
        """Roll worker pods whose settings (image, env, resources, ...) are not the topology's:
        read the pods, the assignment and the heartbeats, let squall_operator.roll decide (its
        input, `step`, and `res.upgrade`: the last good settings, and a failed canary's), and
        apply the effects."""
        base = self.state.get_storm(self.key(res)) if res.owned and not res.deleting else None
        if base is None:
            res.roll = None
            return
        worker = self.worker_spec(res, base)
        want = pods.template_hash(self.config.worker, worker)
        live = [v for v in (pods.pod_view(p) for p in self._pods_of(res)) if not v.deleting]
        assignment = self.state.get_assignment(self.key(res)) or Assignment()
        running = stored.topology(base).spec
        spec = res.topology.spec if res.topology is not None else running
        step = res.roll.step if res.roll is not None else None
        beats = self.state.get_worker_heartbeats(self.key(res)) if step in (rolls.DRAINING, rolls.CANARY) else {}
        observed, kept = None, None
        if res.roll is not None and step == rolls.CANARY:
            degraded_cond: Mapping[str, Any] = next((c for c in res.status.get("conditions") or []
                                  if c.get("type") == degraded.CONDITION), {})
            observed, kept = rolls.observe_canary(res.roll, live, want, assignment, beats,
                                                  self._canary_base.get(res.uid), degraded_cond, parse_time)
        if kept is None:
            self._canary_base.pop(res.uid, None)
        else:
            self._canary_base[res.uid] = kept
        worker_json = worker.model_dump(mode="json", by_alias=True, exclude_none=True) if worker is not None else None
        inp = rolls.roll_input(
            now=now, storm=base.status, running=running, spec=spec, live=live, want=want,
            image=pods.worker_image(self.config.worker, worker), assignment=assignment,
            spouts=rolls.spouts_pending(stored.plan(base), assignment, beats) if step == rolls.DRAINING else {},
            canary=rolls.canary_settings(spec, res.upgrade.last_good, worker_json), observed=observed,
            ready_timeout=self.config.launch_timeout_secs)
        res.roll, effects = rolls.step(res.roll, inp)
        asked = res.topology.spec.worker if res.topology is not None else running.worker
        res.upgrade = rolls.upgrade_after(res.upgrade, res.roll, effects, inp, worker_json, res.generation,
                                          pods.template_hash(self.config.worker, asked))
        for effect in effects:
            if effect.kind == "deactivate":
                self.deactivate(self.key(res))
            elif effect.kind == "activate":
                self.activate(self.key(res))
            elif effect.kind == "restamp":
                self._restamp(self.key(res), set(effect.slots), now)
            elif effect.kind == "delete":
                for name in effect.pods:
                    self.api.delete_pod(res.namespace, name)
                    log.info("topology %s: rolling worker pod %s to %s", res.name, name, inp.image)
            elif effect.kind == "reject":
                log.warning("topology %s: the canary of %s failed (%s); rolling back", res.name, inp.image,
                            effect.message)
            elif effect.kind == "event":
                self.post(res, "Warning" if effect.warning else "Normal", effect.reason, effect.message)
                if effect.reason in ("RollCompleted", "RolledBack"):
                    res.rolled = effect.message

    def _restamp(self, topo: TopologyKey, slots: set[WorkerSlot], now: float) -> None:
        """Give the executors of replaced slots a fresh launch time: their new pods get
        `launchTimeoutSecs` to heartbeat before nimbus calls them dead and moves them."""
        assignment = self.state.get_assignment(topo)
        if assignment is None:
            return
        keys = {s.key() for s in slots}
        starts = {e: (now if slot in keys else assignment.executor_start_time_secs.get(e, now))
                  for e, slot in assignment.executor_slots.items()}
        self.state.set_assignment(topo, assignment.model_copy(update={"executor_start_time_secs": starts}))

    # -- status ----------------------------------------------------------------------------------------
    def write_status(self, res: Resource, now: float) -> None:
        """Read what the status says, build it (squall_operator.status), post the Events its
        change calls for, and write it when it changed or `status_refresh_secs` passed."""
        if res.removed:
            return
        topo = self.key(res)
        base = self.state.get_storm(topo)
        if not owns(res, base):
            base = None
        assignment = self.state.get_assignment(topo) if base is not None else None
        beats = self.state.get_worker_heartbeats(topo) if base is not None else {}
        views = [pods.pod_view(p) for p in self._pods_of(res)]
        errors = {comp: self.state.last_error(topo, comp) for comp in base.component_executors} if base else {}
        load_error = self.state.last_error(topo, LOAD_ERROR_COMPONENT) if base is not None else None
        problems = statuses.blockers(res, base, assignment, beats, views, load_error, self.worker_spec(res, base))
        # after the blockers, which say the slots offered at the round's scheduling: the
        # autoscaler may count them again (res.allowed_count)
        autoscaled = self.autoscaler.status_block(res, base, beats, now)
        status = statuses.build(res, base=base, assignment=assignment, heartbeats=beats, views=views,
                                errors=errors, problems=problems, autoscale=autoscaled, now=now)
        if not statuses.worth_writing(res.status, status, res.last_status_write, now,
                                      self.config.status_refresh_secs):
            return
        for event in statuses.transitions(res.status, status):
            self.post(res, event.type, event.reason, event.message)
        try:
            self.api.patch_status(res.namespace, res.name, status)
        except ApiNotFound:
            return
        res.rolled = None
        res.status = status
        res.last_status_write = now

    def patch_spec(self, res: Resource, ops: list[dict[str, Any]]) -> None:
        """A JSON patch of the resource (the autoscaler's numWorkers and parallelism)."""
        self.api.patch_topology(res.namespace, res.name, ops)

    def slots_taken_by_others(self, topo: TopologyKey) -> set[WorkerSlot]:
        """The slots other topologies' assignments hold."""
        taken: set[WorkerSlot] = set()
        for other in self.state.storm_ids():
            if other != topo:
                taken.update((self.state.get_assignment(other) or Assignment()).slots().values())
        return taken
