"""The `Topology` resource, `apiVersion: squall.io/v1alpha1`.

One format for every way a topology runs: `squall run topology.yaml` reads it, `kubectl apply`
stores it, the operator reconciles it. Field names are camelCase on the wire (aliases) and
snake_case in Python. The checks here are the ones a CRD's OpenAPI schema can also express
(types, enums, bounds, patterns); checks that need the whole graph or an import live in
`squall.validation`.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    PlainValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from squall import limits

API_VERSION: Final = "squall.io/v1alpha1"
KIND: Final = "Topology"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# Storm-style stream names: the default stream, or anything a user declares.
STREAM_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$"
CLASS_PATH = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"
# Kubernetes' own patterns (apimachinery): a resource quantity, a DNS subdomain, an env var name
QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
            r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
IMAGE = r"^[^\s]+$"
# names the operator gives the worker container itself: a topology may not redefine them
RESERVED_ENV: Final = frozenset({"POD_IP", "POD_NAME", "NODE_NAME", "PYTHONUNBUFFERED"})
RESERVED_VOLUME: Final = "tmp"


class _Model(BaseModel):
    # strict: a value of the wrong JSON type (`parallelism: "2"`, `active: "true"`) is refused, as
    # the CRD's schema (and so `kubectl apply`) refuses it; ints are still numbers. Enum fields
    # opt out (their strings are converted to the enum), see `Grouping` below.
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, strict=True)


class Grouping(str, enum.Enum):
    SHUFFLE = "shuffle"
    LOCAL_OR_SHUFFLE = "localOrShuffle"
    FIELDS = "fields"
    PARTIAL_KEY = "partialKey"
    ALL = "all"
    GLOBAL = "global"
    NONE = "none"
    DIRECT = "direct"
    CUSTOM = "custom"


class StreamSpec(_Model):
    """An output stream a component declares."""

    stream: str = Field("default", pattern=STREAM_NAME)
    fields: list[str] = Field(default_factory=list, max_length=limits.MAX_FIELDS_PER_STREAM)
    direct: bool = False


class InputSpec(_Model):
    """A bolt's subscription to another component's stream."""

    component: str
    stream: str = Field("default", pattern=STREAM_NAME)
    grouping: Grouping = Field(Grouping.SHUFFLE, strict=False)
    fields: list[str] | None = Field(None, max_length=limits.MAX_FIELDS_PER_STREAM)
    custom_class: str | None = Field(None, alias="customClass", pattern=CLASS_PATH)


# --- components in other languages (squall.multilang; docs/topology.md) --------------------------

# where a shell component's class and its block go (the model fills them in)
SHELL_BOLT: Final = "squall.multilang:ShellBolt"
SHELL_SPOUT: Final = "squall.multilang:ShellSpout"
SHELL_CONFIG: Final = "squall.multilang.shell"
# a relative path (no leading '/'; '..' is refused by `_inside`): a file of the code directory
RELATIVE_PATH = r"^[^/]"


def _inside(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} leaves the code directory ('..'); name a file inside it")
    return value


class ShellSpec(_Model):
    """A component in another language, run with Storm's multilang protocol: the command (run
    in a directory holding `files` and Storm's adapters storm.js, storm.py, storm.rb) and the
    files it needs, looked up where component modules are (the worker's sys.path)."""

    command: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1, max_length=256)
    files: list[Annotated[str, Field(pattern=RELATIVE_PATH, max_length=1024), AfterValidator(_inside)]] = Field(
        default_factory=list, max_length=256)


def _shell_to_class(data: Any, shell_class: str) -> Any:
    """A component with a `shell` block and no `class` runs `shell_class`, which finds the
    block in its config (`squall.multilang.shell`): the worker needs nothing of its own."""
    if isinstance(data, dict) and isinstance(data.get("shell"), dict):
        data = dict(data)
        if "class" not in data and "class_name" not in data:
            data["class"] = shell_class
        config = data.get("config", {})
        try:
            shell = ShellSpec.model_validate(data["shell"]).model_dump()
        except ValueError:
            return data  # the `shell` field reports it, with its path
        if isinstance(config, dict):
            data["config"] = {**config, SHELL_CONFIG: shell}
    return data


