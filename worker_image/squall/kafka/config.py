"""The Kafka components' settings: storm-kafka-client's `KafkaSpoutConfig` names, in camelCase, as
one mapping in the component's config (`kafka.spout`, `kafka.bolt`), the way Squall's other
structured settings are given (`topology.state.provider.config`, a bolt's `window`).

    config:
      kafka.spout:
        bootstrapServers: 127.0.0.1:9092
        topics: [clicks]
        firstPollOffsetStrategy: UNCOMMITTED_EARLIEST
        retry: {initialDelayMs: 0, delayPeriodMs: 2, maxRetries: 10, maxDelayMs: 10000}
        deadLetterTopic: clicks-dlq

Pure: pydantic models, no client. A bad setting is one line naming the key (`KafkaConfigError`).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "BOLT_KEY",
    "CONSUMER_DEFAULTS",
    "SPOUT_KEY",
    "FirstPollOffsetStrategy",
    "KafkaBoltConfig",
    "KafkaConfigError",
    "KafkaSpoutConfig",
    "ProcessingGuarantee",
    "RetryConfig",
    "client_props",
    "parse_bolt_config",
    "parse_spout_config",
    "spout_consumer_props",
]

SPOUT_KEY = "kafka.spout"
BOLT_KEY = "kafka.bolt"


class KafkaConfigError(ValueError):
    """A Kafka component's settings cannot be used; the message names the key."""


class FirstPollOffsetStrategy(str, enum.Enum):
    """Where a partition is first read from (storm-kafka-client's FirstPollOffsetStrategy).

    EARLIEST / LATEST: the partition's start / end, unless this topology committed an offset for
    it (then from there); UNCOMMITTED_EARLIEST / UNCOMMITTED_LATEST: the group's committed offset,
    whoever committed it, else the start / end."""

    EARLIEST = "EARLIEST"
    LATEST = "LATEST"
    UNCOMMITTED_EARLIEST = "UNCOMMITTED_EARLIEST"
    UNCOMMITTED_LATEST = "UNCOMMITTED_LATEST"


class ProcessingGuarantee(str, enum.Enum):
    """storm-kafka-client's ProcessingGuarantee.

    AT_LEAST_ONCE: tuples carry a message id; offsets are committed up to the lowest one not yet
    acked, failed tuples are retried. AT_MOST_ONCE: the polled offsets are committed before the
    tuples are emitted, without a message id (no retries). NO_GUARANTEE: no message id; the read
    position is committed every `offsetCommitPeriodMs`, whether processed or not."""

    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    AT_MOST_ONCE = "AT_MOST_ONCE"
    NO_GUARANTEE = "NO_GUARANTEE"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class RetryConfig(_Model):
    """KafkaSpoutRetryExponentialBackoff: the n-th retry of a tuple waits `initialDelayMs` (n = 1)
    or `delayPeriodMs * 2^(n-1)`, at most `maxDelayMs`; after `maxRetries` retries the tuple goes
    to the dead-letter topic (or is dropped and counted). -1: retry forever (Storm's default)."""

    initialDelayMs: int = Field(default=0, ge=0)
    delayPeriodMs: int = Field(default=2, ge=0)
    maxRetries: int = Field(default=10, ge=-1)
    maxDelayMs: int = Field(default=10_000, ge=0)


# librdkafka property values: strings, numbers, booleans
_Prop = str | int | float | bool


class _Client(_Model):
    bootstrapServers: str = Field(min_length=1)
    # librdkafka properties passed through as they are (security.protocol, sasl.*, ssl.*, ...)
    props: dict[str, _Prop] = Field(default_factory=dict)
    # the SASL password from this environment variable (keeps it out of the topology file)
    saslPasswordEnv: str | None = None


