"""A Kafka sink's tuple it cannot make a record of is failed and reported as what it is (the
tuple's fault, `UnwritableTuple`), not as Kafka being unavailable. Runs the real KafkaBolt with a
real librdkafka producer; nothing reaches a broker (the record is refused before a write)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

from squall.components import Tuple  # noqa: E402
from squall.kafka.admin import KafkaUnavailable  # noqa: E402
from squall.kafka.bolt import KafkaBolt, UnwritableTuple  # noqa: E402

pytestmark = pytest.mark.unit


class Collector:
    def __init__(self) -> None:
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []

    def fail(self, tup: Tuple) -> None:
        self.failed.append(tup)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


def test_a_tuple_without_a_topic_is_failed_and_reported_as_the_tuples_fault() -> None:
    bolt = KafkaBolt()
    collector = Collector()
    conf: dict[str, Any] = {"kafka.bolt": {"bootstrapServers": "127.0.0.1:1", "topicField": "topic"}}
    bolt.prepare(conf, SimpleNamespace(component_id="sink", task_id=3, topology_id="t"), collector)  # type: ignore[arg-type]
    try:
        tup = Tuple(["k", "v", None], 1, "src", "default", {"key": 0, "value": 1, "topic": 2}, None)
        bolt.execute(tup)
        assert collector.failed == [tup]
        (err,) = collector.errors
        assert isinstance(err, UnwritableTuple) and not isinstance(err, KafkaUnavailable)
        assert "sink: cannot write tuple ['k', 'v', None]" in str(err) and "no topic" in str(err)
    finally:
        bolt.producer.purge()


def test_an_empty_key_field_writes_records_without_a_key() -> None:
    """`keyField: ""` is how a Topology resource says "no key" (kubectl apply drops a null)."""
    from squall.kafka.bolt import sink_record
    from squall.kafka.config import parse_bolt_config
    from squall.kafka.records import make_encoder

    enc = make_encoder("utf-8", "test")
    tup = Tuple(["k", "v"], 1, "src", "default", {"key": 0, "value": 1}, None)
    no_key = parse_bolt_config({"kafka.bolt": {"bootstrapServers": "k", "topic": "out", "keyField": ""}})
    assert sink_record(no_key, None, enc, enc, tup) == ("out", None, b"v")
    default = parse_bolt_config({"kafka.bolt": {"bootstrapServers": "k", "topic": "out"}})
    assert sink_record(default, None, enc, enc, tup) == ("out", b"k", b"v")
