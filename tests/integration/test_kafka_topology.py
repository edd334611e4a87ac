"""Kafka -> Squall -> Kafka on the session's real broker, real workers and real ZooKeeper:
every record arrives at least once, also when a worker is killed with -9 mid-run, and the
group's commits never pass a record whose output is not in the output topic."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall.models.v1alpha1 import Topology
from squall_operator.local import LocalCluster
from helpers import assigned_slots, component_slots, logs_tail, stop_topology, topology, wait_for, wait_running
from kafka_fixtures import committed, consume_all, new_topic, produce

pytestmark = pytest.mark.integration

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


def tags(broker: EmbeddedKafka, topic: str, expected: int, timeout: float = 90) -> list[str]:
    return [m.value().decode() for m in consume_all(broker, topic, expected, timeout)]


def test_every_record_arrives_at_least_once_and_commits_reach_the_end(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    n = 1500
    source, sink = new_topic(kafka_broker, 3), new_topic(kafka_broker, 2)
    values = [f"v{i}" for i in range(n)]
    produce(kafka_broker, source, [v.encode() for v in values])
    # every 50th offset fails once: retried with the backoff, not lost
    topo = pipeline("kafka-e2e", kafka_broker, source, sink, extra={"test.fail_mod": 50})
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    out = tags(kafka_broker, sink, n)
    got = {t.split(":", 2)[2] for t in out}
    assert got == set(values), f"missing {len(set(values) - got)}" + logs_tail(cluster)
    ends = {p: c for p, c in committed(kafka_broker, "g-kafka-e2e", source).items()}
    wait_for(lambda: sum(committed(kafka_broker, "g-kafka-e2e", source).values()) == n, 30,
             f"the commits to reach the end of {source} (now {ends})", cluster, 0.5)
    stop_topology(cluster, topo.name)
