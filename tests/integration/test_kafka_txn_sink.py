"""TransactionalKafkaBolt on the session's real broker, driven through the checkpoint protocol's
calls by hand (no workers): a restarted task fences its zombie and writes the interval the state
committed but Kafka did not, exactly once; a later start writes nothing again; the size bound
fails inputs and then the checkpoint, never drops silently."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from squall.kafka.admin import KafkaUnavailable
from squall.kafka.broker import EmbeddedKafka
from squall.kafka.txnbolt import IntervalTooLarge, TransactionalKafkaBolt
from squall.statebackend import MemoryProvider
from squall.tuples import Tuple
from kafka_fixtures import consume_all, new_topic

pytestmark = pytest.mark.integration


@dataclasses.dataclass
class Context:
    topology_id: str
    task_id: int = 3
    component_id: str = "out"
    worker_port: int = 0


class Collector:
    def __init__(self) -> None:
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []

    def ack(self, tup: Tuple) -> None:
        self.acked.append(tup)

    def fail(self, tup: Tuple) -> None:
        self.failed.append(tup)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def emit(self, *args: Any, **kwargs: Any) -> list[int]:
        return []


def tup(value: str) -> Tuple:
    return Tuple([value, value], 1, "tag", "default", {"key": 0, "value": 1}, None)


def started(broker: EmbeddedKafka, topology: str, sink: str, state: Any, **extra: Any) -> tuple[TransactionalKafkaBolt, Collector]:
    bolt = TransactionalKafkaBolt()
    out = Collector()
    conf = {"topology.name": topology,
            "kafka.bolt": {"bootstrapServers": broker.bootstrap_servers, "topic": sink,
                           "markerTopic": f"{sink}-markers", "commitTimeoutMs": 5000, **extra}}
    bolt.prepare(conf, Context(topology), out)  # type: ignore[arg-type]
    bolt.init_state(state)
    return bolt, out


def values(broker: EmbeddedKafka, sink: str, expected: int) -> list[str]:
    return sorted((m.value() or b"").decode() for m in
                  consume_all(broker, sink, expected, timeout=20, isolation="read_committed"))


def test_a_restarted_task_fences_its_zombie_and_writes_the_committed_interval_once(
        kafka_broker: EmbeddedKafka) -> None:
    sink = new_topic(kafka_broker, 1, prefix="out")
    topology = f"txn-{uuid.uuid4().hex[:6]}"
    provider = MemoryProvider()
    state = provider.state("out-3")
    zombie, out = started(kafka_broker, topology, sink, state)
    zombie.pre_prepare(1)  # the interval before: written and committed the normal way
    for v in ("a", "b"):
        zombie.execute(tup(v))
    zombie.pre_prepare(1)
    state.prepare_commit(1)
    zombie.pre_commit(1)
    state.commit(1)
    for v in ("c", "d", "e"):
        zombie.execute(tup(v))
    assert len(out.acked) == 5 and not out.failed
    zombie.pre_prepare(2)
    state.prepare_commit(2)
    state.commit(2)  # the checkpoint rolled forward while the task was "dead" before its Kafka commit
    assert values(kafka_broker, sink, 2) == ["a", "b"]

    restarted, _ = started(kafka_broker, topology, sink, provider.state("out-3"))  # fences the zombie
    assert restarted.recovered
    assert values(kafka_broker, sink, 5) == ["a", "b", "c", "d", "e"]
    with pytest.raises(KafkaUnavailable):
        zombie.pre_commit(2)  # its producer was fenced: nothing of it gets in
    again, _ = started(kafka_broker, topology, sink, provider.state("out-3"))  # its marker is the state's
    again.execute(tup("f"))
    again.pre_prepare(3)
    again.pre_commit(3)
    assert values(kafka_broker, sink, 6) == ["a", "b", "c", "d", "e", "f"]


def test_past_max_interval_bytes_inputs_fail_then_the_checkpoint(kafka_broker: EmbeddedKafka) -> None:
    sink = new_topic(kafka_broker, 1, prefix="out")
    provider = MemoryProvider()
    bolt, out = started(kafka_broker, f"txn-{uuid.uuid4().hex[:6]}", sink, provider.state("out-3"),
                        maxIntervalBytes=1024)
    big = "x" * 200  # key and value: 400 bytes and more a record
    for i in range(4):
        bolt.execute(tup(f"{i}{big}"))
    assert len(out.acked) == 2 and len(out.failed) == 2
    with pytest.raises(IntervalTooLarge, match="maxIntervalBytes=1024"):
        bolt.pre_prepare(1)
    bolt.pre_rollback()  # the topology rolls back; the spout replays all four
    bolt.execute(tup("small"))
    bolt.pre_prepare(1)
    bolt.pre_commit(1)
    assert values(kafka_broker, sink, 1) == ["small"]


def test_a_commit_the_broker_did_not_answer_is_retried_and_written_once(kafka_broker: EmbeddedKafka) -> None:
    sink = new_topic(kafka_broker, 1, prefix="out")
    provider = MemoryProvider()
    state = provider.state("out-3")
    bolt, out = started(kafka_broker, f"txn-{uuid.uuid4().hex[:6]}", sink, state, commitTimeoutMs=2000)
    for v in ("a", "b"):
        bolt.execute(tup(v))
    bolt.pre_prepare(1)
    state.prepare_commit(1)
    kafka_broker.stop(keep_data=True)
    try:
        with pytest.raises(KafkaUnavailable, match="writing checkpoint txid 1"):
            bolt.pre_commit(1)  # the checkpoint fails; the checkpoint spout rolls the COMMIT forward
    finally:
        kafka_broker.start()
    bolt.pre_commit(1)  # the COMMIT again: the markers say txid 1 is not in Kafka, so it is written
    state.commit(1)
    bolt.pre_commit(1)  # and once more (another task failed it): nothing written again
    assert values(kafka_broker, sink, 2) == ["a", "b"]


def test_the_preflight_takes_the_sinks_own_keys(kafka_broker: EmbeddedKafka) -> None:
    from squall.kafka.preflight import kafka_problems
    from helpers import topology

    bolt = {"bootstrapServers": kafka_broker.bootstrap_servers, "topic": "out", "markerTopic": "m",
            "maxIntervalBytes": 100_000, "commitTimeoutMs": 5000}
    spec = {"numWorkers": 1,
            "spouts": [{"name": "s", "class": "squall.kafka:StatefulKafkaSpout", "stateful": True,
                        "config": {"kafka.spout": {"bootstrapServers": kafka_broker.bootstrap_servers,
                                                   "topics": ["in"]}}}],
            "bolts": [{"name": "o", "class": "squall.kafka:TransactionalKafkaBolt", "stateful": True,
                       "config": {"kafka.bolt": bolt}, "inputs": [{"component": "s", "grouping": "shuffle"}]}]}
    assert kafka_problems(topology("txn-preflight", spec, {})) == []
    bolt["maxIntervalBytes"] = 1
    (problem,) = kafka_problems(topology("txn-preflight", spec, {}))
    assert "kafka.bolt.maxIntervalBytes" in str(problem)