def _class_not_required(schema: dict[str, Any]) -> None:
    # a shell component has no class (the model fills it in): the CRD requires one of the two
    schema["required"] = [r for r in schema.get("required", []) if r != "class"]
    schema["x-kubernetes-validations"] = [{
        "rule": "has(self.class) || has(self.shell)",
        "message": "a component needs class (a Python class, module:Class) or shell (a command in "
                   "another language)",
    }]


class ComponentSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_class_not_required)

    name: str = Field(pattern=DNS_LABEL, max_length=63)
    class_name: str = Field(alias="class", pattern=CLASS_PATH)
    # Storm's ShellBolt / ShellSpout: a command in another language (squall.multilang)
    shell: ShellSpec | None = None
    # limits: squall.limits (docs/topology.md, "Limits")
    parallelism: int = Field(1, ge=1, le=limits.MAX_EXECUTORS)
    num_tasks: int | None = Field(None, alias="numTasks", ge=1, le=limits.MAX_TASKS_PER_COMPONENT)
    config: dict[str, Any] = Field(default_factory=dict)
    outputs: list[StreamSpec] | None = Field(None, max_length=limits.MAX_STREAMS_PER_COMPONENT)
    # a StatefulBolt / StatefulSpout: the plan adds the checkpoint spout and its stream
    stateful: bool = False

    @property
    def tasks(self) -> int:
        return self.num_tasks if self.num_tasks is not None else self.parallelism


class SpoutSpec(ComponentSpec):
    @model_validator(mode="before")
    @classmethod
    def _shell(cls, data: Any) -> Any:
        return _shell_to_class(data, SHELL_SPOUT)


# --- windowed bolts (squall.windowing) ---------------------------------------------------------

# a duration: a number and a unit, "500ms", "30s", "1.5m", "2h"
DURATION = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"
_DURATION_RE = re.compile(DURATION)


def _window_size(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, int) and value < 1):
        raise ValueError(f"{value!r}: a count of tuples (an integer, at least 1) or a duration (30s)")
    if isinstance(value, str) and not _DURATION_RE.match(value):
        raise ValueError(f"{value!r} is not a duration (a number and ms, s, m or h: 500ms, 30s, 2m); "
                         "a count of tuples is an integer")
    return value


# int-or-string: an integer counts tuples, a string is a duration (one validator: one error)
WindowSize = Annotated[
    int | str,
    PlainValidator(_window_size),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": DURATION}),
]


class WindowSpec(_Model):
    """A windowed bolt's windows: Storm's `topology.bolts.window.*` settings."""

    window_length: WindowSize = Field(alias="windowLength")
    # unset: tumbling (the window's length)
    sliding_interval: WindowSize | None = Field(None, alias="slidingInterval")
    # event time from this input field (seconds, a number); unset: processing time
    timestamp_field: str | None = Field(None, alias="timestampField", min_length=1)
    lag: str | None = Field(None, pattern=DURATION)
    watermark_interval: str | None = Field(None, alias="watermarkInterval", pattern=DURATION)
    late_stream: str | None = Field(None, alias="lateStream", pattern=STREAM_NAME)


class BoltSpec(ComponentSpec):
    inputs: list[InputSpec] = Field(default_factory=list)
    # a WindowedBolt's windows (squall.windowing)
    window: WindowSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _shell(cls, data: Any) -> Any:
        return _shell_to_class(data, SHELL_BOLT)


# --- per-topology worker pod settings (what the operator puts in each worker pod) -------------

_QUANTITY_RE = re.compile(QUANTITY)


def _quantity(value: str | int) -> str | int:
    if isinstance(value, bool) or (isinstance(value, int) and value < 0):
        raise ValueError(f"{value!r} is not a resource quantity")
    if isinstance(value, str) and not _QUANTITY_RE.match(value):
        raise ValueError(f"{value!r} is not a resource quantity (like 500m, 2, 1Gi)")
    return value


