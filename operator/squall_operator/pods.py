"""Pure builders for what the operator writes to Kubernetes: worker pods, the Topology status,
and the slots each Node offers.

Storm's supervisor becomes a rule: every schedulable Node offers slots (node, port), and every
slot the assignment uses is one worker pod pinned to its node. These functions turn plain values
(cluster-state payloads, Node and Pod objects as mappings) into plain mappings; the kopf handlers
and the nimbus shell do the I/O. Nothing here reads a clock: `now` is passed in.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from squall.models.cluster import (
    Assignment,
    ErrorInfo,
    ExecutorStats,
    StormBase,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.models.v1alpha1 import API_VERSION, WorkerSpec
from squall_operator import degraded, stored

__all__ = [
    "LABEL_COMPONENT",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_TOPOLOGY",
    "ANNOTATION_LAUNCH",
    "ANNOTATION_SLOT",
    "ANNOTATION_TEMPLATE",
    "NodeSlots",
    "PodView",
    "SlotConfig",
    "WorkerPodConfig",
    "build_status",
    "condition",
    "disruption_budget",
    "disruption_budget_name",
    "iso_time",
    "merge_conditions",
    "node_slots",
    "pod_generation",
    "pod_name",
    "pod_view",
    "selector_string",
    "template_hash",
    "throughput",
    "metrics_port",
    "scrape_annotations",
    "worker_pod",
    "worker_probes",
    "worker_selector",
]

GROUP: Final = API_VERSION.partition("/")[0]
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_TOPOLOGY: Final = "squall.io/topology"
LABEL_NODE: Final = "squall.io/node"
LABEL_PORT: Final = "squall.io/port"
# the launch of the topology (StormBase.launch_time_secs, as repr: read back to the same float)
# a worker pod was made for; roll.older_launch finds the pods an interrupted graph upgrade left
ANNOTATION_LAUNCH: Final = "squall.io/launch"
ANNOTATION_SLOT: Final = "squall.io/slot"
# hash of everything a worker pod is made from but its slot: a pod whose hash differs from the
# topology's current one runs outdated settings (another image) and is rolled
ANNOTATION_TEMPLATE: Final = "squall.io/template-hash"
# ZooKeeper digest credentials (docs/reliability.md "ZooKeeper ACLs"): a Secret per topology, in
# its namespace and owned by it; its worker pods get the key as SQUALL_ZK_AUTH (secretKeyRef)
ZK_AUTH_KEY: Final = "credentials"
ZK_AUTH_ENV: Final = "SQUALL_ZK_AUTH"
SLOTS_LABEL: Final = "squall.io/slots"
MAX_NAME: Final = 63

_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")


# --- names ------------------------------------------------------------------------------------


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _fit(text: str, clean: str, limit: int, ends: str) -> str:
    """`clean` (`text` made valid) if it is `text` unchanged and fits `limit`; else its head
    with a short hash of `text`, so two different inputs do not collapse onto one value."""
    if clean == text and len(clean) <= limit:
        return clean
    suffix = _digest(text)
    head = clean[: limit - len(suffix) - 1].rstrip(ends)
    return f"{head}-{suffix}" if head else suffix


def dns_label(text: str, limit: int = MAX_NAME) -> str:
    """`text` as a DNS label (lowercase alphanumerics and '-', at most `limit` characters).

    A name that had to be changed or cut keeps a short hash of the original."""
    clean = re.sub("-{2,}", "-", _INVALID.sub("-", text.lower()).strip("-"))
    return _fit(text, clean, limit, "-")


def label_value(text: str) -> str:
    """`text` as a label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)."""
    return _fit(text, _LABEL_INVALID.sub("-", text).strip("-._"), MAX_NAME, "-._")


def pod_name(topology: str, slot: WorkerSlot, generation: str = "") -> str:
    """The worker pod of `slot`: "<topology>-<node>-<port>-<generation>", DNS-safe, at most 63
    characters (the slot part cut, with a hash, to leave room for the generation).

    A slot's pods differ by `generation` (a short random suffix, `pod_generation`), so the
    replacement of a deleted pod is created at once, while the old one still terminates: under
    the slot's own name the API server refused it until the old one was gone (2-6 s). The slot
    stays in the labels (`squall.io/node`, `squall.io/port`) and the `squall.io/slot`
    annotation, which is what maps a pod to its slot."""
    if not generation:
        return dns_label(f"{topology}-{slot.node}-{slot.port}")
    if not re.fullmatch(r"[a-z0-9]{1,10}", generation):
        raise ValueError(f"pod generation {generation!r}: expected 1-10 of [a-z0-9]")
    return f"{dns_label(f'{topology}-{slot.node}-{slot.port}', MAX_NAME - len(generation) - 1)}-{generation}"


# what Kubernetes' own generated suffixes use (no vowels: no words), so they read alike
GENERATION_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
GENERATION_LENGTH: Final = 5


def pod_generation(randbelow: Any) -> str:
    """A new pod generation suffix, from `randbelow(n)` (`secrets.randbelow`: given, so that
    this module stays free of hidden randomness)."""
    return "".join(GENERATION_ALPHABET[randbelow(len(GENERATION_ALPHABET))] for _ in range(GENERATION_LENGTH))


def zk_auth_secret_name(topology: str) -> str:
    return f"{topology}-zk-auth"


def zk_auth_secret(topology: str, uid: str, namespace: str, credentials: str) -> dict[str, Any]:
    """The Secret holding the ZooKeeper credentials (`user:password`) the topology's workers
    authenticate with; owned by the Topology, so it goes when the Topology goes."""
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": zk_auth_secret_name(topology),
            "namespace": namespace,
            "labels": {**worker_selector(topology), LABEL_MANAGED_BY: "squall-operator"},
            "ownerReferences": [owner_reference(topology, uid)],
        },
        "data": {ZK_AUTH_KEY: base64.b64encode(credentials.encode()).decode()},
    }


def worker_selector(topology: str) -> dict[str, str]:
    """Labels every worker pod of `topology` carries (a label selector for them)."""
    return {LABEL_NAME: "squall-worker", LABEL_TOPOLOGY: label_value(topology)}


def selector_string(topology: str) -> str:
    """`worker_selector` as a label selector string (what the scale subresource reports, so a
    HorizontalPodAutoscaler finds the topology's worker pods)."""
    return ",".join(f"{k}={v}" for k, v in sorted(worker_selector(topology).items()))


def iso_time(secs: float) -> str:
    """Wall-clock seconds as an RFC 3339 UTC timestamp, as Kubernetes writes them."""
    return dt.datetime.fromtimestamp(secs, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- worker pods --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerPodConfig:
    """How worker pods are made (the chart's `worker.*` values)."""

    image: str
    zookeeper: str
    zk_root: str = "/squall"
    image_pull_policy: str = "IfNotPresent"
    # the container's command; empty: the image's entrypoint (the worker image's runs
    # `python -m squall.worker`); only the arguments are given then
    command: tuple[str, ...] = ()
    # directories holding component modules, passed as --search-path
    search_paths: tuple[str, ...] = ()
    log_level: str = "INFO"
    resources: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    run_as_user: int = 10001
    termination_grace_secs: int = 30
    readiness_period_secs: int = 2
    # the worker's HTTP endpoint (/readyz, /healthz, /metrics) listens on its slot port plus
    # this, on the pod's address: pods of one node may share its network (hostNetwork, the test
    # cluster's process kubelet), so every slot needs a port of its own
    metrics_port_offset: int = 1000
    # annotate worker pods with prometheus.io/scrape, /port, /path (Prometheus' pod discovery)
    scrape_annotations: bool = True
    # seconds between liveness checks; a worker fails it after liveness_failures in a row
    liveness_period_secs: int = 10
    liveness_failures: int = 6
    # how long a worker may take to start (import its classes, bind) before liveness counts
    startup_limit_secs: int = 180
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    service_account: str | None = None
    priority_class: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    # mount the topology's ZooKeeper credentials Secret (`zk_auth_secret`) into its workers
    zk_auth: bool = False
    # seal the workers' transport with CURVE (a key pair per Topology, in a Secret it owns)
    curve: bool = True
    # a NetworkPolicy per Topology: only its own workers reach its worker pods
    network_policy: bool = True


def curve_secret_name(topology: str, uid: str) -> str:
    """The Secret holding a Topology's CURVE pair: named after the resource's uid too, so a
    resubmission (a new resource) gets a new pair while the old Secret is garbage-collected."""
    return dns_label(f"{topology}-curve-{_digest(uid)}")


def curve_secret(topology: str, uid: str, namespace: str, public: bytes, secret: bytes) -> dict[str, Any]:
    """The Secret of a Topology's CURVE pair (Z85 text), owned by the Topology."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": curve_secret_name(topology, uid),
            "namespace": namespace,
            "labels": {**worker_selector(topology), LABEL_MANAGED_BY: "squall-operator"},
            "ownerReferences": [owner_reference(topology, uid)],
        },
        "stringData": {"public": public.decode(), "secret": secret.decode()},
        "immutable": True,
    }


def network_policy(topology: str, uid: str, namespace: str) -> dict[str, Any]:
    """The NetworkPolicy letting only a topology's own workers reach its worker pods (on any
    port: the control port is picked at start), and anyone its HTTP port "metrics" (/metrics
    for scrapers; kubelet probes come from the node, which usual network plugins let through)."""
    selector = worker_selector(topology)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": dns_label(f"{topology}-workers"),
            "namespace": namespace,
            "labels": {**selector, LABEL_MANAGED_BY: "squall-operator"},
            "ownerReferences": [owner_reference(topology, uid)],
        },
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": selector}}]},
                {"ports": [{"protocol": "TCP", "port": "metrics"}]},
            ],
        },
    }


def disruption_budget_name(topology: str) -> str:
    return dns_label(f"{topology}-workers")


def disruption_budget(topology: str, uid: str, namespace: str, max_unavailable: int = 1) -> dict[str, Any]:
    """The PodDisruptionBudget of a topology's worker pods, owned by the Topology: a drain (or
    any other eviction) takes at most `max_unavailable` of them at a time, so the slots move one
    by one. Pods that are not Ready may always be evicted (`unhealthyPodEvictionPolicy`): a
    crash-looping worker does not block a drain."""
    selector = worker_selector(topology)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": disruption_budget_name(topology),
            "namespace": namespace,
            "labels": {**selector, LABEL_MANAGED_BY: "squall-operator"},
            "ownerReferences": [owner_reference(topology, uid)],
        },
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Topology",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def template_hash(config: WorkerPodConfig, worker: WorkerSpec | None) -> str:
    """A short hash of what the worker pods are made from (the operator's worker settings and
    the topology's `spec.worker`): it changes exactly when the pods must be rolled."""
    data = [dataclasses.asdict(config), _dump(worker) if worker is not None else None]
    return _digest(json.dumps(data, sort_keys=True, default=str), 16)


def worker_image(config: WorkerPodConfig, worker: WorkerSpec | None) -> str:
    """The image a topology's workers run: its own `spec.worker.image`, else the chart's."""
    return worker.image if worker is not None and worker.image else config.image


def metrics_port(slot: WorkerSlot, config: WorkerPodConfig) -> int:
    """The port of the worker's HTTP endpoint (the container port named `metrics`)."""
    return slot.port + config.metrics_port_offset


def scrape_annotations(port: int) -> dict[str, str]:
    """The `prometheus.io/*` annotations that Prometheus' pod discovery reads."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def _http_probe(path: str, period: int, failures: int, timeout: int = 3) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": period,
            "timeoutSeconds": timeout, "failureThreshold": failures}


def worker_probes(config: WorkerPodConfig) -> dict[str, Any]:
    """The worker container's probes, all on its HTTP endpoint (docs/reliability.md):

    * readiness, `/readyz`: Ready only while the worker's ZooKeeper session is connected, its
      endpoint is registered in that session, its assignment is loaded and its receive and
      transfer loops turn; a TCP probe on the slot port would say Ready for a worker peers
      cannot find;
    * startup, `/healthz`: up to `startup_limit_secs` to import the topology's classes and bind;
    * liveness, `/healthz`: restarted only when its loops died or stopped turning (60 s in the
      worker, then `liveness_failures` checks in a row), never for a ZooKeeper outage."""
    period = config.readiness_period_secs
    return {
        "readinessProbe": _http_probe("/readyz", period, 3),
        "startupProbe": _http_probe("/healthz", period, max(1, -(-config.startup_limit_secs // period))),
        "livenessProbe": _http_probe("/healthz", config.liveness_period_secs, config.liveness_failures, timeout=5),
    }


def worker_pod(
    topology: str, uid: str, namespace: str, slot: WorkerSlot, config: WorkerPodConfig,
    worker: WorkerSpec | None = None, generation: str = "", key: str | None = None,
    launch: float | None = None,
) -> dict[str, Any]:
    """The pod running `slot`'s worker: pinned to the slot's node, owned by the Topology;
    `key`: the topology's key in ZooKeeper (squall.topology_keys; None: the name), what the
    worker reads and writes under, while names and labels of Kubernetes objects take the name;
    `launch`: the topology's launch the pod is made for (`ANNOTATION_LAUNCH`; None: not said).

    `worker` (the topology's `spec.worker`) is laid under the operator's own settings: it
    replaces the chart's image, pull policy, resources and service account, and adds env,
    envFrom, pull secrets, node selector, tolerations, affinity, volumes, mounts, labels and
    annotations; the slot (node, port), the worker's arguments, the probe, the security context
    and the /tmp volume stay the operator's."""
    w = worker or WorkerSpec.model_validate({})
    args = [
        "--zookeeper", config.zookeeper,
        "--root", config.zk_root,
        "--topology", key or topology,
        "--node", slot.node,
        "--port", str(slot.port),
        "--metrics-port", str(metrics_port(slot, config)),
        # the kubelet expands $(POD_IP) from the env below: other workers connect to it
        "--host", "$(POD_IP)",
        "--log-level", config.log_level,
    ]
    for path in config.search_paths:
        args += ["--search-path", path]
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        # deleted (SIGTERM), the worker serves its slot until the slot's next pod has registered,
        # for at most this long (squall.worker.handover): the slot is never empty while the new
        # pod starts. Within the grace period, with time left for the worker's own shutdown
        {"name": "SQUALL_HANDOVER_SECS", "value": str(handover_secs(config))},
    ]
    if config.curve:
        # the topology's CURVE pair, from its own Secret (squall.worker.security reads these)
        env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": curve_secret_name(topology, uid), "key": key}}}
                for var, key in (("SQUALL_CURVE_PUBLIC_KEY", "public"), ("SQUALL_CURVE_SECRET_KEY", "secret"))]
    env += [{"name": k, "value": str(v)} for k, v in sorted(config.env.items())]
    env += [_dump(e) for e in w.env or ()]
    labels = {
        **(w.labels or {}),
        **config.labels,
        **worker_selector(topology),
        LABEL_COMPONENT: "worker",
        LABEL_MANAGED_BY: "squall-operator",
        LABEL_NODE: label_value(slot.node),
        LABEL_PORT: str(slot.port),
    }
    container: dict[str, Any] = {
        "name": "worker",
        "image": worker_image(config, worker),
        "imagePullPolicy": w.image_pull_policy.value if w.image_pull_policy else config.image_pull_policy,
        "args": args,
        "env": env,
        "ports": [
            {"name": "data", "containerPort": slot.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": metrics_port(slot, config), "protocol": "TCP"},
        ],
        **worker_probes(config),
        "resources": _dump(w.resources) if w.resources is not None else dict(config.resources),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *(_dump(m) for m in w.volume_mounts or ())],
    }
    if config.zk_auth:
        env.append({"name": ZK_AUTH_ENV, "valueFrom": {"secretKeyRef": {
            "name": zk_auth_secret_name(topology), "key": ZK_AUTH_KEY}}})
    if w.env_from:
        container["envFrom"] = [_dump(e) for e in w.env_from]
    if config.command:
        container["command"] = list(config.command)
    spec: dict[str, Any] = {
        # pinned: the slot belongs to this node, the scheduler has no say
        "nodeName": slot.node,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": config.termination_grace_secs,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": config.run_as_user,
            "runAsGroup": config.run_as_user,
            "fsGroup": config.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}, *(_dump(v) for v in w.volumes or ())],
    }

    if w.service_account_name:
        # the topology's own account: whether it gets a token is the ServiceAccount's choice
        spec["serviceAccountName"] = w.service_account_name
        del spec["automountServiceAccountToken"]
    elif config.service_account:
        spec["serviceAccountName"] = config.service_account
    if config.priority_class:
        spec["priorityClassName"] = config.priority_class
    secrets = [*config.image_pull_secrets, *(r.name for r in w.image_pull_secrets or ())]
    if secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in dict.fromkeys(secrets)]
    # the kubelet checks these again when it admits the pod; nimbus offers only slots whose
    # node passes them (`placement`)
    placement: dict[str, Any] = {
        "nodeSelector": dict(w.node_selector) if w.node_selector else None,
        "tolerations": [_dump(t) for t in w.tolerations] if w.tolerations else None,
        "affinity": _dump(w.affinity) if w.affinity is not None else None,
    }
    spec.update((k, v) for k, v in placement.items() if v is not None)
    annotations = {**(w.annotations or {}), **config.annotations,
                   **(scrape_annotations(metrics_port(slot, config)) if config.scrape_annotations else {}),
                   ANNOTATION_SLOT: slot.key(), ANNOTATION_TEMPLATE: template_hash(config, worker)}
    if launch is not None:
        annotations[ANNOTATION_LAUNCH] = repr(float(launch))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(topology, slot, generation),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(topology, uid)],
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know about one worker pod."""

    name: str
    slot: WorkerSlot | None
    node: str
    phase: str
    ready: bool
    deleting: bool
    restarts: int = 0
    reason: str = ""
    message: str = ""
    # the worker container's image and the template hash the pod was made from
    image: str = ""
    template: str = ""
    # why the worker container is not running (ErrImagePull, CrashLoopBackOff, ...), and how
    waiting: str = ""
    waiting_message: str = ""
    # the kubelet's or scheduler's PodScheduled=False reason (Unschedulable), if any
    unschedulable: str = ""

    @property
    def finished(self) -> bool:
        """The pod will not run again (evicted, or its containers gave up): replace it."""
        return self.phase in ("Failed", "Succeeded")


def pod_view(pod: Mapping[str, Any]) -> PodView:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    key = (meta.get("annotations") or {}).get(ANNOTATION_SLOT)
    slot: WorkerSlot | None
    try:
        slot = WorkerSlot.from_key(key) if key else None
    except ValueError:
        slot = None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    statuses = status.get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    waiting, waiting_message = "", ""
    for c in statuses:
        w = (c.get("state") or {}).get("waiting") or {}
        if w.get("reason") and w.get("reason") not in ("ContainerCreating", "PodInitializing"):
            waiting, waiting_message = str(w["reason"]), str(w.get("message") or "")
            if waiting == "CrashLoopBackOff":
                last = (c.get("lastState") or {}).get("terminated") or {}
                code = last.get("exitCode")
                detail = str(last.get("message") or last.get("reason") or "").strip()
                waiting_message = (f"exit code {code}" if code is not None else "exited") + (
                    f": {detail.splitlines()[-1][:300]}" if detail else "")
            break
    scheduled: Mapping[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    unschedulable = str(scheduled.get("message") or scheduled.get("reason") or "") \
        if scheduled.get("status") == "False" else ""
    containers = spec.get("containers") or [{}]
    return PodView(
        name=str(meta.get("name", "")),
        slot=slot,
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        deleting=meta.get("deletionTimestamp") is not None,
        restarts=restarts,
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        image=str(containers[0].get("image") or ""),
        template=str((meta.get("annotations") or {}).get(ANNOTATION_TEMPLATE) or ""),
        waiting=waiting,
        waiting_message=waiting_message,
        unschedulable=unschedulable,
    )


def handover_secs(config: WorkerPodConfig) -> int:
    """How long a deleted worker keeps serving its slot for the slot's next pod: 15 s, or less
    where the grace period is short (10 s of it left for the worker's own shutdown)."""
    return max(0, min(15, config.termination_grace_secs - 10))


@dataclass(frozen=True)
class PodPlan:
    """What to do to make the worker pods match the assignment."""

    create: tuple[WorkerSlot, ...]
    # pod name -> why it goes
    delete: Mapping[str, str]
    # pods on nodes that are gone or NotReady: deleted with no grace (no kubelet will confirm)
    force: frozenset[str] = frozenset()


def plan_pods(
    wanted: Iterable[WorkerSlot], pods: Iterable[PodView], unhealthy_nodes: Iterable[str] = ()
) -> PodPlan:
    """Compare the slots the assignment uses with the existing worker pods.

    A slot with no pod, or only a pod being deleted, gets a new one at once (pod names carry a
    generation, `pod_name`): the old pod is terminating, its worker serves the slot until the
    new one has registered (`handover_secs`), then stops. A pod whose slot is no longer assigned, or that
    has finished (Failed/Succeeded: evicted or given up), is deleted, and if its slot is still
    wanted a new one is created in the same round. Except on a node that is gone or NotReady: a
    pod terminating there still covers its slot (no kubelet would run a new one; nimbus moves
    the slot)."""
    wanted = set(wanted)
    unhealthy = set(unhealthy_nodes)
    delete: dict[str, str] = {}
    covered: set[WorkerSlot] = set()
    for pod in pods:
        if pod.slot is None or pod.slot not in wanted:
            if not pod.deleting or pod.node in unhealthy:
                delete[pod.name] = "its slot is no longer assigned"
            continue
        if pod.finished and not pod.deleting:
            delete[pod.name] = f"it {pod.phase.lower()}" + (f" ({pod.reason})" if pod.reason else "")
        if pod.node in unhealthy or not (pod.deleting or pod.finished):
            covered.add(pod.slot)
    force = frozenset(
        p.name for p in pods if p.name in delete and p.node in unhealthy
    )
    create = tuple(sorted(wanted - covered))
    return PodPlan(create=create, delete=delete, force=force)


# --- why a topology cannot run -----------------------------------------------------------------

# container waiting reasons meaning the image cannot be had
IMAGE_PULL_REASONS: Final = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}
)
# waiting reasons meaning the container cannot be made or keeps exiting
CONTAINER_REASONS: Final = frozenset(
    {"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
# restarts after which a worker that is not ready counts as crash-looping even before the
# kubelet says CrashLoopBackOff
CRASH_RESTARTS: Final = 3


@dataclass(frozen=True)
class Problem:
    """Why (part of) a topology cannot run: `reason` is what the STATUS column shows."""

    reason: str
    message: str


def pod_problems(views: Iterable[PodView]) -> list[Problem]:
    """What the worker pods say is wrong, worst first, one entry per reason (the first pod's
    message, with how many pods share it)."""
    found: dict[str, list[str]] = {}
    for pod in sorted(views, key=lambda p: p.name):
        if pod.deleting:
            continue
        if pod.waiting in IMAGE_PULL_REASONS:
            found.setdefault(pod.waiting, []).append(
                f"pod {pod.name}: image {pod.image!r} cannot be pulled"
                + (f": {pod.waiting_message}" if pod.waiting_message else ""))
        elif pod.waiting in CONTAINER_REASONS or (pod.restarts >= CRASH_RESTARTS and not pod.ready):
            reason = pod.waiting if pod.waiting in CONTAINER_REASONS else "CrashLoopBackOff"
            found.setdefault(reason, []).append(
                f"pod {pod.name} ({pod.restarts} restarts): "
                + (pod.waiting_message or "the worker keeps exiting; see kubectl logs"))
        elif refused_by_kubelet(pod):
            # the kubelet refused it (OutOfcpu, NodeAffinity, ...): nimbus moves the slot
            found.setdefault("PodRejected", []).append(
                f"pod {pod.name} on {pod.node or '?'}: {pod.reason}"
                + (f": {pod.message}" if pod.message else ""))
        elif pod.unschedulable:
            found.setdefault("Unschedulable", []).append(f"pod {pod.name}: {pod.unschedulable}")
    order = [*sorted(IMAGE_PULL_REASONS), *sorted(CONTAINER_REASONS), "PodRejected", "Unschedulable"]
    out = []
    for reason in sorted(found, key=lambda r: order.index(r) if r in order else len(order)):
        messages = found[reason]
        more = f" (and {len(messages) - 1} more pods)" if len(messages) > 1 else ""
        out.append(Problem(reason, messages[0] + more))
    return out


# --- nodes and slots ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotConfig:
    """Which Nodes offer slots and how many (the chart's `slots.*` values)."""

    # Node labels a node must carry (all of them) to offer slots; empty: every node
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # slots per node when the node has no `slots_label`
    default_slots: int = 4
    # a Node label overriding the slot count on that node
    slots_label: str = SLOTS_LABEL
    # ports are base_port, base_port + 1, ... (Storm's supervisor.slots.ports 6700-6703)
    base_port: int = 6700


@dataclass(frozen=True)
class NodeSlots:
    """The slots of the healthy nodes, and why the other selected nodes offer none."""

    # node -> (address other workers may use, ports)
    slots: Mapping[str, tuple[str, tuple[int, ...]]]
    # node -> reason it offers no slots (NotReady, cordoned, tainted, bad label)
    unhealthy: Mapping[str, str]


_DOWN_TAINTS = frozenset(
    {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready", "node.kubernetes.io/out-of-service"}
)


def _node_problem(node: Mapping[str, Any]) -> str | None:
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        state = "Unknown" if ready is None else ready.get("status", "Unknown")
        return f"node is NotReady (Ready={state})"
    if spec.get("unschedulable"):
        return "node is cordoned (unschedulable)"
    for taint in spec.get("taints") or []:
        if taint.get("key") in _DOWN_TAINTS and taint.get("effect") in ("NoExecute", "NoSchedule"):
            return f"node has taint {taint['key']}:{taint['effect']}"
    return None


def _node_address(node: Mapping[str, Any]) -> str:
    addresses = (node.get("status") or {}).get("addresses") or []
    for kind in ("InternalIP", "ExternalIP", "Hostname"):
        for a in addresses:
            if a.get("type") == kind and a.get("address"):
                return str(a["address"])
    return str((node.get("metadata") or {}).get("name", ""))


def node_slots(nodes: Iterable[Mapping[str, Any]], config: SlotConfig) -> NodeSlots:
    """The slots each selected, healthy Node offers (a supervisor per node, in Storm's terms)."""
    slots: dict[str, tuple[str, tuple[int, ...]]] = {}
    unhealthy: dict[str, str] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = meta.get("labels") or {}
        if not name or any(labels.get(k) != v for k, v in config.node_selector.items()):
            continue
        problem = _node_problem(node)
        count = config.default_slots
        raw = labels.get(config.slots_label)
        if raw is not None:
            try:
                count = int(raw)
                if count < 0:
                    raise ValueError
            except ValueError:
                problem = problem or f"label {config.slots_label}={raw!r} is not a slot count"
        if problem is not None:
            unhealthy[name] = problem
            continue
        if count == 0:
            continue
        ports = tuple(range(config.base_port, config.base_port + count))
        slots[name] = (_node_address(node), ports)
    return NodeSlots(slots=dict(sorted(slots.items())), unhealthy=dict(sorted(unhealthy.items())))


# --- placement: which nodes a topology's pods may use ---------------------------------------------

# taint effects that keep a pod off a node (PreferNoSchedule only prefers)
_HARD_EFFECTS: Final = ("NoSchedule", "NoExecute")


def _quantity(value: Any) -> float:
    from kubernetes.utils.quantity import parse_quantity

    return float(parse_quantity(value))  # type: ignore[no-untyped-call]


# reasons the kubelet gives a pod it refuses to admit (lifecycle/predicate.go), besides
# OutOf<resource>; an evicted pod is not refused: it comes back on its slot
KUBELET_REJECTIONS: Final = frozenset({
    "NodeAffinity", "NodeName", "NodePorts", "Taint", "TaintToleration", "UnexpectedAdmissionError",
    "NodeSelectorMismatch", "PodOSNotSupported", "InvalidNodeInfo",
})


def refused_by_kubelet(pod: PodView) -> bool:
    """The kubelet refused to admit the pod on its node (Failed before any container ran)."""
    return pod.phase == "Failed" and (pod.reason.startswith("OutOf") or pod.reason in KUBELET_REJECTIONS)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration matching (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def _requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    op, values = req.get("operator"), list(req.get("values") or [])
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing (Kubernetes' rule)
    return all(_requirement_matches(r, labels.get(r.get("key", ""))) for r in exprs) and all(
        _requirement_matches(r, name if r.get("key") == "metadata.name" else None) for r in fields)


def node_fit(node: Mapping[str, Any], worker: WorkerSpec | None,
             requests: Mapping[str, Any]) -> tuple[int | None, str]:
    """How many of a topology's worker pods `node` can take, and why not (all pure values).

    (0, why) when a taint with effect NoSchedule/NoExecute is not tolerated, the node selector
    or the required node affinity does not match, or one worker's `requests` exceed the node's
    allocatable; else (n, "") with n the workers that fit the allocatable (None: no limit, the
    workers request nothing). Other pods on the node are not counted: the kubelet refuses a pod
    that does not fit, and nimbus then moves that slot (`KubeNimbus`)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    labels = meta.get("labels") or {}
    tolerations = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                   for t in (worker.tolerations if worker is not None else None) or ()]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in _HARD_EFFECTS and not any(_tolerates(t, taint) for t in tolerations):
            shown = taint.get("key", "") + (f"={taint['value']}" if taint.get("value") else "")
            return 0, f"taint {shown}:{taint.get('effect')} not tolerated"
    selector = (worker.node_selector if worker is not None else None) or {}
    for key, value in sorted(selector.items()):
        if labels.get(key) != value:
            return 0, f"nodeSelector {key}={value} does not match (node has {labels.get(key)!r})"
    affinity = worker.affinity if worker is not None else None
    required = affinity.node_affinity.required if affinity and affinity.node_affinity else None
    if required is not None:
        terms = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in required.node_selector_terms]
        if not any(_term_matches(t, labels, name) for t in terms):
            return 0, "required node affinity does not match"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    fit: int | None = None
    for resource, amount in sorted(requests.items()):
        want = _quantity(amount)
        if want <= 0:
            continue
        have = _quantity(allocatable[resource]) if resource in allocatable else 0.0
        n = int(have // want)
        if n == 0:
            return 0, f"a worker requests {resource} {amount}, the node has {allocatable.get(resource, 0)} allocatable"
        fit = n if fit is None else min(fit, n)
    return fit, ""


def worker_requests(config: WorkerPodConfig, worker: WorkerSpec | None) -> dict[str, Any]:
    """The resource requests of one worker pod (a limit without a request counts as the request,
    as Kubernetes defaults it)."""
    if worker is not None and worker.resources is not None:
        res = _dump(worker.resources)
    else:
        res = dict(config.resources)
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def allowed_slots(nodes: Iterable[Mapping[str, Any]], offered: NodeSlots, worker: WorkerSpec | None,
                  requests: Mapping[str, Any]) -> tuple[frozenset[WorkerSlot], dict[str, str]]:
    """The slots of `offered` (healthy nodes) a topology's pods may use, and why the other nodes
    offer it none. A node taking n of its workers offers its first n ports."""
    allowed: set[WorkerSlot] = set()
    refused: dict[str, str] = {}
    by_name = {str((n.get("metadata") or {}).get("name", "")): n for n in nodes}
    for name, (_, ports) in sorted(offered.slots.items()):
        node = by_name.get(name)
        if node is None:
            continue
        fit, why = node_fit(node, worker, requests)
        if fit == 0:
            refused[name] = why
            continue
        allowed.update(WorkerSlot(name, p) for p in (ports if fit is None else ports[:fit]))
    return frozenset(allowed), refused


# --- status -------------------------------------------------------------------------------------

PHASE_PENDING: Final = "Pending"
PHASE_RUNNING: Final = "Running"
PHASE_INACTIVE: Final = "Inactive"
PHASE_REBALANCING: Final = "Rebalancing"
# a graph upgrade's drain (squall_operator.upgrade): REBALANCING with a new graph waiting
PHASE_UPGRADING: Final = "Upgrading"
PHASE_KILLING: Final = "Killing"
PHASE_FAILED: Final = "Failed"
PHASE_ROLLING: Final = "Rolling"
# the STATUS column of a Running topology whose Degraded condition is True (not a phase: the
# workers all run, the figures are what is wrong)
STATE_DEGRADED: Final = "Degraded"


@dataclass(frozen=True)
class RollView:
    """A roll of the worker pods to new settings, as the status shows it."""

    # Draining (spouts deactivated, in-flight tuples finishing) | Replacing (outdated pods
    # deleted, new ones starting)
    step: str
    message: str


def condition(
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    now: float,
    previous: Sequence[Mapping[str, Any]] = (),
    generation: int | None = None,
) -> dict[str, Any]:
    """A condition; `lastTransitionTime` is kept from `previous` while the status is unchanged."""
    value = "Unknown" if status is None else ("True" if status else "False")
    old = next((c for c in previous if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == value else None
    out: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or iso_time(now),
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def merge_conditions(
    previous: Sequence[Mapping[str, Any]], new: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    types = {c["type"] for c in new}
    kept = [dict(c) for c in previous if c.get("type") not in types]
    return sorted([*kept, *new], key=lambda c: str(c.get("type")))


def _component_stats(
    stats: Iterable[ExecutorStats],
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    weights: dict[str, int] = {}
    for s in stats:
        c = out.setdefault(
            s.component,
            {"emitted": 0, "transferred": 0, "executed": 0, "acked": 0, "failed": 0,
             "latencyMs": 0.0, "latencyMsP99": 0.0},
        )
        for key in ("emitted", "transferred", "executed", "acked", "failed"):
            c[key] += getattr(s, key)
        # mean latency weighted by samples; p99 as the worst executor's
        w = weights.get(s.component, 0)
        if s.latency_samples:
            total = w + s.latency_samples
            c["latencyMs"] = (c["latencyMs"] * w + s.latency_ms_mean * s.latency_samples) / total
            weights[s.component] = total
        c["latencyMsP99"] = max(c["latencyMsP99"], s.latency_ms_p99)
    for c in out.values():
        c["latencyMs"] = round(c["latencyMs"], 3)
        c["latencyMsP99"] = round(c["latencyMsP99"], 3)
    return out


# the operator's throughput columns: rates over at least this long between two samples (a status
# write in between keeps the last rates), and a sample older than the limit gives no rate (an
# idle topology's status is not rewritten every window: the first rate after it would average
# over the idle time)
RATE_WINDOW_SECS: Final = 5.0
RATE_MAX_SECS: Final = 60.0


def throughput(
    previous: Mapping[str, Any] | None,
    acked: int,
    failed: int,
    now: float,
    window: float = RATE_WINDOW_SECS,
    limit: float = RATE_MAX_SECS,
) -> dict[str, Any]:
    """The status's `ackedPerSec`, `failedPerSec` and `rateSample`, from the cumulative counts
    now (the spouts' acked and failed tuple trees) and the previous status.

    A rate is (count now - count then) / (now - then) against the previous status's sample once
    `window` seconds passed; before that the previous rates and sample stay (no status change).
    A count that went down (a worker restarted, a rebalance restarted the executors) or a sample
    older than `limit` starts a new sample and keeps the previous rates. Nothing moved and rates
    already zero: nothing changes (an idle topology's status is not rewritten every window).
    """
    previous = previous or {}
    sample = previous.get("rateSample") or None
    kept = {k: previous[k] for k in ("ackedPerSec", "failedPerSec") if previous.get(k) is not None}
    fresh = {"timeSecs": round(now, 3), "acked": acked, "failed": failed}
    if not isinstance(sample, Mapping):
        return {**kept, "rateSample": fresh}
    then, then_acked, then_failed = (float(sample.get("timeSecs", 0.0)), int(sample.get("acked", 0)),
                                     int(sample.get("failed", 0)))
    dt_secs = now - then
    same = (acked, failed) == (then_acked, then_failed)
    if dt_secs < window or (same and kept and all(v == 0 for v in kept.values())):
        return {**kept, "rateSample": dict(sample)}
    if acked < then_acked or failed < then_failed or dt_secs > limit:
        return {**kept, "rateSample": fresh}
    return {"ackedPerSec": round((acked - then_acked) / dt_secs, 1),
            "failedPerSec": round((failed - then_failed) / dt_secs, 1),
            "rateSample": fresh}


def _format_rebalance(base: StormBase) -> str:
    parts = []
    if base.rebalance_num_workers is not None:
        parts.append(f"numWorkers {base.num_workers} -> {base.rebalance_num_workers}")
    for comp, n in sorted((base.rebalance_executors or {}).items()):
        parts.append(f"{comp} parallelism {base.component_executors.get(comp)} -> {n}")
    return ", ".join(parts) or "same layout"


def build_status(
    *,
    base: StormBase | None,
    assignment: Assignment | None,
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat],
    pods: Iterable[PodView],
    errors: Mapping[str, ErrorInfo | None],
    now: float,
    generation: int | None,
    previous: Mapping[str, Any] | None = None,
    deleting: bool = False,
    problem: str | None = None,
    blockers: Sequence[Problem] = (),
    roll: RollView | None = None,
    rolled: str | None = None,
    topology: str = "",
    health_settings: degraded.Settings | None = None,
) -> dict[str, Any]:
    """The Topology's `status`, from what nimbus stored, the workers' heartbeats and the pods.

    `previous` is the status now on the resource: conditions keep their transition times, and a
    rebalance that was in progress and is no longer is reported as completed. `problem` is a
    message that makes the topology Failed (an invalid spec, a name already used elsewhere).
    `blockers` say why workers cannot run (an image that cannot be pulled, a crash loop, no
    node for its pods): condition `WorkersHealthy`, and the first one's reason becomes `state`
    (the STATUS column). `roll` is a roll of the workers in progress; `rolled` a message saying
    one just completed. `topology` names it (else the stored topology's name), for the selector
    of its worker pods the scale subresource reports. `health_settings` is the topology's
    `spec.health` (None: the defaults): condition `Degraded` (`degraded.assess`, which keeps its
    sample in `status.health`), and STATUS `Degraded` for a running topology that is.
    """
    previous = previous or {}
    prev_conditions: list[Mapping[str, Any]] = list(previous.get("conditions") or [])
    conditions: list[dict[str, Any]] = []

    def cond(type_: str, status: bool | None, reason: str, message: str) -> None:
        conditions.append(condition(type_, status, reason, message, now, prev_conditions, generation))

    def health() -> None:
        if blockers:
            cond("WorkersHealthy", False, blockers[0].reason,
                 "; ".join(f"{b.reason}: {b.message}" for b in blockers)[:1000])
        else:
            cond("WorkersHealthy", True, "NoProblems", "no worker reports a problem")

    # the scale subresource's status: the workers running, and the selector of their pods
    scale: dict[str, Any] = {"replicas": 0}
    name = topology or (base.name if base is not None else "")
    if name:
        scale["selector"] = selector_string(name)

    if problem is not None and base is None:
        cond("Valid", False, "InvalidSpec", problem)
        cond("Ready", False, "InvalidSpec", "the topology cannot run until its spec is fixed")
        return {
            "phase": PHASE_FAILED,
            "state": PHASE_FAILED,
            "message": problem,
            "observedGeneration": generation,
            **scale,
            "conditions": merge_conditions(prev_conditions, conditions),
        }
    if problem is None:
        cond("Valid", True, "Accepted", "the spec passed validation")
    else:
        # an invalid change to a running topology: the running one goes on unchanged
        cond("Valid", False, "InvalidSpec", f"{problem} (the topology keeps running as before)")
    if base is None:
        phase = PHASE_KILLING if deleting else PHASE_PENDING
        cond("Ready", False, "NotSubmitted" if not deleting else "Removed",
             "removed from the cluster state" if deleting else "not yet submitted to nimbus")
        if blockers:
            health()
        return {
            "phase": phase,
            "state": blockers[0].reason if blockers else phase,
            "message": "; ".join(b.message for b in blockers)[:1000] if blockers else "",
            "observedGeneration": generation,
            **scale,
            "conditions": merge_conditions(prev_conditions, conditions),
        }

    plan = stored.plan(base)
    executors = plan.executors
    assignment = assignment or Assignment()
    slots = assignment.slots()
    used = sorted(set(slots.values()))
    desired = min(base.num_workers, len(executors))
    pods = list(pods)
    by_slot = {p.slot: p for p in pods if p.slot is not None and not p.deleting}
    ready = sum(1 for s in used if s in by_slot and by_slot[s].ready)

    # heartbeats count only from the slot an executor is assigned to
    stats: list[ExecutorStats] = []
    for executor, slot in slots.items():
        beat = heartbeats.get(slot)
        if beat is not None:
            s = beat.executors.get(f"{executor[0]}-{executor[1]}")
            if s is not None:
                stats.append(s)
    per_component = _component_stats(stats)
    components: dict[str, dict[str, Any]] = {}
    for comp in sorted(plan.component_executors):
        if comp.startswith("__") and comp not in per_component:
            continue
        entry = {
            "executors": len(plan.component_executors[comp]),
            "tasks": len(plan.component_tasks.get(comp, ())),
            **per_component.get(comp, {"emitted": 0, "transferred": 0, "executed": 0, "acked": 0,
                                        "failed": 0, "latencyMs": 0.0, "latencyMsP99": 0.0}),
        }
        error = errors.get(comp)
        if error is not None:
            entry["lastError"] = error.error.strip().splitlines()[-1][:300] if error.error.strip() else ""
            entry["lastErrorTime"] = iso_time(error.time_secs)
        components[comp] = entry

    status = base.status
    all_ready = ready >= desired and len(slots) == len(executors)
    if deleting or status is TopologyStatus.KILLED:
        phase = PHASE_KILLING
    elif status is TopologyStatus.REBALANCING:
        phase = PHASE_UPGRADING if base.upgrade_topology is not None else PHASE_REBALANCING
    elif roll is not None:
        phase = PHASE_ROLLING
    elif not all_ready:
        phase = PHASE_PENDING
    elif status is TopologyStatus.INACTIVE:
        phase = PHASE_INACTIVE
    else:
        phase = PHASE_RUNNING

    cond("Active", status is TopologyStatus.ACTIVE,
         "SpoutsActive" if status is TopologyStatus.ACTIVE else f"Spouts{status.value.title()}",
         f"nimbus status {status.value}")
    cond("Ready", all_ready and status is not TopologyStatus.KILLED,
         "WorkersReady" if all_ready else "WorkersNotReady",
         f"{ready}/{desired} workers ready, {len(slots)}/{len(executors)} executors assigned")

    prev_rebalancing = next((c for c in prev_conditions if c.get("type") == "Rebalancing"), None)
    if status is TopologyStatus.REBALANCING:
        due = base.delayed_due_secs
        wait = f"; reassigning at {iso_time(due)}" if due is not None else ""
        cond("Rebalancing", True, "Waiting",
             f"spouts deactivated, in-flight tuples finishing ({_format_rebalance(base)}){wait}")
    elif prev_rebalancing is not None and prev_rebalancing.get("status") == "True":
        if all_ready:
            cond("Rebalancing", False, "Completed",
                 f"reassigned to {len(used)} workers; workers updated; activation restored to "
                 f"{status.value}")
        else:
            # keep True until the workers run the new assignment
            conditions.append({**prev_rebalancing, "reason": "Reassigned",
                               "message": f"new assignment written: {len(used)} slots; "
                                          f"{ready}/{desired} workers ready"})

    if deleting or status is TopologyStatus.KILLED:
        due = base.delayed_due_secs
        wait = f"; removing workers at {iso_time(due)}" if due is not None else "; removing"
        cond("Killing", True, "Waiting", f"spouts deactivated, in-flight tuples finishing{wait}")
    if roll is not None:
        cond("Rolling", True, roll.step, roll.message)
    elif rolled is not None:
        cond("Rolling", False, "Completed", rolled)
    health()

    images = {by_slot[slot].name: by_slot[slot].image for slot in used if slot in by_slot}
    # the topology's throughput: tuple trees its spouts saw acked and failed (system spouts, the
    # checkpoint spout, left out), as rates between two status writes
    spouts = [c for c in plan.spouts if not c.startswith(("$", "__"))]
    acked = sum(per_component.get(c, {}).get("acked", 0) for c in spouts)
    failed = sum(per_component.get(c, {}).get("failed", 0) for c in spouts)
    rates = throughput(previous, acked, failed, now)
    prev_health = previous.get("health")
    verdict = degraded.assess(
        prev_health if isinstance(prev_health, Mapping) else None,
        degraded.Figures(active=status is TopologyStatus.ACTIVE and not deleting, acked=acked, failed=failed,
                         pending=sum(s.pending for s in stats if s.component in spouts)),
        now, health_settings or degraded.Settings())
    cond(degraded.CONDITION, verdict.degraded, verdict.reason, verdict.message)
    messages = [m for m in (problem, *(f"{b.reason}: {b.message}" for b in blockers)) if m]
    if verdict.degraded and not blockers:
        messages.append(f"{degraded.CONDITION}: {verdict.message}")
    if blockers and phase not in (PHASE_KILLING,):
        state = blockers[0].reason
    elif verdict.degraded and phase == PHASE_RUNNING:
        state = STATE_DEGRADED
    else:
        state = phase
    return {
        "phase": phase,
        "state": state,
        "message": "; ".join(messages)[:1000],
        # worker pod -> the image it runs: two images here means a roll is under way
        "images": images,
        "observedGeneration": generation,
        "workers": f"{ready}/{desired}",
        "readyWorkers": ready,
        "desiredWorkers": desired,
        **scale,
        # the assigned slots that have a worker pod (ready or starting)
        "replicas": sum(1 for s in used if s in by_slot),
        **rates,
        # what the Degraded verdict keeps between two status writes (operator bookkeeping)
        **({"health": verdict.sample} if verdict.sample else {}),
        # the image(s) the workers run: two during a roll
        "image": ", ".join(sorted(set(images.values()))),
        "executors": len(executors),
        "tasks": sum(len(t) for t in plan.component_tasks.values()),
        "stormStatus": status.value,
        "launchTime": iso_time(base.launch_time_secs),
        "uptimeSecs": round(max(0.0, now - base.launch_time_secs), 1),
        "slots": {s.key(): by_slot[s].name if s in by_slot else "" for s in used},
        "components": components,
        "conditions": merge_conditions(prev_conditions, conditions),
    }
