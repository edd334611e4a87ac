"""The `Topology` resource, `apiVersion: squall.io/v1alpha1`.

One format for every way a topology runs: `squall run topology.yaml` reads it, `kubectl apply`
stores it, the operator reconciles it. Field names are camelCase on the wire (aliases) and
snake_case in Python. The checks here are the ones a CRD's OpenAPI schema can also express
(types, enums, bounds, patterns); checks that need the whole graph or an import live in
`squall.validation`.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION: Final = "squall.io/v1alpha1"
KIND: Final = "Topology"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# Storm-style stream names: the default stream, or anything a user declares.
STREAM_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$"
CLASS_PATH = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"


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
    fields: list[str] = Field(default_factory=list)
    direct: bool = False


class InputSpec(_Model):
    """A bolt's subscription to another component's stream."""

    component: str
    stream: str = Field("default", pattern=STREAM_NAME)
    grouping: Grouping = Field(Grouping.SHUFFLE, strict=False)
    fields: list[str] | None = None
    custom_class: str | None = Field(None, alias="customClass", pattern=CLASS_PATH)


class ComponentSpec(_Model):
    name: str = Field(pattern=DNS_LABEL, max_length=63)
    class_name: str = Field(alias="class", pattern=CLASS_PATH)
    parallelism: int = Field(1, ge=1)
    num_tasks: int | None = Field(None, alias="numTasks", ge=1)
    config: dict[str, Any] = Field(default_factory=dict)
    outputs: list[StreamSpec] | None = None

    @property
    def tasks(self) -> int:
        return self.num_tasks if self.num_tasks is not None else self.parallelism


class SpoutSpec(ComponentSpec):
    pass


class BoltSpec(ComponentSpec):
    inputs: list[InputSpec] = Field(default_factory=list)


class TopologySpec(_Model):
    spouts: list[SpoutSpec] = Field(min_length=1)
    bolts: list[BoltSpec] = Field(default_factory=list)
    num_workers: int = Field(1, alias="numWorkers", ge=1)
    num_ackers: int | None = Field(None, alias="numAckers", ge=0)
    message_timeout_secs: float = Field(30, alias="messageTimeoutSecs", gt=0)
    max_spout_pending: int | None = Field(None, alias="maxSpoutPending", ge=1)
    tick_tuple_freq_secs: float | None = Field(None, alias="tickTupleFreqSecs", gt=0)
    kill_wait_secs: float | None = Field(None, alias="killWaitSecs", ge=0)
    rebalance_wait_secs: float | None = Field(None, alias="rebalanceWaitSecs", ge=0)
    active: bool = True
    config: dict[str, Any] = Field(default_factory=dict)

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
