"""A KafkaSpout's lag (storm-kafka-client's KafkaOffsetMetric) on the session's real broker, a
real worker and real ZooKeeper: records produced while the topology is inactive show as its lag,
N records, on the worker's /metrics (per partition and per topic) and in its heartbeat (where
the autoscaler's `lag` signal reads it); once the topology is activated and has processed and
committed them, the lag falls to 0."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from squall.kafka.broker import EmbeddedKafka
from squall.models.v1alpha1 import Topology
from squall_operator import autoscale
from squall_operator.local import LocalCluster
from helpers import logs_tail, stop_topology, wait_for, wait_running
from kafka_fixtures import consume_all, new_topic, pipeline, produce

pytestmark = pytest.mark.integration

N = 600


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        body = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def beat_lag(cluster: LocalCluster, name: str) -> int | None:
    """The spout's lag as the operator reads it from the heartbeats."""
    got = autoscale.lags(cluster.state.get_worker_heartbeats(name).values(), ["kafka"])
    return None if got is None else int(got["kafka"])


def test_records_produced_while_inactive_are_the_lag_and_it_falls_to_0_once_consumed(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    source, sink = new_topic(kafka_broker, 2), new_topic(kafka_broker, 1)
    topo = pipeline("kafka-lag", kafka_broker, source, sink, workers=1, spout_tasks=1,
                    spout={"lagRefreshPeriodMs": 200})
    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"]["active"] = False  # submitted inactive: the spout opens but reads nothing
    topo = Topology.model_validate(data)
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    [endpoint] = wait_for(lambda: list(cluster.state.get_endpoints(topo.name).values()), 30,
                          "the worker's endpoint", cluster)
    # the watermarks are fetched: an empty topic, no lag
    wait_for(lambda: beat_lag(cluster, topo.name) == 0, 30, "a lag of 0 in the heartbeat", cluster, 0.2)

    produce(kafka_broker, source, [f"v{i}".encode() for i in range(N)])
    t0 = time.monotonic()
    wait_for(lambda: beat_lag(cluster, topo.name) == N, 30, f"a lag of {N} in the heartbeat", cluster, 0.2)
    seen_after = time.monotonic() - t0
    got = scrape(endpoint.metrics_port)
    per_partition = {dict(labels)["partition"]: v for labels, v in got["squall_kafka_spout_lag"].items()}
    ends = {dict(labels)["partition"]: v for labels, v in got["squall_kafka_latest_offset"].items()}
    committed = {dict(labels)["partition"]: v for labels, v in got["squall_kafka_latest_completed_offset"].items()}
    assert set(per_partition) == {"0", "1"} and sum(per_partition.values()) == N, got["squall_kafka_spout_lag"]
    assert per_partition == ends and set(committed.values()) == {0.0}, (ends, committed)
    [(labels, total)] = got["squall_kafka_topic_spout_lag"].items()
    assert total == N and dict(labels)["topic"] == source and dict(labels)["component"] == "kafka"
    assert "squall_kafka_latest_emitted_offset" not in got or not got["squall_kafka_latest_emitted_offset"]

    cluster.nimbus.activate(topo.name)
    t1 = time.monotonic()
    wait_for(lambda: beat_lag(cluster, topo.name) == 0, 60, "the lag to fall to 0 in the heartbeat", cluster, 0.2)
    drained_after = time.monotonic() - t1
    got = scrape(endpoint.metrics_port)
    assert sum(got["squall_kafka_spout_lag"].values()) == 0, got["squall_kafka_spout_lag"] + logs_tail(cluster)
    completed = {dict(labels)["partition"]: v for labels, v in got["squall_kafka_latest_completed_offset"].items()}
    emitted = {dict(labels)["partition"]: v for labels, v in got["squall_kafka_latest_emitted_offset"].items()}
    assert sum(completed.values()) == N and {p: v + 1 for p, v in emitted.items()} == completed
    assert len(consume_all(kafka_broker, sink, N)) >= N
    print(f"lag {N} in the heartbeat {seen_after:.1f} s after the records were produced; "
          f"0 again {drained_after:.1f} s after the activation")
    stop_topology(cluster, topo.name)
    assert not cluster.crashes
