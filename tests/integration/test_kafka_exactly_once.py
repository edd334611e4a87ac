"""Kafka read exactly once into checkpointed state: a StatefulKafkaSpout (positions in the
spout's checkpointed state) feeding a stateful counter, with its state in a real redis-server,
on the session's real broker and real workers. After a kill -9 of the spout's worker mid-run the
committed totals equal a recount of the topic."""

from __future__ import annotations

import collections
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall.kafka.stateful import state_key
from squall.plan import build_plan
from squall.statebackend import namespace, open_provider
from squall_operator.local import LocalCluster
from helpers import component_slots, logs_tail, stop_topology, topology, wait_for, wait_running
from kafka_fixtures import new_topic, produce

pytestmark = pytest.mark.integration


def test_totals_equal_a_recount_of_the_topic_after_kill_9(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster], redis_server: Any) -> None:
    n = 3000
    source = new_topic(kafka_broker, 3)
    words = [f"w{i % 37}" for i in range(n)]
    produce(kafka_broker, source, [w.encode() for w in words])
    spec = {
        "numWorkers": 2, "messageTimeoutSecs": 10, "maxSpoutPending": 500,
        "spouts": [{"name": "kafka", "class": "squall.kafka:StatefulKafkaSpout", "stateful": True,
                    "outputs": [{"stream": "default", "fields": ["value"]}],
                    "config": {"kafka.spout": {"bootstrapServers": kafka_broker.bootstrap_servers,
                                               "topics": [source], "firstPollOffsetStrategy": "EARLIEST"}}}],
        "bolts": [{"name": "count", "class": "kafka_components:WordTotals", "stateful": True, "parallelism": 2,
                   "inputs": [{"component": "kafka", "grouping": "fields", "fields": ["value"]}]}],
    }
    config = {"topology.state.provider": "redis", "topology.state.provider.config": redis_server.provider_config(),
              "topology.state.checkpoint.interval.ms": 300, "test.sleep_ms": 1}
    topo = topology("kafka-exact", spec, config)
    conf = {"topology.name": topo.name, **config}
    tasks = build_plan(topo, {}).component_tasks

    def state(component: str, task: int) -> Any:
        return open_provider(conf).state(namespace(component, tasks[component].index(task)))

    def position() -> int:
        (task,) = tasks["kafka"]
        s = state("kafka", task)
        return sum(int(s.get(state_key((source, p)), 0)) for p in range(3))

    def totals() -> dict[str, int]:
        out: dict[str, int] = {}
        for t in tasks["count"]:
            for word, count in state("count", t):
                if isinstance(word, str) and word.startswith("w"):
                    out[word] = count
        return out

    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: position() >= 600, 90, "a few committed checkpoints", cluster, 0.3)
    assert position() < n - 1000, "the run ended before the kill; slow it down"
    (victim,) = component_slots(cluster, topo)["kafka"]
    pid = cluster.worker_pids(topo.name)[victim]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: cluster.worker_pids(topo.name).get(victim, pid) != pid, 30, "the worker's restart", cluster)
    wait_for(lambda: position() >= n, 180, "the whole topic committed", cluster, 0.5)
    (spout_task,) = tasks["kafka"]
    final = state("kafka", spout_task).committed_txid() or 0
    wait_for(lambda: min(state("count", t).committed_txid() or -1 for t in tasks["count"]) >= final, 60,
             "every counter to commit the last checkpoint", cluster, 0.5)
    expected = dict(collections.Counter(words))
    got = totals()
    assert any("exited with -9" in c for c in cluster.crashes), cluster.crashes
    diff = {w: (got.get(w), expected.get(w)) for w in set(got) | set(expected) if got.get(w) != expected.get(w)}
    assert got == expected, f"differences (got, expected): {diff}" + logs_tail(cluster)
    stop_topology(cluster, topo.name)