# int-or-string, as Kubernetes' own Quantity fields are declared in a CRD
Quantity = Annotated[
    str | int,
    AfterValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY}),
]


class ResourceRequirements(_Model):
    """The worker container's `resources` (replaces the chart's `worker.resources`)."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class PullPolicy(str, enum.Enum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class LocalObjectReference(_Model):
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)


class EnvVar(_Model):
    """An environment variable; `valueFrom` is Kubernetes' EnvVarSource, checked by the API
    server when the pod is created."""

    name: str = Field(pattern=ENV_NAME)
    value: str | None = None
    value_from: dict[str, Any] | None = Field(None, alias="valueFrom")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_ENV:
            raise ValueError(f"{value} is set by the operator; choose another name")
        return value


class SourceReference(_Model):
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    optional: bool | None = None


class EnvFromSource(_Model):
    prefix: str | None = None
    config_map_ref: SourceReference | None = Field(None, alias="configMapRef")
    secret_ref: SourceReference | None = Field(None, alias="secretRef")


class TolerationOperator(str, enum.Enum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(str, enum.Enum):
    ANY = ""
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(_Model):
    key: str | None = None
    operator: TolerationOperator | None = Field(None, strict=False)
    value: str | None = None
    effect: TaintEffect | None = Field(None, strict=False)
    # Kubernetes' int64
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds", ge=-(1 << 63), le=(1 << 63) - 1)


class SelectorOperator(str, enum.Enum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(_Model):
    key: str = Field(min_length=1)
    operator: SelectorOperator = Field(strict=False)
    values: list[str] | None = None


class NodeSelectorTerm(_Model):
    match_expressions: list[NodeSelectorRequirement] | None = Field(None, alias="matchExpressions")
    match_fields: list[NodeSelectorRequirement] | None = Field(None, alias="matchFields")


class NodeSelector(_Model):
    node_selector_terms: list[NodeSelectorTerm] = Field(alias="nodeSelectorTerms", min_length=1)


class PreferredSchedulingTerm(_Model):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(_Model):
    required: NodeSelector | None = Field(None, alias="requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[PreferredSchedulingTerm] | None = Field(
        None, alias="preferredDuringSchedulingIgnoredDuringExecution")


class LabelSelectorOperator(str, enum.Enum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(_Model):
    key: str = Field(min_length=1)
    operator: LabelSelectorOperator = Field(strict=False)
    values: list[str] | None = None


class LabelSelector(_Model):
    match_labels: dict[str, str] | None = Field(None, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] | None = Field(None, alias="matchExpressions")


# fields of Kubernetes' PodAffinityTerm that nimbus cannot honour: it sees the topologies' own
# workers, not the namespaces' labels or other pods' label values
UNSUPPORTED_POD_AFFINITY_FIELDS: Final = ("namespaceSelector", "matchLabelKeys", "mismatchLabelKeys")


class PodAffinityTerm(_Model):
    """Kubernetes' PodAffinityTerm, without namespaceSelector, matchLabelKeys and
    mismatchLabelKeys (refused with a message saying so)."""

    label_selector: LabelSelector | None = Field(None, alias="labelSelector")
    namespaces: list[str] | None = None
    topology_key: str = Field(alias="topologyKey", min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _unsupported(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in UNSUPPORTED_POD_AFFINITY_FIELDS:
                if name in data:
                    raise ValueError(
                        f"{name} is not supported: Squall's nimbus places worker pods itself and "
                        "matches pod (anti-)affinity against the topologies' workers by labelSelector "
                        "and namespaces only")
        return data


class WeightedPodAffinityTerm(_Model):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm = Field(alias="podAffinityTerm")


class PodAffinity(_Model):
    """Kubernetes' PodAffinity or PodAntiAffinity (the same fields)."""

    required: list[PodAffinityTerm] | None = Field(None, alias="requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[WeightedPodAffinityTerm] | None = Field(
        None, alias="preferredDuringSchedulingIgnoredDuringExecution")


