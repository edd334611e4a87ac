"""Kafka to Kafka exactly once: a StatefulKafkaSpout -> a bolt -> TransactionalKafkaBolt, states in
a real redis-server, on the session's real broker and real workers. The sink's worker and then the
spout's worker are killed (-9) mid-run; a read_committed consumer of the output topic then sees
each input's output exactly once. A read_uncommitted consumer may see more: the records of
transactions aborted by the kills (it is told, not asserted).

The test fails without the marker check at start: SQUALL_TXN_CONTROL=always (write the state's
last interval again at every start) or never (take it as written) swaps in those controls."""

from __future__ import annotations

import collections
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall.kafka.stateful import state_key
from squall.plan import build_plan
from squall.statebackend import namespace, open_provider
from squall_operator.local import LocalCluster
from helpers import component_slots, logs_tail, stop_topology, topology, wait_for, wait_running
from kafka_fixtures import consume_all, new_topic, produce

pytestmark = pytest.mark.integration

CONTROLS = {"always": "kafka_txn_components:AlwaysRewrite", "never": "kafka_txn_components:NeverRewrite"}


class Reader:
    """Reads a topic from its start, as it grows, with one isolation level."""

    def __init__(self, broker: EmbeddedKafka, topic: str, isolation: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex}",
                           "enable.auto.commit": False, "isolation.level": isolation})
        md = self.c.list_topics(topic, timeout=10).topics[topic]
        self.c.assign([TopicPartition(topic, p, -2) for p in md.partitions])
        self.ids: collections.Counter[str] = collections.Counter()

    def read(self) -> int:
        for m in self.c.consume(2000, 0.2):
            if m.error() is None:
                self.ids[input_id(m.value())] += 1
        return sum(self.ids.values())

    def close(self) -> None:
        self.c.close()


def input_id(value: bytes | None) -> str:
    return (value or b"").decode().rsplit(":", 1)[-1]  # Tag's "partition:offset:value"


def test_read_committed_sees_each_inputs_output_once_after_kill_9(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster], redis_server: Any) -> None:
    n = 4000
    source = new_topic(kafka_broker, 3)
    sink = new_topic(kafka_broker, 2, prefix="out")
    ids = [f"i{k}" for k in range(n)]
    produce(kafka_broker, source, [i.encode() for i in ids])
    control = os.environ.get("SQUALL_TXN_CONTROL")
    sink_class = CONTROLS[control] if control else "squall.kafka:TransactionalKafkaBolt"
    spec = {
        "numWorkers": 2, "messageTimeoutSecs": 10, "maxSpoutPending": 300,
        "spouts": [{"name": "kafka", "class": "squall.kafka:StatefulKafkaSpout", "stateful": True,
                    "outputs": [{"stream": "default", "fields": ["partition", "offset", "value"]}],
                    "config": {"kafka.spout": {"bootstrapServers": kafka_broker.bootstrap_servers,
                                               "topics": [source], "firstPollOffsetStrategy": "EARLIEST"}}}],
        "bolts": [
            {"name": "tag", "class": "kafka_components:Tag", "parallelism": 2,
             "inputs": [{"component": "kafka", "grouping": "shuffle"}]},
            {"name": "out", "class": sink_class, "stateful": True, "parallelism": 2,
             "config": {"kafka.bolt": {"bootstrapServers": kafka_broker.bootstrap_servers, "topic": sink,
                                       "markerTopic": f"{sink}-markers"}},
             "inputs": [{"component": "tag", "grouping": "shuffle"}]},
        ],
    }
    config = {"topology.state.provider": "redis", "topology.state.provider.config": redis_server.provider_config(),
              "topology.state.checkpoint.interval.ms": 300, "test.sleep_ms": 4}
    topo = topology("kafka-txn", spec, config)
    conf = {"topology.name": topo.name, **config}
    tasks = build_plan(topo, {}).component_tasks

    def state(component: str, task: int) -> Any:
        return open_provider(conf).state(namespace(component, tasks[component].index(task)))

    def position() -> int:
        (task,) = tasks["kafka"]
        s = state("kafka", task)
        return sum(int(s.get(state_key((source, p)), 0)) for p in range(3))

    committed = Reader(kafka_broker, sink, "read_committed")
    cluster = make_cluster(nodes=2, slots=1)
    try:
        cluster.submit(topo)
        wait_running(cluster, topo)
        wait_for(lambda: committed.read() >= 400, 90, "some committed output", cluster, 0.1)
        assert committed.read() < n - 1500, "the run is too far on for the kills; slow it down"
        for victim_component in ("out", "kafka"):
            victim = sorted(component_slots(cluster, topo)[victim_component], key=str)[0]
            pid = cluster.worker_pids(topo.name)[victim]
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: cluster.worker_pids(topo.name).get(victim, pid) != pid, 30,
                     f"the restart of {victim_component}'s worker", cluster)
            seen = committed.read()
            wait_for(lambda: committed.read() >= seen + 300 or len(committed.ids) >= n, 90,
                     "output after the restart", cluster, 0.1)
        wait_for(lambda: position() >= n, 120, "the whole topic committed", cluster, 0.3)
        (spout_task,) = tasks["kafka"]
        final = state("kafka", spout_task).committed_txid() or 0
        wait_for(lambda: min(state("out", t).committed_txid() or -1 for t in tasks["out"]) >= final, 60,
                 "every sink task to commit the last checkpoint", cluster, 0.3)
        time.sleep(1.0)  # a checkpoint more: anything a recovery would write again is in by now
        assert any("exited with -9" in c for c in cluster.crashes), cluster.crashes
        got = collections.Counter(input_id(m.value()) for m in
                                  consume_all(kafka_broker, sink, n, timeout=60, isolation="read_committed"))
        raw = consume_all(kafka_broker, sink, n, timeout=60, isolation="read_uncommitted")
        print(f"read_committed: {sum(got.values())} records for {n} inputs; "
              f"read_uncommitted: {len(raw)} (aborted transactions included)")
        missing = [i for i in ids if got[i] == 0]
        twice = {i: c for i, c in got.items() if c > 1}
        assert not missing and not twice, (
            f"{len(missing)} inputs without output (e.g. {missing[:5]}), {len(twice)} more than once "
            f"(e.g. {dict(list(twice.items())[:5])})" + logs_tail(cluster))
        assert set(got) == set(ids)
        assert len(raw) >= n
        stop_topology(cluster, topo.name)
    finally:
        committed.close()
