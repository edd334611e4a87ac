"""Nimbus's I/O shell: read cluster state, call the pure core, write the result.

The decisions live in `scheduler`, `lifecycle` and `monitor`; this module only reads ZooKeeper,
calls them and applies what they return. Everything that must survive a restart is in ZooKeeper
(StormBase holds the lifecycle state and any pending delayed action), so a new Nimbus on the same
ZooKeeper resumes where the old one stopped (`startup`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from squall.models.cluster import (
    Assignment,
    ExecutorId,
    StormBase,
    TopologyStatus,
    WorkerSlot,
    executor_key,
)
from squall import specchange, validation
from squall.errors import TopologyError
from squall.models.v1alpha1 import Topology
from squall.plan import ACKER
from squall.state import CONNECTION_ERRORS, NotConnected
from squall.stateviews import ForNimbus
from squall.topology_keys import TopologyKey, topology_key
from squall_operator import lifecycle, monitor, scheduler, stored, upgrade
from squall_operator.metrics import NimbusMetrics

log = logging.getLogger("squall.nimbus")


class NimbusError(Exception):
    pass


def initial_storm_base(topology: Topology, now: float) -> StormBase:
    spec = topology.spec
    executors = {c.name: c.parallelism for c in spec.components}
    if spec.ackers:
        executors[ACKER] = spec.ackers
    return StormBase(
        name=topology.name,
        status=TopologyStatus.ACTIVE if spec.active else TopologyStatus.INACTIVE,
        launch_time_secs=now,
        num_workers=spec.num_workers,
        component_executors=executors,
        topology=topology.model_dump(mode="json", by_alias=True, exclude_none=True),
    )


def _ackers_for(base: StormBase, effect: lifecycle.Reassign) -> int | None:
    """numAckers unset means one acker per worker (Storm's default): a rebalance that changes the
    worker count changes the acker count with it, unless it names the acker's count itself
    (`build_plan` adds the acker tasks this needs after every other task). None: unchanged."""
    if effect.num_workers is None or ACKER in (effect.executors or {}) or ACKER not in base.component_executors:
        return None
    if stored.topology(base).spec.num_ackers is not None:
        return None
    return effect.num_workers


def needed_executors(base: StormBase) -> tuple[ExecutorId, ...]:
    return stored.plan(base).executors


def schedulable_cluster(
    offered: Mapping[str, Iterable[int]], held: Iterable[WorkerSlot],
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> scheduler.ClusterSnapshot:
    """The slots the scheduler may hand out: what the nodes offer, less the slots `held` by
    topologies in their kill wait (their workers still drain in-flight tuples there; the slots
    free up when the topology is removed)."""
    held = frozenset(held)
    return scheduler.ClusterSnapshot(
        slots={
            node: tuple(p for p in ports if WorkerSlot(node, p) not in held)
            for node, ports in sorted(offered.items())
        },
        node_labels=dict(node_labels or {}),
    )


class Nimbus:
    def __init__(
        self,
        state: ForNimbus,
        *,
        clock: Callable[[], float] = time.time,
        timeouts: monitor.MonitorTimeouts = monitor.LOCAL_TIMEOUTS,
        monitor_freq_secs: float = 1.0,
    ) -> None:
        self.state = state
        self.clock = clock
        self.timeouts = timeouts
        self.monitor_freq_secs = monitor_freq_secs
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.events: list[str] = []
        # topology -> why its upgrade's drain ended (for the Upgraded event)
        self.upgrade_reason: dict[str, str] = {}
        # checks an upgrade's new graph with its classes before anything is deactivated (the
        # local cluster imports them from its search paths; raises TopologyError); None: not
        self.graph_check: Callable[[Topology], None] | None = None
        # topology -> slot -> when this nimbus saw the slot's heartbeat change (its own clock)
        self.seen: dict[str, dict[WorkerSlot, monitor.SeenBeat]] = {}
        # since when this nimbus has watched the heartbeats without a gap: its start, or its
        # last reconnection to ZooKeeper (monitor.alive_executors does not count staleness it
        # could not observe)
        self.observed_since = clock()
        # extra heartbeat window after a ZooKeeper outage (none after nimbus's own start)
        self.reconnect_grace = 0.0
        self.zookeeper_away = False  # warned about an outage, once per outage
        # the level of that one line (`squall run` reports outages itself and lowers it)
        self.outage_log_level = logging.WARNING
        state.add_session_listener(self._zookeeper_back)
        self.metrics = NimbusMetrics()

    def _zookeeper_back(self, new_session: bool) -> None:
        self.observed_since = self.clock()
        self.reconnect_grace = self.timeouts.reconnect_grace
        self.wake.set()

    def zookeeper_unreachable(self, exc: BaseException) -> None:
        """One warning per outage: ZooKeeper being away is routine (a rolling restart)."""
        if not self.zookeeper_away:
            self.zookeeper_away = True
            log.log(self.outage_log_level, "ZooKeeper unreachable (%s): nimbus waits; workers keep running",
                    type(exc).__name__)

    def zookeeper_reachable(self) -> None:
        if self.zookeeper_away:
            self.zookeeper_away = False
            log.log(self.outage_log_level, "ZooKeeper reachable again: every worker gets a fresh heartbeat window")

    # -- API -------------------------------------------------------------------------------
    def submit(self, topology: Topology, topo: TopologyKey | None = None) -> None:
        """Store `topology` under its key `topo` (None: its name, as the local cluster keys it;
        the operator's is namespaced, squall.topology_keys)."""
        topo = topo or topology_key(topology.name)
        with self.lock:
            if self.state.get_storm(topo) is not None:
                raise NimbusError(f"topology {topo!r} is already running")
            self.state.set_storm(topo, initial_storm_base(topology, self.clock()))
            log.info("submitted topology %s", topo)
            self.mk_assignments()

    def activate(self, topo: TopologyKey) -> None:
        self.act(topo, lifecycle.Action.activate())

    def deactivate(self, topo: TopologyKey) -> None:
        self.act(topo, lifecycle.Action.deactivate())

    def kill(self, topo: TopologyKey, wait_secs: float | None = None) -> None:
        base = self._base(topo)
        if wait_secs is None:
            wait_secs = stored.topology(base).spec.kill_wait
        self.act(topo, lifecycle.Action.kill(wait_secs))

    def rebalance(
        self,
        topo: TopologyKey,
        num_workers: int | None = None,
        executors: Mapping[str, int] | None = None,
        wait_secs: float | None = None,
    ) -> None:
        base = self._base(topo)
        topology = stored.topology(base)
        spec = topology.spec
        for comp, n in (executors or {}).items():
            tasks = next((c.tasks for c in spec.components if c.name == comp), None)
            if tasks is None:
                raise NimbusError(f"rebalance: topology {topo!r} has no component {comp!r}")
            if n > tasks:
                raise NimbusError(f"rebalance: {comp} has {tasks} tasks, cannot run {n} executors")
        over = validation.rebalance_problem(topology, num_workers, executors)
        if over is not None:
            raise NimbusError(f"rebalance: topology {topo!r}: {over}")
        if wait_secs is None:
            wait_secs = spec.rebalance_wait
        self.act(topo, lifecycle.Action.rebalance(wait_secs, num_workers, executors))

    def update(self, topo: TopologyKey, topology: Topology, wait_secs: float | None = None) -> specchange.SpecChange:
        """A new spec for a running topology (`squall update`, the operator's reconcile), as
        `squall.specchange` classifies it: a change applied in place is stored (the workers,
        watching the StormBase, apply it: live settings at once, a component's executors
        restarted with nothing lost); a graph change starts an upgrade (squall_operator.upgrade:
        the spouts drain for `wait_secs`, rebalanceWaitSecs by default, at the most, then the new
        graph is launched); one that cannot be carried raises NimbusError saying why, and nothing
        changes."""
        with self.lock:
            base = self._base(topo)
            if base.status in (TopologyStatus.KILLED, TopologyStatus.REBALANCING):
                raise NimbusError(f"update: topology {topo!r} is {base.status.value}; update it once that is done")
            running = stored.topology(base)
            change = specchange.classify(running.spec, topology.spec)
            if change.kind is specchange.Kind.NONE:
                return change
            if change.kind is specchange.Kind.UPGRADE:
                why = upgrade.refusal(running, topology, change)
                if why is not None:
                    raise NimbusError(f"update: topology {topo!r} {change.describe()}; refused: {why}")
                self._upgrade(topo, base, topology, running.spec.rebalance_wait if wait_secs is None else wait_secs,
                              change)
                return change
            if not change.applies_in_place:
                raise NimbusError(f"update: topology {topo!r} {change.describe()}")
            self.state.set_storm(topo, base.model_copy(update={"topology": specchange.stored_after(running, topology)}))
            self._event(f"{topo}: updated ({change.describe()})")
            self.wake.set()
            return change

    def _upgrade(self, topo: TopologyKey, base: StormBase, topology: Topology, wait_secs: float,
                 change: specchange.SpecChange) -> None:
        new, _executors = upgrade.launch(stored.topology(base), base.component_executors, topology)
        try:  # the new graph must be one the workers can build, before anything is deactivated
            stored.plan(base.model_copy(update={"topology": new, "component_executors": _executors}))
        except Exception as exc:
            raise NimbusError(f"update: topology {topo!r}: the new graph does not plan: {exc}") from None
        if self.graph_check is not None:
            try:
                self.graph_check(Topology.model_validate(new))
            except TopologyError as exc:
                raise NimbusError(f"update: topology {topo!r}: the new graph does not check: "
                                  + "; ".join(exc.lines())) from None
        now = self.clock()
        # the new graph is stored beside the running one first: a nimbus that dies before the
        # transition below finds the topology as it was (the next update replaces the stored graph)
        self.state.set_storm(topo, base.model_copy(update={"upgrade_topology": new, "upgrade_since_secs": now}))
        self._event(f"{topo}: Upgrading: {'; '.join(change.upgrade)}; spouts deactivated, the new graph is "
                    f"launched once nothing is pending, in {wait_secs:g}s at the most")
        self.act(topo, lifecycle.Action.upgrade(wait_secs))

    def _drained(self, topo: TopologyKey, base: StormBase) -> None:
        """An upgrade's drain: launch the new graph as soon as the spouts say nothing is pending
        (squall_operator.upgrade.decide), without waiting for the wait's end."""
        if base.upgrade_since_secs is None or base.delayed_due_secs is None:
            return
        assignment = self.state.get_assignment(topo)
        if assignment is None:
            return
        spouts = upgrade.spout_beats(stored.plan(base), assignment, self.state.get_worker_heartbeats(topo))
        decision = upgrade.decide(base.upgrade_since_secs, base.delayed_due_secs, spouts, self.clock())
        if decision.go:
            self.upgrade_reason[topo] = decision.why
            self.act(topo, lifecycle.Action.do_upgrade())

    def status(self, topo: TopologyKey) -> TopologyStatus | None:
        base = self.state.get_storm(topo)
        return None if base is None else base.status

    # -- the state machine ---------------------------------------------------------------------
    def _base(self, topo: TopologyKey) -> StormBase:
        base = self.state.get_storm(topo)
        if base is None:
            raise NimbusError(f"no topology named {topo!r} is running")
        return base

    def act(self, topo: TopologyKey, action: lifecycle.Action) -> None:
        with self.lock:
            base = self._base(topo)
            now = self.clock()
            try:
                step = lifecycle.transition(lifecycle.from_storm_base(base), action, now)
            except lifecycle.InvalidTransition as exc:
                raise NimbusError(f"topology {topo!r}: {exc}") from None
            # store the new state first: the transition must survive a nimbus crash
            base = base.model_copy(update=lifecycle.to_storm_fields(step.state))
            base_since = base.upgrade_since_secs
            for effect in step.effects:
                if isinstance(effect, lifecycle.Reassign):
                    update: dict[str, Any] = {}
                    if effect.num_workers is not None:
                        update["num_workers"] = effect.num_workers
                    if effect.executors is not None:
                        update["component_executors"] = {**base.component_executors, **effect.executors}
                    ackers = _ackers_for(base, effect)
                    if ackers is not None:
                        update["component_executors"] = {
                            **update.get("component_executors", base.component_executors), ACKER: ackers
                        }
                    base = base.model_copy(update=update)
                elif isinstance(effect, lifecycle.Resubmit):
                    base = self._resubmitted(base, now)
            self.state.set_storm(topo, base)
            self._event(f"{topo}: {action.name.value} -> {step.state.status.value}")
            for effect in step.effects:
                if isinstance(effect, lifecycle.RemoveTopology):
                    self.state.teardown_topology(topo)
                    self._event(f"{topo}: removed")
                elif isinstance(effect, lifecycle.Reassign):
                    self.mk_assignments()
                elif isinstance(effect, lifecycle.Resubmit):
                    self.mk_assignments(fresh=frozenset({topo}))
                    self.relaunched(topo)
                    why = self.upgrade_reason.pop(topo, f"the drain's wait passed after {now - (base_since or now):.1f}s")
                    self._event(f"{topo}: Upgraded: {why}; the new graph is launched, the workers of the old "
                                "launch are replaced")
            self.wake.set()

    def _resubmitted(self, base: StormBase, now: float) -> StormBase:
        """The StormBase launching an upgrade's new graph: a new launch time, the new topology
        and its executor counts (squall_operator.upgrade.launch)."""
        if base.upgrade_topology is None:
            return base
        running = stored.topology(base)
        new, executors = upgrade.launch(running, base.component_executors,
                                        Topology.model_validate(base.upgrade_topology))
        # where the old launch's tasks kept their state under Storm's names (an older Squall's)
        state_tasks = upgrade.state_tasks(running, stored.plan(base).component_tasks)
        return base.model_copy(update={"topology": new, "component_executors": executors, "launch_time_secs": now,
                                       "upgrade_topology": None, "upgrade_since_secs": None,
                                       "state_tasks": state_tasks})

    def relaunched(self, topo: TopologyKey) -> None:
        """An upgrade stored `topo`'s new launch: replace the workers of the old one (the local
        cluster's supervisors do it themselves; KubeNimbus deletes the pods)."""

    def allowed_slots(self, topo: TopologyKey, base: StormBase) -> frozenset[WorkerSlot] | None:
        """The slots `topo`'s workers may use; None: every slot (KubeNimbus narrows it to the
        nodes its pods may run on)."""
        return None

    def placement(self, topo: TopologyKey, base: StormBase) -> scheduler.Placement:
        """`topo`'s pod (anti-)affinity and node preferences; none here (KubeNimbus reads them
        from the topology's `spec.worker.affinity`)."""
        return scheduler.NO_PLACEMENT

    def node_labels(self) -> Mapping[str, Mapping[str, str]]:
        """Node -> labels, the domains of pod affinity's topology keys (none here)."""
        return {}

    def _event(self, text: str) -> None:
        log.info(text)
        self.events.append(text)
        del self.events[:-100]

    def startup(self) -> None:
        """Close the nodes left open by a cluster that ran without ZooKeeper ACLs (when this
        nimbus has credentials), then resume pending delayed actions of every stored topology
        (after a nimbus restart)."""
        if self.state.credentials is not None:
            closed, refused = self.state.close_open_nodes()
            log.info("ZooKeeper ACLs: closed %d node(s) under %s that were open (made before ACLs were on)%s",
                     closed, self.state.root, f"; {refused} with another user's ACL left as they were"
                     if refused else "")
        for topo in self.state.storm_ids():
            try:
                self.act(topo, lifecycle.Action.startup())
            except NimbusError as exc:
                log.warning("startup: %s", exc)

    def tick(self) -> None:
        """One monitor round: due delayed actions, then heartbeat timeouts and scheduling.
        Raises `NotConnected` without reading anything while ZooKeeper is away."""
        if not self.state.ready:
            raise NotConnected("not connected to ZooKeeper")
        with self.lock:
            now = self.clock()
            for topo in self.state.storm_ids():
                base = self.state.get_storm(topo)
                if base is None:
                    continue
                if base.delayed_action == lifecycle.ActionName.DO_UPGRADE.value and base.upgrade_topology is not None:
                    self._drained(topo, base)
                    base = self.state.get_storm(topo)
                    if base is None:
                        continue
                for action in lifecycle.due_actions(lifecycle.from_storm_base(base), now):
                    self.act(topo, action)
            self.mk_assignments()

    def mk_assignments(self, fresh: frozenset[str] = frozenset()) -> dict[str, bool]:
        """Schedule every live topology and write the assignments that changed; those of `fresh`
        (an upgrade's new launch) are written whatever the diff, every executor with a new start
        time (its workers start over)."""
        with self.lock:
            now = self.clock()
            supervisors = self.state.supervisors(watch=lambda *_: self.wake.set())
            requests: list[scheduler.SchedulingRequest] = []
            currents: dict[str, Assignment] = {}
            # topologies whose assignment node could not be read: written again whatever the diff
            unreadable: set[str] = set()
            held: set[WorkerSlot] = set()
            storm_ids = sorted(self.state.storm_ids())
            for topo in list(self.seen):
                if topo not in storm_ids:
                    del self.seen[topo]
                    self.metrics.forget(topo)
            for topo in storm_ids:
                base = self.state.get_storm(topo)
                if base is None:
                    continue
                # an unreadable node (garbage from another client) reads as the last assignment
                # this nimbus read or wrote (state.read_assignment says so in one line)
                stored, readable = self.state.read_assignment(topo)
                current = stored or Assignment()
                if not readable:
                    unreadable.add(topo)
                if base.status is TopologyStatus.KILLED:
                    held.update(current.slots().values())
                    continue
                currents[topo] = current
                slots = current.slots()
                beats = self.state.get_worker_heartbeats(topo)
                seen = self.seen[topo] = monitor.observe_heartbeats(self.seen.get(topo, {}), beats, now)
                launched = {
                    e: current.executor_start_time_secs.get(executor_key(e), 0.0) for e in slots
                }
                alive = monitor.alive_executors(
                    slots,
                    monitor.executor_heartbeat_times(slots, beats, seen),
                    launched,
                    now,
                    self.timeouts.task_timeout,
                    self.timeouts.launch_timeout,
                    observed_since=self.observed_since,
                    grace=self.reconnect_grace,
                )
                requests.append(
                    scheduler.SchedulingRequest(
                        topology_id=topo,
                        executors=needed_executors(base),
                        num_workers=base.num_workers,
                        current=slots,
                        alive=alive,
                        allowed=self.allowed_slots(topo, base),
                        placement=self.placement(topo, base),
                    )
                )
            cluster = schedulable_cluster({n: info.ports for n, info in supervisors.items()}, held,
                                          self.node_labels())
            result = scheduler.schedule(requests, cluster)
            written: dict[str, bool] = {}
            for req in requests:
                new = result.get(req.topology_id, {})
                diff = scheduler.diff_assignment(req.current, new)
                if not diff.changed and req.topology_id not in unreadable | fresh:
                    written[req.topology_id] = False
                    continue
                old = currents[req.topology_id]
                starts = {
                    executor_key(e): (
                        old.executor_start_time_secs.get(executor_key(e), now)
                        if e in diff.unchanged and req.topology_id not in fresh
                        else now
                    )
                    for e in new
                }
                assignment = Assignment(
                    executor_slots={executor_key(e): s.key() for e, s in sorted(new.items())},
                    node_host={
                        n: supervisors[n].host for n in {s.node for s in new.values()} if n in supervisors
                    },
                    executor_start_time_secs=starts,
                )
                written[req.topology_id] = self.state.set_assignment(req.topology_id, assignment)
                dead = set(req.current) - set(req.alive)
                self.metrics.assignment_written(req.topology_id, len(dead))
                self._event(
                    f"{req.topology_id}: assignment {len(new)}/{len(req.executors)} executors on"
                    f" {len(set(new.values()))} slots (moved {len(diff.moved)}, added"
                    f" {len(diff.added)}, removed {len(diff.removed)}"
                    + (f", {len(dead)} dead)" if dead else ")")
                )
            return written

    # -- the monitor loop ----------------------------------------------------------------------
    def start(self) -> None:
        self.startup()
        self.thread = threading.Thread(target=self._loop, name="nimbus", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            self.wake.wait(self.monitor_freq_secs)
            self.wake.clear()
            if self.stop_event.is_set():
                break
            try:
                self.tick()
                self.zookeeper_reachable()
            except CONNECTION_ERRORS as exc:
                self.zookeeper_unreachable(exc)
            except Exception:
                log.exception("nimbus monitor round failed; retrying")

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(10)