class Affinity(_Model):
    """Kubernetes' Affinity. Worker pods are pinned to their slot's node, so nimbus honours it
    when it places workers: the required node affinity limits the slots it offers the topology,
    required pod (anti-)affinity the slots it picks (against the Squall workers already placed),
    and the preferred terms rank the nodes."""

    node_affinity: NodeAffinity | None = Field(None, alias="nodeAffinity")
    pod_affinity: PodAffinity | None = Field(None, alias="podAffinity")
    pod_anti_affinity: PodAffinity | None = Field(None, alias="podAntiAffinity")


class Volume(BaseModel):
    """A pod volume: `name` plus one volume source (configMap, secret, persistentVolumeClaim,
    emptyDir, ...), passed to the pods as given and checked by the API server."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)

    name: str = Field(pattern=DNS_LABEL, max_length=63)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value == RESERVED_VOLUME:
            raise ValueError(f"volume {value!r} is the operator's own (/tmp); choose another name")
        return value


class VolumeMount(_Model):
    name: str = Field(pattern=DNS_LABEL, max_length=63)
    mount_path: str = Field(alias="mountPath", pattern=r"^/")
    read_only: bool | None = Field(None, alias="readOnly")
    sub_path: str | None = Field(None, alias="subPath")


class WorkerSpec(_Model):
    """Per-topology settings of the worker pods, laid over the chart's `worker.*` defaults.

    The operator's own parts of the pod (the slot's node and port, the worker's arguments, the
    probe, the security context, the /tmp volume) cannot be changed here. `squall run` ignores
    all of it: local workers are processes of this machine."""

    image: str | None = Field(None, pattern=IMAGE, max_length=512)
    image_pull_policy: PullPolicy | None = Field(None, alias="imagePullPolicy", strict=False)
    image_pull_secrets: list[LocalObjectReference] | None = Field(None, alias="imagePullSecrets")
    resources: ResourceRequirements | None = None
    env: list[EnvVar] | None = None
    env_from: list[EnvFromSource] | None = Field(None, alias="envFrom")
    node_selector: dict[str, str] | None = Field(None, alias="nodeSelector")
    tolerations: list[Toleration] | None = None
    affinity: Affinity | None = None
    service_account_name: str | None = Field(None, alias="serviceAccountName", pattern=DNS_SUBDOMAIN,
                                             max_length=253)
    volumes: list[Volume] | None = None
    volume_mounts: list[VolumeMount] | None = Field(None, alias="volumeMounts")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> WorkerSpec:
        declared = {v.name for v in self.volumes or ()}
        for i, mount in enumerate(self.volume_mounts or ()):
            if mount.name not in declared:
                raise ValueError(f"volumeMounts[{i}] names volume {mount.name!r}, which volumes "
                                 "does not declare")
            if mount.mount_path.rstrip("/") == "/tmp":
                raise ValueError(f"volumeMounts[{i}]: /tmp is the operator's own volume")
        return self


class HealthSpec(_Model):
    """When the operator calls a running topology Degraded (its `Degraded` condition, with an
    Event when it turns on and one when it clears). Kubernetes only: `squall run` ignores it, and
    a change applies to the running topology at once."""

    # active spouts with tuples pending and nothing acked for this long
    stalled_secs: float = Field(60.0, alias="stalledSecs", gt=0, le=limits.MAX_SECONDS, allow_inf_nan=False)
    # the share of the tuple trees failed (or timed out) in a window that makes it Degraded
    failed_fraction: float = Field(0.5, alias="failedFraction", gt=0, le=1, allow_inf_nan=False)
    # the window the failed fraction is taken over
    window_secs: float = Field(60.0, alias="windowSecs", gt=0, le=limits.MAX_SECONDS, allow_inf_nan=False)


class UpgradeMode(str, enum.Enum):
    # each outdated worker pod replaced slot by slot through the worker hand-over, spouts active
    HANDOVER = "handover"
    # spouts deactivated and in-flight tuples finished first (nothing pending, at most
    # rebalanceWaitSecs), then the pods replaced, then the spouts activated again
    DRAIN = "drain"


class CanarySpec(_Model):
    """A canary for the hand-over roll (squall_operator.canary): the first `slots` worker slots
    run the new pod settings for `analysisSecs` while the operator compares their executors with
    the old pods'; a regression rolls every slot back to the last good settings."""

    slots: int = Field(1, ge=1, le=limits.MAX_WORKERS)
    analysis_secs: float = Field(60.0, alias="analysisSecs", gt=0, le=limits.MAX_SECONDS, allow_inf_nan=False)
    # a component's failed fraction on the canary may pass the old pods' by this much at most
    max_failed_fraction: float = Field(0.05, alias="maxFailedFraction", ge=0, le=1, allow_inf_nan=False)
    # a component's p99 latency on the canary may be this many times the old pods' at most
    max_p99_ratio: float = Field(2.0, alias="maxP99Ratio", ge=1, le=1000, allow_inf_nan=False)
    # container restarts of the canary's pods allowed
    max_restarts: int = Field(0, alias="maxRestarts", ge=0, le=1000)