class KafkaSpoutConfig(_Client):
    topics: list[str] | None = None
    topicPattern: str | None = None
    groupId: str | None = None  # default squall-<topology>-<component>
    firstPollOffsetStrategy: FirstPollOffsetStrategy = FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST
    processingGuarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE
    offsetCommitPeriodMs: int = Field(default=30_000, ge=1)
    # per partition: polling pauses while this many emitted offsets are not committed; failed
    # tuples wait for their retry in memory, so this also bounds the spout's memory
    maxUncommittedOffsets: int = Field(default=100_000, ge=1)
    partitionRefreshPeriodMs: int = Field(default=2_000, ge=100)
    pollBatchSize: int = Field(default=500, ge=1, le=100_000)
    # records one next_tuple call may emit from the polled batch (1: Storm's one per call); the
    # spout never takes its tuples in flight past topology.max.spout.pending with them
    emitBatch: int = Field(default=64, ge=1, le=100_000)
    # with emitBatch > 1: one call in this many records emits nothing, which ends the executor's
    # batch of next_tuple calls (its output goes out, acks come in) as 256 one-record calls did
    yieldEvery: int = Field(default=256, ge=0)
    metadataTimeoutMs: int = Field(default=10_000, ge=100)
    # the partitions' watermarks (their ends) fetched this often by the metadata thread, for the
    # spout's lag (squall.kafka.lag); 0: never, no lag figure
    lagRefreshPeriodMs: int = Field(default=5_000, ge=0)
    retry: RetryConfig = RetryConfig()
    deadLetterTopic: str | None = None
    keyDecoder: str = "utf-8"
    valueDecoder: str = "utf-8"
    translator: str | None = None
    emitNullTuples: bool = False
    tupleTrackingEnforced: bool = False

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSpoutConfig:
        if (self.topics is None) == (self.topicPattern is None):
            raise ValueError("give exactly one of 'topics' (a list) and 'topicPattern' (a regex)")
        if self.topics is not None and not self.topics:
            raise ValueError("'topics' is empty")
        if self.topicPattern is not None:
            try:
                re.compile(self.topicPattern)
            except re.error as exc:
                raise ValueError(f"'topicPattern' is not a regular expression: {exc}") from None
        return self

    @field_validator("lagRefreshPeriodMs")
    @classmethod
    def _lag_period(cls, value: int) -> int:
        if 0 < value < 100:
            raise ValueError(f"{value} is below 100 ms: give 0 (no lag figure) or at least 100")
        return value

    def matches(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        assert self.topicPattern is not None
        return not topic.startswith("__") and re.fullmatch(self.topicPattern, topic) is not None


class KafkaBoltConfig(_Client):
    topic: str | None = None  # a fixed topic, or:
    topicField: str | None = None  # the topic from this input field
    keyField: str | None = "key"  # None: records without a key
    valueField: str = "value"
    mapper: str | None = None  # module:function, tuple -> (key, value) or (topic, key, value)
    keyEncoder: str = "utf-8"
    valueEncoder: str = "utf-8"
    flushTimeoutMs: int = Field(default=30_000, ge=0)

    @model_validator(mode="after")
    def _one_topic(self) -> KafkaBoltConfig:
        if self.mapper is None and (self.topic is None) == (self.topicField is None):
            raise ValueError("give exactly one of 'topic' (fixed) and 'topicField' (from a field), or a 'mapper'")
        return self


def _parse(model: type[_Model], key: str, conf: Mapping[str, Any]) -> Any:
    raw = conf.get(key)
    if not isinstance(raw, Mapping):
        raise KafkaConfigError(f"{key}: missing; the component's config needs a mapping '{key}' "
                               f"with at least bootstrapServers (see docs/connectors.md)")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"{key}.{where}: {msg}" if where else f"{key}: {msg}")
        raise KafkaConfigError("; ".join(parts)) from None


def parse_spout_config(conf: Mapping[str, Any]) -> KafkaSpoutConfig:
    cfg: KafkaSpoutConfig = _parse(KafkaSpoutConfig, SPOUT_KEY, conf)
    return cfg


def parse_bolt_config(conf: Mapping[str, Any]) -> KafkaBoltConfig:
    cfg: KafkaBoltConfig = _parse(KafkaBoltConfig, BOLT_KEY, conf)
    return cfg


def client_props(cfg: _Client, key: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The librdkafka properties: `props`, the bootstrap servers, the SASL password from env."""
    props: dict[str, Any] = dict(cfg.props)
    props["bootstrap.servers"] = cfg.bootstrapServers
    if cfg.saslPasswordEnv:
        env = os.environ if env is None else env
        password = env.get(cfg.saslPasswordEnv)
        if password is None:
            raise KafkaConfigError(
                f"{key}.saslPasswordEnv: environment variable {cfg.saslPasswordEnv!r} is not set")
        props["sasl.password"] = password
    return props


# librdkafka consumer properties the spout sets unless `props` names them.
# fetch.queue.backoff.ms: librdkafka stops fetching a partition while the consumer's queue (all
# its partitions' records: the partition queues are forwarded to it) holds queued.min.messages
# (100,000), and then waits this long before it looks again. At its default, 1000 ms, a spout
# that reads 100,000 records in less than a second empties the queue and waits on the broker
# for the rest of the second: measured 2026-11-28 (bench/kafka_where.py), half of the spout's
# polls came back empty and its worker's loop idled half the time, a task read about 100k-170k
# records/s on half a core. At 100 ms the queue stays fed up to 1M records/s a consumer, and
# the check costs nothing measurable (librdkafka's broker thread 0.02 CPU-s/s either way; at
# 0 it spins: 0.44).
CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 100}


def spout_consumer_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """The spout's consumer properties: `CONSUMER_DEFAULTS` under the user's `props`."""
    return {**CONSUMER_DEFAULTS, **props}
