"""Nimbus on Kubernetes: supervisors are Nodes, workers are pods, the user's view is the
Topology resource.

`KubeNimbus` is `squall_operator.nimbus.Nimbus` (same lifecycle table, scheduler and monitor,
same ZooKeeper layout) with three things added:

* supervisors come from the Nodes the API server lists (`KubeClusterState.supervisors`), not
  from ephemeral ZooKeeper nodes: a NotReady or cordoned node offers no slots, so the scheduler
  moves its executors;
* a reconcile round (every `monitor_freq_secs`, and at once when a handler wakes it) that turns
  each Topology resource's spec into nimbus actions (submit, activate, deactivate, rebalance,
  kill), runs nimbus's monitor round, makes the worker pods match the assignment, and writes the
  resource's status;
* Events on the resource for everything a user would ask "why?" about.

Everything that must survive an operator restart is in ZooKeeper (lifecycle state, pending
delayed actions, assignments) or on the resource (spec, status, finalizer): the in-memory
registry of resources is rebuilt by kopf's resume handlers, and `startup()` resumes pending kills
and rebalances from ZooKeeper.

Only one operator acts at a time: `LeaseElector` holds a coordination.k8s.io Lease, and the
process exits if it cannot renew it in time (the kubelet restarts it as a standby).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from squall.errors import TopologyError
from squall.models.cluster import (
    LOAD_ERROR_COMPONENT,
    Assignment,
    StormBase,
    SupervisorInfo,
    TopologyStatus,
    WorkerSlot,
)
from squall.models.v1alpha1 import API_VERSION, KIND, Topology, WorkerSpec
from squall.state import CONNECTION_ERRORS, ClusterState, NotConnected, StateError, Watch, ZkCredentials
from squall.validation import check_topology, parse_topology
from squall.worker.security import CurveKeys
from squall_operator import monitor, pods, scheduler
from squall_operator import placement as placements
from squall_operator import roll as rolls
from squall_operator.metrics import NimbusMetrics
from squall_operator.nimbus import Nimbus, NimbusError, needed_executors

log = logging.getLogger("squall.operator")

__all__ = [
    "Health",
    "KubeApi",
    "KubeClusterState",
    "KubeNimbus",
    "KubernetesApi",
    "LeaseElector",
    "OperatorConfig",
    "Resource",
]


class ApiConflict(Exception):
    """The object already exists, or changed since it was read (HTTP 409)."""


class ApiNotFound(Exception):
    """HTTP 404."""


class ApiRejected(Exception):
    """The API server refused the object as invalid or forbidden (HTTP 400, 403, 422): its
    message names the field."""


class KubeApi(Protocol):
    """The few API calls the operator makes; tests pass a fake."""

    def list_nodes(self) -> list[dict[str, Any]]: ...
    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]: ...
    def create_pod(self, namespace: str, body: dict[str, Any]) -> None: ...
    def create_secret(self, namespace: str, body: dict[str, Any]) -> None: ...
    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> None: ...
    def delete_pod(self, namespace: str, name: str, grace_secs: int | None = None) -> None: ...
    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...
    def list_topologies(self, namespace: str | None) -> list[dict[str, Any]]: ...
    def post_event(self, namespace: str, name: str, uid: str, type_: str, reason: str,
                   message: str) -> None: ...
    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_lease(self, namespace: str, body: dict[str, Any]) -> None: ...
    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> None: ...
    def apply_secret(self, namespace: str, body: dict[str, Any]) -> None: ...


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


# --- the Kubernetes API, through the official client ----------------------------------------


def _now_micro() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


class KubernetesApi:
    """`KubeApi` over the `kubernetes` package (in-cluster credentials, else $KUBECONFIG)."""

    def __init__(self, timeout: tuple[float, float] = (5.0, 30.0)) -> None:
        from kubernetes import client, config

        # (connect, read) seconds for every call: a hung call must not stall the loop
        self.timeout = timeout
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        self._client = client
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.coordination = client.CoordinationV1Api()

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kw)
        except ApiException as exc:
            if exc.status == 409:
                raise ApiConflict(str(exc.reason)) from None
            if exc.status == 404:
                raise ApiNotFound(str(exc.reason)) from None
            if exc.status in (400, 403, 422):
                raise ApiRejected(_api_message(exc)) from None
            raise
        data = resp.data
        return json.loads(data) if data else None

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self._call(self.core.list_node)["items"])

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        return list(self._call(self.core.list_namespaced_pod, namespace, label_selector=sel)["items"])

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.core.create_namespaced_pod, namespace, body)

    def create_secret(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.core.create_namespaced_secret, namespace, body)

    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self._client.NetworkingV1Api().create_namespaced_network_policy, namespace, body)

    def delete_pod(self, namespace: str, name: str, grace_secs: int | None = None) -> None:
        kw: dict[str, Any] = {}
        if grace_secs is not None:
            kw["grace_period_seconds"] = grace_secs
        try:
            self._call(self.core.delete_namespaced_pod, name, namespace, **kw)
        except ApiNotFound:
            pass

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        # a JSON patch replacing the whole status: a merge patch would keep map keys that are
        # gone (a slot the topology left stays under status.slots)
        self._call(
            self.custom.patch_namespaced_custom_object_status,
            pods.GROUP, "v1alpha1", namespace, "topologies", name,
            [{"op": "add", "path": "/status", "value": status}],
            _content_type="application/json-patch+json",
        )

    def list_topologies(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            out = self._call(self.custom.list_cluster_custom_object, pods.GROUP, "v1alpha1", "topologies")
        else:
            out = self._call(self.custom.list_namespaced_custom_object, pods.GROUP, "v1alpha1",
                             namespace, "topologies")
        return list(out["items"])

    def post_event(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": name,
                               "namespace": namespace, "uid": uid},
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "squall-operator"},
            "reportingComponent": "squall-operator",
            "reportingInstance": os.environ.get("HOSTNAME", "squall-operator"),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._call(self.core.create_namespaced_event, namespace, body)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self._call(self.coordination.read_namespaced_lease, name, namespace)
            return out
        except ApiNotFound:
            return None

    def create_lease(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.coordination.create_namespaced_lease, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self._call(self.coordination.replace_namespaced_lease, name, namespace, body)

    def apply_secret(self, namespace: str, body: dict[str, Any]) -> None:
        """Create the Secret, or replace its data when it exists."""
        try:
            self._call(self.core.create_namespaced_secret, namespace, body)
        except ApiConflict:
            self._call(self.core.replace_namespaced_secret, body["metadata"]["name"], namespace, body)


# --- readiness ------------------------------------------------------------------------------------


def readiness(now: float, api_ok_at: float | None, api_window: float, zk_connected: bool | None,
              zk_what: str = "ZooKeeper") -> tuple[bool, str]:
    """Whether the operator is Ready: it reached the API server within `api_window` seconds and
    it is connected to ZooKeeper (`zk_connected`; None: not known yet, which is not ready)."""
    problems = []
    if api_ok_at is None:
        problems.append("the API server has not answered yet")
    elif now - api_ok_at > api_window:
        problems.append(f"no answer from the API server for {now - api_ok_at:.0f}s")
    if not zk_connected:
        problems.append(f"{zk_what} is not reachable" if zk_connected is False else f"not connected to {zk_what} yet")
    return (not problems, "; ".join(problems) or "ok")


class Health:
    """What the operator's /readyz reports: the API server answered recently (the Lease, the
    Node list) and ZooKeeper is connected (the leader's session; a standby, which has none,
    probes a TCP connection to the ensemble)."""

    def __init__(self, zookeeper: str, api_window: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.zookeeper = zookeeper
        self.api_window = api_window
        self.clock = clock
        self.api_ok_at: float | None = None
        # the leader's kazoo client (has `.connected`), once it has one
        self.zk_client: Any = None
        self._probe: tuple[float, bool] | None = None

    def api_ok(self) -> None:
        self.api_ok_at = self.clock()

    def zk_connected(self) -> bool:
        if self.zk_client is not None:
            return bool(self.zk_client.connected)
        now = self.clock()
        if self._probe is None or now - self._probe[0] > 5:
            self._probe = (now, _tcp_reachable(self.zookeeper))
        return self._probe[1]

    def ready(self) -> tuple[bool, str]:
        return readiness(self.clock(), self.api_ok_at, self.api_window, self.zk_connected(),
                         f"ZooKeeper ({self.zookeeper})")


def _tcp_reachable(connect: str, timeout: float = 1.0) -> bool:
    import socket

    for hostport in connect.split("/", 1)[0].split(","):
        host, _, port = hostport.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port or 2181)), timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


# --- leader election ---------------------------------------------------------------------------


class LeaseElector:
    """A coordination.k8s.io/v1 Lease as a leader lock (client-go's leader election, simplified).

    The holder renews `spec.renewTime` every `duration / 5` seconds; another instance takes the
    Lease over only when it has not been renewed for `duration` seconds. Writes carry the Lease's
    resourceVersion, so two candidates cannot both win one round. A holder that fails to renew
    for `duration * 2 / 3` calls `on_lost` (the operator exits): it must stop acting before a
    standby may take over.
    """

    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str,
                 duration: float = 15.0, clock: Callable[[], float] = time.time,
                 health: Health | None = None) -> None:
        self.api = api
        self.health = health
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self.last_renew = 0.0

    def _body(self, resource_version: str | None, acquire_time: str, transitions: int) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, int(self.duration)),
                "acquireTime": acquire_time,
                "renewTime": _now_micro(),
                "leaseTransitions": transitions,
            },
        }

    def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True when this instance holds it."""
        lease = self.api.get_lease(self.namespace, self.name)
        if self.health is not None:
            self.health.api_ok()
        now = self.clock()
        try:
            if lease is None:
                self.api.create_lease(self.namespace, self._body(None, _now_micro(), 0))
                self.last_renew = now
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = _parse_time(spec.get("renewTime")) or 0.0
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
            transitions = int(spec.get("leaseTransitions") or 0)
            rv = lease["metadata"].get("resourceVersion")
            if holder == self.identity:
                body = self._body(rv, spec.get("acquireTime") or _now_micro(), transitions)
            elif not holder or renewed + duration < now:
                body = self._body(rv, _now_micro(), transitions + 1)
            else:
                return False
            self.api.replace_lease(self.namespace, self.name, body)
            self.last_renew = now
            return True
        except ApiConflict:
            return False

    def acquire(self, stop: threading.Event, poll_secs: float = 2.0) -> bool:
        """Block until the Lease is held (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                if self.try_acquire():
                    log.info("leader election: %s holds lease %s/%s", self.identity, self.namespace, self.name)
                    return True
            except Exception:
                log.exception("leader election: cannot read or write lease %s/%s", self.namespace, self.name)
            stop.wait(poll_secs)
        return False

    def keep(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew until `stop`; call `on_lost` when renewal has failed for too long."""
        interval = max(0.5, self.duration / 5)
        deadline = self.duration * 2 / 3
        while not stop.wait(interval):
            try:
                if self.try_acquire():
                    continue
                log.error("leader election: lease %s taken by another instance", self.name)
                on_lost()
                return
            except Exception:
                log.exception("leader election: renewal failed")
            if self.clock() - self.last_renew > deadline:
                log.error("leader election: could not renew lease for %.0fs", deadline)
                on_lost()
                return


# --- supervisors from Nodes ----------------------------------------------------------------------


class KubeClusterState(ClusterState):
    """ClusterState whose supervisors are the Nodes that offer slots (set by `set_nodes`).

    Until the first node list arrives, reading supervisors raises `StateError`, so nimbus never
    schedules against an empty cluster by mistake (which would unassign every worker)."""

    _nodes: pods.NodeSlots | None = None

    def set_nodes(self, nodes: pods.NodeSlots) -> None:
        self._nodes = nodes

    @property
    def nodes(self) -> pods.NodeSlots | None:
        return self._nodes

    def supervisors(self, watch: Watch | None = None) -> dict[str, SupervisorInfo]:
        nodes = self._nodes
        if nodes is None:
            raise StateError("the Nodes have not been listed yet; not scheduling")
        return {
            name: SupervisorInfo(host=host, ports=list(ports), time_secs=0.0)
            for name, (host, ports) in nodes.slots.items()
        }


# --- the resources nimbus serves -----------------------------------------------------------------


@dataclass
class Resource:
    """One Topology resource, as the handlers last saw it."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    # outcome of validating `validated_generation`
    validated_generation: int | None = None
    topology: Topology | None = None
    problem: str | None = None
    observed_generation: int | None = None
    # generation whose rebalance was rejected / whose ignored changes were reported
    rejected_generation: int | None = None
    ignored_generation: int | None = None
    removed: bool = False
    last_status_write: float = 0.0
    # whether the topology stored in ZooKeeper under this name was submitted for this resource
    owned: bool = False
    # why this resource cannot run now although its spec is valid (a name taken elsewhere)
    conflict: str | None = None
    # the API server refused the worker pod the operator made (an invalid volume, a missing
    # service account): its message
    pod_problem: str | None = None
    # a roll of the worker pods to new settings; mirrored in status.roll so that a restarted
    # operator resumes it
    roll: rolls.Roll | None = None
    # message of a roll that just completed (shown once in the Rolling condition)
    rolled: str | None = None
    # slots whose pod the kubelet refused (OutOfcpu, NodeAffinity, ...) -> until when nimbus
    # keeps the topology off them
    rejected: dict[WorkerSlot, float] = field(default_factory=dict)
    # slots the topology's pods may use at the last scheduling, and why other nodes offer none
    allowed_count: int | None = None
    refused_nodes: dict[str, str] = field(default_factory=dict)
    # the Topology's CURVE Secret and NetworkPolicy exist (created before its first pod)
    sealed: bool = False
    # the kill's wait asked for with the resource's deletion (`kubectl squall kill -w`), else
    # the running topology's killWaitSecs
    kill_wait: float | None = None
    # (generation, seconds): the wait of the rebalance that generation asks for
    # (`kubectl squall rebalance -w`), else the running topology's rebalanceWaitSecs
    rebalance_wait: tuple[int, float] | None = None


# `kubectl squall kill NAME -w SECONDS` sets it on the Topology before deleting it
KILL_WAIT_ANNOTATION = "squall.io/kill-wait-secs"
# `kubectl squall rebalance NAME -w SECONDS` sets both in the patch that changes the spec: the
# wait holds for the generation that patch makes only, so a later edit of numWorkers or a
# parallelism without -w waits rebalanceWaitSecs again
REBALANCE_WAIT_ANNOTATION = "squall.io/rebalance-wait-secs"
REBALANCE_WAIT_GENERATION_ANNOTATION = "squall.io/rebalance-wait-generation"


def kill_wait_from_annotations(annotations: Mapping[str, str] | None) -> float | None:
    """The kill wait a deleted resource asks for (`KILL_WAIT_ANNOTATION`); None when absent or
    not a number of seconds >= 0."""
    return _secs((annotations or {}).get(KILL_WAIT_ANNOTATION))


def _secs(text: str | None) -> float | None:
    """`text` as a number of seconds >= 0, else None."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value


def rebalance_wait_from_annotations(annotations: Mapping[str, str] | None) -> tuple[int, float] | None:
    """(generation, seconds) of the rebalance wait a resource asks for
    (`REBALANCE_WAIT_ANNOTATION` for `REBALANCE_WAIT_GENERATION_ANNOTATION`); None when either
    is absent or malformed."""
    wait = _secs((annotations or {}).get(REBALANCE_WAIT_ANNOTATION))
    generation = (annotations or {}).get(REBALANCE_WAIT_GENERATION_ANNOTATION) or ""
    if wait is None or not generation.isdigit():
        return None
    return int(generation), wait


def topology_resource(res: Resource) -> dict[str, Any]:
    """The Topology as nimbus stores it: only name, namespace and labels of the metadata."""
    meta: dict[str, Any] = {"name": res.name, "namespace": res.namespace, "uid": res.uid}
    if res.labels:
        meta["labels"] = dict(res.labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": res.spec}


def _comparable_spec(topology: Topology) -> dict[str, Any]:
    """The spec without what a running topology may change (workers, parallelism, active)."""
    data = topology.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("numWorkers", None)
    data.pop("active", None)
    # worker pod settings roll the workers (`KubeNimbus.reconcile_roll`)
    data.pop("worker", None)
    for kind in ("spouts", "bolts"):
        for comp in data.get(kind, []):
            comp.pop("parallelism", None)
    return data


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
        if metrics is not None:
            self.metrics = metrics
        self.metrics.watch_phases(self._phases)

    def _phases(self) -> list[str]:
        with self.lock:
            return [str(res.status.get("phase") or pods.PHASE_PENDING) for res in self.resources.values()]

    # -- events ----------------------------------------------------------------------------------
    def _event(self, text: str) -> None:
        super()._event(text)
        topo, sep, message = text.partition(": ")
        res = self._owner(topo) if sep else None
        if res is None:
            return
        if message.startswith("assignment "):
            self.post(res, "Normal", "Assigned", message)
        elif message == "removed" and res.deleting:
            self.post(res, "Normal", "Removed", "worker pods and ZooKeeper state are being removed")

    def _owner(self, topo: str) -> Resource | None:
        found = [r for r in self.resources.values() if r.name == topo and not r.removed]
        owned = [r for r in found if r.owned]
        return next(iter(owned or found), None)

    def post(self, res: Resource, type_: str, reason: str, message: str) -> None:
        try:
            self.api.post_event(res.namespace, res.name, res.uid, type_, reason, message)
        except Exception:
            log.warning("cannot post event %s on %s/%s: %s", reason, res.namespace, res.name, message,
                        exc_info=True)

    @staticmethod
    def owns(res: Resource, base: StormBase | None) -> bool:
        """Whether `base` (the stored topology of res's name) was submitted for `res`."""
        if base is None:
            return False
        meta = base.topology.get("metadata") or {}
        if meta.get("uid") is not None:
            return bool(meta["uid"] == res.uid)
        return meta.get("namespace") in (None, res.namespace)

    # -- what the kopf handlers call ---------------------------------------------------------------
    def register(self, namespace: str, name: str, uid: str, generation: int,
                 spec: Mapping[str, Any], labels: Mapping[str, str] | None = None,
                 status: Mapping[str, Any] | None = None, deleting: bool = False,
                 rebalance_wait: tuple[int, float] | None = None) -> Resource:
        """Record the resource as the API server has it now and wake the reconcile loop;
        `rebalance_wait`: see `rebalance_wait_from_annotations`."""
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
            if status and not res.status:
                res.status = dict(status)
            saved = res.status.get("roll")
            if res.roll is None and isinstance(saved, Mapping) and saved.get("step"):
                # a roll this resource was in when the operator stopped: resume it
                res.roll = rolls.Roll(str(saved["step"]), _parse_time(saved.get("due")) or 0.0,
                                      str(saved.get("image", "")), tuple(saved.get("from") or ()))
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

    def forget(self, uid: str) -> None:
        with self.lock:
            self.resources.pop(uid, None)
            self._zk_auth_done.discard(uid)

    # -- placement -------------------------------------------------------------------------------
    REJECT_COOLDOWN_SECS = 300.0

    def allowed_slots(self, topo: str, base: StormBase) -> frozenset[WorkerSlot] | None:
        """Nimbus still decides the assignment, but offers a topology only the slots whose node
        its pods may use (pods.allowed_slots), minus slots whose pod the kubelet refused lately."""
        nodes, raw = self.kstate.nodes, self._raw_nodes
        if nodes is None or raw is None:
            return None
        res = self._owner(topo)
        worker = (self.worker_spec(res, base) if res is not None
                  else Topology.model_validate(base.topology).spec.worker)
        allowed, refused = pods.allowed_slots(raw, nodes, worker, pods.worker_requests(self.config.worker, worker))
        if res is not None:
            now = self.clock()
            res.rejected = {s: t for s, t in res.rejected.items() if t > now}
            allowed = allowed - set(res.rejected)
            res.allowed_count = len(allowed)
            res.refused_nodes = refused
        return allowed

    def placement(self, topo: str, base: StormBase) -> scheduler.Placement:
        """The pod (anti-)affinity and preferred node affinity of `topo`'s `spec.worker`, which
        nimbus honours when it places the workers (see squall_operator.placement)."""
        res = self._owner(topo)
        if res is None or self._raw_nodes is None:
            return scheduler.NO_PLACEMENT
        worker = self.worker_spec(res, base)
        return placements.topology_placement(topo, res.namespace, self.config.worker, worker,
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
                assignment = self.state.get_assignment(res.name)
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

    def reconcile_spec(self, res: Resource) -> None:
        topo = res.name
        res.conflict = None
        if res.deleting:
            self._reconcile_kill(res)
            return
        self.validate(res)
        base = self.state.get_storm(topo)
        res.owned = self.owns(res, base)
        if res.problem is not None or res.topology is None:
            res.observed_generation = res.generation
            return
        topology = res.topology
        if base is None:
            self.submit(topology)
            res.owned = True
            res.observed_generation = res.generation
            self.post(res, "Normal", "Submitted",
                      f"submitted: {len(topology.spec.components)} components, "
                      f"{topology.spec.num_workers} workers"
                      + ("" if topology.spec.active else ", spouts inactive"))
            return
        if not res.owned:
            owner = (base.topology.get("metadata") or {}).get("namespace")
            if base.status is TopologyStatus.KILLED:
                res.conflict = (f"waiting for the previous topology named {topo!r} to be removed "
                                "(it is being killed)")
            else:
                res.conflict = (f"a topology named {topo!r} already runs in namespace {owner!r}; "
                                "topology names are unique per operator")
            return
        if base.status in (TopologyStatus.KILLED, TopologyStatus.REBALANCING):
            return
        spec = topology.spec
        running = Topology.model_validate(base.topology)
        if _comparable_spec(running) != _comparable_spec(topology):
            if res.ignored_generation != res.generation:
                res.ignored_generation = res.generation
                self.post(res, "Warning", "SpecChangeIgnored",
                          "a running topology can change numWorkers, parallelism and active only; "
                          "delete it and apply it again to change anything else")
        executors = {c.name: c.parallelism for c in spec.components}
        changed = {c: n for c, n in executors.items() if base.component_executors.get(c) != n}
        workers = spec.num_workers if spec.num_workers != base.num_workers else None
        if changed or workers is not None:
            if res.rejected_generation == res.generation:
                return
            asked = res.rebalance_wait[1] if res.rebalance_wait and res.rebalance_wait[0] == res.generation else None
            wait = running.spec.rebalance_wait if asked is None else asked
            try:
                self.rebalance(topo, workers, changed or None, wait)
            except NimbusError as exc:
                res.rejected_generation = res.generation
                res.observed_generation = res.generation
                self.post(res, "Warning", "RebalanceRejected", str(exc))
                return
            parts = [f"numWorkers {base.num_workers} -> {workers}"] if workers is not None else []
            parts += [f"{c} parallelism {base.component_executors.get(c)} -> {n}"
                      for c, n in sorted(changed.items())]
            self.post(res, "Normal", "RebalanceRequested",
                      f"rebalance ({', '.join(parts)}): spouts deactivated, reassigning in "
                      f"{wait:g}s ({'rebalanceWaitSecs' if asked is None else REBALANCE_WAIT_ANNOTATION})")
            res.observed_generation = res.generation
            return
        if spec.active and base.status is TopologyStatus.INACTIVE and res.roll is None:
            self.activate(topo)
            self.post(res, "Normal", "Activated", "spouts activated")
        elif not spec.active and base.status is TopologyStatus.ACTIVE:
            self.deactivate(topo)
            self.post(res, "Normal", "Deactivated", "spouts deactivated; workers stay up")
        res.observed_generation = res.generation

    def _reconcile_kill(self, res: Resource) -> None:
        base = self.state.get_storm(res.name)
        res.owned = self.owns(res, base)
        if base is not None and res.owned:
            if base.status is not TopologyStatus.KILLED:
                asked = res.kill_wait
                wait = Topology.model_validate(base.topology).spec.kill_wait if asked is None else asked
                self.kill(res.name, wait)
                self.post(res, "Normal", "Killing",
                          f"spouts deactivated; removing the workers in {wait:g}s "
                          f"({'killWaitSecs' if asked is None else KILL_WAIT_ANNOTATION})")
            return
        # nothing of ours in ZooKeeper: done once the worker pods are gone too
        if not self._pods_of(res):
            if base is None and not res.removed:
                # a worker that was still stopping may have written a last heartbeat or error
                # after the topology was torn down; no pod is left to write more
                self.state.teardown_topology(res.name)
            if not res.removed:
                self.post(res, "Normal", "Killed", "worker pods and ZooKeeper state removed")
            res.removed = True

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
            names = {t["metadata"]["name"] for ns in namespaces for t in self.api.list_topologies(ns)}
        except Exception:
            log.warning("cannot list Topologies; not looking for orphans", exc_info=True)
            return
        running = set(self.state.storm_ids())
        for topo in self.state.topologies_with_state() - running:
            # leftovers (heartbeats, errors) of a topology that is gone and has no resource
            if topo not in names and not any(r.name == topo for r in self.resources.values()):
                self.state.teardown_topology(topo)
        for topo in sorted(running):
            if topo in names or any(r.name == topo for r in self.resources.values()):
                continue
            base = self.state.get_storm(topo)
            if base is None or base.status is TopologyStatus.KILLED:
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
        base = self.state.get_storm(res.name)
        mine = self.owns(res, base)
        assignment = self.state.get_assignment(res.name) if mine else None
        wanted = set(assignment.slots().values()) if assignment is not None else set()
        existing = [pods.pod_view(p) for p in self._pods_of(res)]
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
                                   generation=pods.pod_generation(secrets.randbelow))
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
        invalid change) the running one's."""
        if res.topology is not None:
            return res.topology.spec.worker
        if base is not None:
            return Topology.model_validate(base.topology).spec.worker
        return None

    # -- rolling the workers to new pod settings -----------------------------------------------------
    def reconcile_roll(self, res: Resource, now: float) -> None:
        """Roll worker pods whose settings (image, env, resources, ...) are not the topology's:
        read the inputs of `roll.step` and apply its effects (see squall_operator.roll)."""
        base = self.state.get_storm(res.name) if res.owned and not res.deleting else None
        if base is None:
            res.roll = None
            return
        worker = self.worker_spec(res, base)
        want = pods.template_hash(self.config.worker, worker)
        live = [v for v in (pods.pod_view(p) for p in self._pods_of(res)) if not v.deleting]
        assignment = self.state.get_assignment(res.name) or Assignment()
        ready = {v.slot for v in live if v.ready and v.template == want}
        assigned = set(assignment.slots().values())
        running = Topology.model_validate(base.topology)
        inp = rolls.RollInput(
            now=now, storm=base.status,
            outdated=[(v.name, v.slot, v.image) for v in live if v.template != want],
            all_ready=assigned <= ready,
            ready=frozenset(v.name for v in live if v.ready),
            unavailable=len(assigned - {v.slot for v in live if v.ready}),
            image=pods.worker_image(self.config.worker, worker),
            rebalance_wait=running.spec.rebalance_wait,
            active=res.topology.spec.active if res.topology is not None else running.spec.active,
        )
        res.roll, effects = rolls.step(res.roll, inp)
        for effect in effects:
            if effect.kind == "deactivate":
                self.deactivate(res.name)
            elif effect.kind == "activate":
                self.activate(res.name)
            elif effect.kind == "restamp":
                self._restamp(res.name, set(effect.slots), now)
            elif effect.kind == "delete":
                for name in effect.pods:
                    self.api.delete_pod(res.namespace, name)
                    log.info("topology %s: rolling worker pod %s to %s", res.name, name, inp.image)
            elif effect.kind == "event":
                self.post(res, "Normal", effect.reason, effect.message)
                if effect.reason == "RollCompleted":
                    res.rolled = effect.message

    def _restamp(self, topo: str, slots: set[WorkerSlot], now: float) -> None:
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
        if res.removed:
            return
        base = self.state.get_storm(res.name)
        if not self.owns(res, base):
            base = None
        assignment = self.state.get_assignment(res.name) if base is not None else None
        beats = self.state.get_worker_heartbeats(res.name) if base is not None else {}
        views = [pods.pod_view(p) for p in self._pods_of(res)]
        errors = {}
        if base is not None:
            for comp in base.component_executors:
                errors[comp] = self.state.last_error(res.name, comp)
        blockers: list[pods.Problem] = []
        if res.pod_problem is not None:
            blockers.append(pods.Problem("InvalidPodTemplate", res.pod_problem))
        if base is not None:
            # before the pods' own reasons: a worker that cannot load its classes crash-loops,
            # and the import error says why
            load = self.state.last_error(res.name, LOAD_ERROR_COMPONENT)
            newest_beat = max((b.time_secs for b in beats.values()), default=0.0)
            # a worker that started since the error loads the classes: the error is old
            if load is not None and newest_beat < load.time_secs:
                text = load.error.strip().splitlines()
                blockers.append(pods.Problem(
                    "ComponentLoadFailed",
                    f"worker {load.host or '?'}:{load.port} cannot load the topology's classes: "
                    + "; ".join(text[-3:])[:600]))
        blockers += pods.pod_problems(views)
        if base is not None and res.allowed_count is not None and base.status is not TopologyStatus.KILLED:
            desired = min(base.num_workers, len(needed_executors(base)))
            placed = len(set((assignment or Assignment()).slots().values()))
            if placed < desired:
                refused = "".join(f"; {n}: {w}" for n, w in sorted(res.refused_nodes.items()))
                affinity = self.worker_spec(res, base)
                ruled = (" or ruled out by its pod (anti-)affinity" if affinity and affinity.affinity and (
                    affinity.affinity.pod_affinity or affinity.affinity.pod_anti_affinity) else "")
                blockers.append(pods.Problem(
                    "Unschedulable",
                    f"{placed}/{desired} workers placed: {res.allowed_count} slots on the nodes this "
                    f"topology's pods may use, the others taken{ruled}{refused}"))
        view = None
        if res.roll is not None:
            r = res.roll
            if r.step == rolls.DRAINING:
                msg = (f"spouts deactivated, in-flight tuples finishing; replacing the workers "
                       f"({', '.join(r.from_images)} -> {r.image}) at {pods.iso_time(r.due)}")
            else:
                msg = (f"outdated worker pods replaced by pods running {r.image}, one slot at a time (the next "
                       "when the previous is ready); spouts activate when all are ready")
            view = pods.RollView(r.step, msg)
        status = pods.build_status(
            base=base, assignment=assignment, heartbeats=beats, pods=views, errors=errors, now=now,
            generation=res.observed_generation, previous=res.status, deleting=res.deleting,
            problem=res.problem or res.conflict, blockers=blockers, roll=view, rolled=res.rolled,
        )
        if res.roll is not None:
            status["roll"] = res.roll.to_status(pods.iso_time)
        if any(c.get("type") == "ZooKeeperReachable" for c in status["conditions"]):
            status["conditions"] = pods.merge_conditions(status["conditions"], [pods.condition(
                "ZooKeeperReachable", True, "Connected", "connected to ZooKeeper", now,
                status["conditions"])])
        old = {k: v for k, v in res.status.items() if k != "uptimeSecs"}
        new = {k: v for k, v in status.items() if k != "uptimeSecs"}
        if old == new and now - res.last_status_write < self.config.status_refresh_secs:
            return
        self._note_transitions(res, res.status, status)
        try:
            self.api.patch_status(res.namespace, res.name, status)
        except ApiNotFound:
            return
        res.rolled = None
        res.status = status
        res.last_status_write = now

    def _note_transitions(self, res: Resource, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        def cond(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
            return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})

        before, after = cond(old, "Rebalancing"), cond(new, "Rebalancing")
        if after.get("reason") != before.get("reason") and after.get("reason") in ("Reassigned", "Completed"):
            self.post(res, "Normal", "Rebalance" + str(after["reason"]), str(after.get("message", "")))
        if old.get("phase") == "Failed" and new.get("phase") != "Failed":
            self.post(res, "Normal", "SpecFixed", "the spec is valid again")
        before, after = cond(old, "WorkersHealthy"), cond(new, "WorkersHealthy")
        if after.get("status") == "False" and (before.get("status"), before.get("reason")) != ("False", after.get("reason")):
            # InvalidPodTemplate has its own Event when the pod is refused
            if after.get("reason") != "InvalidPodTemplate":
                self.post(res, "Warning", str(after["reason"]), str(after.get("message", "")))
        elif after.get("status") == "True" and before.get("status") == "False":
            self.post(res, "Normal", "WorkersHealthy", "no worker reports a problem any more")