class UpgradeSpec(_Model):
    """How the operator rolls the worker pods onto new pod settings (another image, env,
    resources). Kubernetes only: `squall run` ignores it; a change applies to the next roll."""

    mode: UpgradeMode = Field(UpgradeMode.HANDOVER, strict=False)
    # watch the first slots on the new settings before the others, roll back on a regression
    canary: CanarySpec | None = None

    @model_validator(mode="after")
    def _canary_needs_handover(self) -> UpgradeSpec:
        if self.canary is not None and self.mode is not UpgradeMode.HANDOVER:
            raise ValueError("canary needs mode handover: the drain roll stops the spouts, so a canary "
                             "would have no tuples to be judged on")
        return self


class AutoscaleSignal(str, enum.Enum):
    # the busiest bolt executor's share of time spent in execute (Storm's capacity), from the
    # executed counts and execute latencies of the workers' heartbeats
    BUSY = "busy"
    # the most held-up bolt executor's share of time with its inbox full (backpressure announced
    # upstream), from the seconds of backpressure in the heartbeats
    BACKPRESSURE = "backpressure"
    # the spout with the most lag: records in its Kafka partitions not yet processed for good
    # (end offsets less the committed ones, Storm's totalSpoutLag), from the heartbeats
    LAG = "lag"


class AutoscaleSpec(_Model):
    """The operator's own scaling policy (squall_operator.autoscale): numWorkers within
    [minWorkers, maxWorkers] and the busiest bolts' parallelism follow the signal. Kubernetes
    only: `squall run` ignores it; a change applies at the next status write."""

    min_workers: int = Field(1, alias="minWorkers", ge=1, le=limits.MAX_WORKERS)
    max_workers: int = Field(alias="maxWorkers", ge=1, le=limits.MAX_WORKERS)
    signal: AutoscaleSignal = Field(AutoscaleSignal.BUSY, strict=False)
    # scale out above it; busy and backpressure: a fraction of the time, at most 1 (None: 0.7,
    # filled in by squall_operator.autoscale.Settings, not by the schema, whose default would
    # hold for every signal); lag: records, to be given
    target: float | None = Field(None, gt=0, allow_inf_nan=False)
    # the signal above target this long -> scale out
    scale_out_after_secs: float = Field(30.0, alias="scaleOutAfterSecs", ge=0, le=limits.MAX_SECONDS,
                                        allow_inf_nan=False)
    # the signal below target x scaleInBelow this long (and under target once scaled in) -> scale in
    scale_in_after_secs: float = Field(120.0, alias="scaleInAfterSecs", ge=0, le=limits.MAX_SECONDS,
                                       allow_inf_nan=False)
    scale_in_below: float = Field(0.5, alias="scaleInBelow", gt=0, lt=1, allow_inf_nan=False)
    # no decision this long after the last one
    cooldown_secs: float = Field(60.0, alias="cooldownSecs", ge=0, le=limits.MAX_SECONDS, allow_inf_nan=False)
    # workers added or removed per decision
    step: int = Field(1, ge=1, le=limits.MAX_WORKERS)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscaleSpec:
        if self.min_workers > self.max_workers:
            raise ValueError(f"minWorkers ({self.min_workers}) is above maxWorkers ({self.max_workers})")
        if self.signal is AutoscaleSignal.LAG:
            if self.target is None:
                raise ValueError("signal lag needs a target: the records of lag to scale out above")
        elif self.target is not None and self.target > 1:
            raise ValueError(f"target {self.target:g} is above 1: the {self.signal.value} signal is a "
                             f"fraction of the time (lag counts records)")
        return self


