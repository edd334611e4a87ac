"""Kafka in and out: `KafkaSpout` (storm-kafka-client's semantics) and `KafkaBolt` (a sink that
acks its input on the broker's delivery report), on the confluent-kafka client (librdkafka).

The pure parts (offset bookkeeping, retry schedule, partition spreading, config, decoders) live in
modules that import no client, so they are unit-tested with plain values; `squall.kafka.broker`
runs a real Apache Kafka broker for local runs and tests. See docs/connectors.md.

In a topology file: `class: squall.kafka:KafkaSpout`, `squall.kafka:StatefulKafkaSpout` (exactly
once with the positions in the checkpointed state), `squall.kafka:KafkaBolt` and
`squall.kafka:TransactionalKafkaBolt` (exactly once out, for read_committed consumers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from squall.kafka.bolt import KafkaBolt as KafkaBolt
    from squall.kafka.spout import KafkaSpout as KafkaSpout
    from squall.kafka.stateful import StatefulKafkaSpout as StatefulKafkaSpout
    from squall.kafka.txnbolt import TransactionalKafkaBolt as TransactionalKafkaBolt

__all__ = ["KafkaBolt", "KafkaSpout", "StatefulKafkaSpout", "TransactionalKafkaBolt"]


def __getattr__(name: str) -> object:
    # the components import confluent_kafka; `squall.kafka.broker` and the pure modules do not
    if name == "KafkaSpout":
        from squall.kafka.spout import KafkaSpout

        return KafkaSpout
    if name == "StatefulKafkaSpout":
        from squall.kafka.stateful import StatefulKafkaSpout

        return StatefulKafkaSpout
    if name == "KafkaBolt":
        from squall.kafka.bolt import KafkaBolt

        return KafkaBolt
    if name == "TransactionalKafkaBolt":
        from squall.kafka.txnbolt import TransactionalKafkaBolt

        return TransactionalKafkaBolt
    raise AttributeError(f"module 'squall.kafka' has no attribute {name!r}")
