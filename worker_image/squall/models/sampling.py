"""The event inspector's payloads (`squall debug`, `squall events`; squall.sampling).

Pure data, stored by `squall.state` as versioned JSON like the cluster state's other payloads:

    <root>/sampling/<topo>          SamplingConfig   which components are sampled, until when
    <root>/samples/<topo>/<slot>    SampledTuples    the newest tuples a worker sampled
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from squall.models.cluster import PAYLOAD_VERSION

__all__ = ["SampleSetting", "SampledTuple", "SampledTuples", "SamplingConfig"]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = PAYLOAD_VERSION


class SampleSetting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    # the percentage of the component's emits sampled (above 0, at most 100)
    pct: float
    # when it lapses (Unix time); None: until turned off
    expires: float | None = None


class SamplingConfig(_Payload):
    """A topology's event inspector settings: component (`*`: every component) -> setting."""

    components: dict[str, SampleSetting] = Field(default_factory=dict)


class SampledTuple(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    time_secs: float
    component: str
    task: int
    stream: str
    # the spout's message id, as text (None: a bolt's emit, or an unanchored spout emit)
    msg_id: str | None = None
    # each value as text, cut at squall.sampling.VALUE_CHARS
    values: list[str] = Field(default_factory=list)


class SampledTuples(_Payload):
    """The newest tuples one worker sampled (at most squall.sampling.PUBLISHED), oldest first."""

    worker: str
    tuples: list[SampledTuple] = Field(default_factory=list)
