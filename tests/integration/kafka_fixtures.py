"""Fixtures of the Kafka tests: one real Apache Kafka broker (KRaft, squall.kafka.broker) for the
whole test session, shared by every Kafka test module (conftest.py imports `kafka_broker`), with a
SASL/PLAIN listener beside the plain one; and helpers to make topics and read them back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall.models.v1alpha1 import Topology
from squall.zkserver import java_available
from helpers import topology

SASL_USER = "squall"
SASL_PASSWORD = "squall-secret"


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedKafka]:
    """A started EmbeddedKafka for the session (jars from scripts/setup); stopped at the end."""
    if not java_available():
        pytest.skip("no java on PATH (the Kafka broker needs a Java runtime)")
    broker = EmbeddedKafka(sasl_users={SASL_USER: SASL_PASSWORD})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def new_topic(broker: EmbeddedKafka, partitions: int = 1, prefix: str = "t",
              config: dict[str, str] | None = None) -> str:
    """A topic no other test uses, created with `partitions` partitions."""
    from squall.kafka.admin import create_topics

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    create_topics(broker.bootstrap_servers, {name: partitions}, topic_config=config)
    return name


def produce(broker: EmbeddedKafka, topic: str, values: list[bytes], *, keys: list[bytes] | None = None,
            partition: int | None = None, max_bytes: int | None = None) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True,
                  "linger.ms": 5, **({"message.max.bytes": max_bytes} if max_bytes else {})})
    for i, v in enumerate(values):
        kwargs: dict[str, Any] = {"value": v}
        if keys is not None:
            kwargs["key"] = keys[i]
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(30) == 0, "records not delivered"


def consume_all(broker: EmbeddedKafka, topic: str, expected: int, timeout: float = 60,
                isolation: str = "read_uncommitted") -> list[Any]:
    """Every record of `topic` from the start, waiting until at least `expected` have come."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"check-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, -2) for p in md.partitions])  # -2: the beginning
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(500, 0.2)
            got = [m for m in msgs if m.error() is None]
            out.extend(got)
            if got:
                idle_since = time.monotonic()
            elif len(out) >= expected and time.monotonic() - idle_since > 1.0:
                break
        return out
    finally:
        c.close()


def committed(broker: EmbeddedKafka, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition (only partitions with a commit)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                  "enable.auto.commit": False})
    from confluent_kafka import KafkaException

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                md = c.list_topics(topic, timeout=10).topics[topic]
                got = c.committed([TopicPartition(topic, p) for p in md.partitions], timeout=10)
                failed = [tp for tp in got if tp.error is not None]
                if failed:  # not read (its offset then reads as "no commit"): asked again
                    raise KafkaException(failed[0].error)
                return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
            except KafkaException:  # a just restarted broker: its coordinator still loading
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def _ends(c: Any, topic: str, timeout: float) -> dict[int, int]:
    """Each partition's end offset; retried while a broker just (re)started has no leader yet."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    while True:
        try:
            md = c.list_topics(topic, timeout=10).topics[topic]
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions}
        except KafkaException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def read_to_end(broker: EmbeddedKafka, topic: str, timeout: float = 30) -> list[Any]:
    """Every record of `topic` up to its end as of now (the high watermarks read first)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"check-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        ends = _ends(c, topic, timeout)
        todo = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, -2) for p in todo])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    out.append(m)
                    if m.offset() + 1 >= ends[m.partition()]:
                        todo.discard(m.partition())
        assert not todo, f"could not read {topic} to its end in {timeout}s"
        return out
    finally:
        c.close()


COMPONENTS = "kafka_components"


def pipeline(name: str, broker: EmbeddedKafka, source: str, sink: str, *, spout: dict[str, Any] | None = None,
             workers: int = 2, spout_tasks: int = 2, extra: dict[str, Any] | None = None,
             timeout: int = 10) -> Topology:
    """source topic -> KafkaSpout (x spout_tasks) -> Tag (x2) -> KafkaBolt (x2) -> sink topic."""
    spout_cfg = {"bootstrapServers": broker.bootstrap_servers, "topics": [source], "groupId": f"g-{name}",
                 "offsetCommitPeriodMs": 300, "firstPollOffsetStrategy": "EARLIEST", **(spout or {})}
    spec = {
        "numWorkers": workers,
        "messageTimeoutSecs": timeout,
        "maxSpoutPending": 200,
        "spouts": [{"name": "kafka", "class": "squall.kafka:KafkaSpout", "parallelism": spout_tasks,
                    "config": {"kafka.spout": spout_cfg},
                    "outputs": [{"stream": "default", "fields": ["partition", "offset", "value", "timestamp"]}]}],
        "bolts": [
            {"name": "tag", "class": f"{COMPONENTS}:Tag", "parallelism": 2,
             "inputs": [{"component": "kafka", "grouping": "shuffle"}]},
            {"name": "out", "class": "squall.kafka:KafkaBolt", "parallelism": 2,
             "config": {"kafka.bolt": {"bootstrapServers": broker.bootstrap_servers, "topic": sink},
                        "topology.tick.tuple.freq.secs": 0.2},
             "inputs": [{"component": "tag", "grouping": "shuffle"}]},
        ],
    }
    return topology(name, spec, extra or {})


class SpoutContext:
    """What a KafkaSpout opened by hand (no workers) needs of its TopologyContext: one task (4)."""

    task_id = 4
    component_id = "kafka"
    worker_port = 0

    def __init__(self, topology_id: str, fields: list[str]) -> None:
        self.topology_id = topology_id
        self.fields = fields

    def component_tasks(self, component: str) -> list[int]:
        return [4]

    def task_component(self, task: int) -> str:
        return "kafka"

    def this_component_tasks(self) -> list[int]:
        return [4]

    def output_fields(self, stream: str = "default") -> list[str]:
        return self.fields


class SpoutCollector:
    """Keeps what a hand-opened spout emits: its values and message ids (the caller acks them)."""

    def __init__(self) -> None:
        self.ids: list[Any] = []
        self.values: list[list[Any]] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> list[int]:
        self.values.append(list(values))
        self.ids.append(msg_id)
        return [1]

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> None:
        self.emit(values, stream, msg_id)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)