class TopologySpec(_Model):
    # limits: squall.limits (docs/topology.md, "Limits"); the totals over the topology (all
    # components, executors, tasks) are `validation.limit_problems`'. Durations are finite: the
    # topology is stored as JSON, which has no infinity (it would come back as null).
    spouts: list[SpoutSpec] = Field(min_length=1, max_length=limits.MAX_COMPONENTS)
    bolts: list[BoltSpec] = Field(default_factory=list, max_length=limits.MAX_COMPONENTS)
    num_workers: int = Field(1, alias="numWorkers", ge=1, le=limits.MAX_WORKERS)
    num_ackers: int | None = Field(None, alias="numAckers", ge=0, le=limits.MAX_EXECUTORS)
    message_timeout_secs: float = Field(30, alias="messageTimeoutSecs", gt=0, le=limits.MAX_SECONDS,
                                        allow_inf_nan=False)
    max_spout_pending: int | None = Field(None, alias="maxSpoutPending", ge=1, le=limits.MAX_SPOUT_PENDING)
    tick_tuple_freq_secs: float | None = Field(None, alias="tickTupleFreqSecs", gt=0, le=limits.MAX_SECONDS,
                                               allow_inf_nan=False)
    kill_wait_secs: float | None = Field(None, alias="killWaitSecs", ge=0, le=limits.MAX_SECONDS,
                                         allow_inf_nan=False)
    rebalance_wait_secs: float | None = Field(None, alias="rebalanceWaitSecs", ge=0, le=limits.MAX_SECONDS,
                                              allow_inf_nan=False)
    active: bool = True
    config: dict[str, Any] = Field(default_factory=dict)
    # the worker pods' image and pod settings (Kubernetes only; `squall run` ignores them)
    worker: WorkerSpec | None = None
    # when the operator calls the running topology Degraded (Kubernetes only)
    health: HealthSpec | None = None
    # how image and pod-settings changes roll the worker pods (Kubernetes only)
    upgrade: UpgradeSpec | None = None
    # the operator scales numWorkers and the busiest bolts' parallelism itself (Kubernetes only)
    autoscale: AutoscaleSpec | None = None

    @property
    def components(self) -> list[ComponentSpec]:
        return [*self.spouts, *self.bolts]

    @property
    def ackers(self) -> int:
        """Acker executors: `numAckers`, or Storm's default of one per worker."""
        return self.num_ackers if self.num_ackers is not None else self.num_workers

    @property
    def kill_wait(self) -> float:
        return self.kill_wait_secs if self.kill_wait_secs is not None else self.message_timeout_secs

    @property
    def rebalance_wait(self) -> float:
        if self.rebalance_wait_secs is not None:
            return self.rebalance_wait_secs
        return self.message_timeout_secs


class ObjectMeta(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True, strict=True)

    name: str = Field(pattern=DNS_LABEL, max_length=63)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Topology(_Model):
    api_version: Literal["squall.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["Topology"] = KIND
    metadata: ObjectMeta
    spec: TopologySpec
    # Written by the operator; ignored by `squall run`.
    status: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.metadata.name
