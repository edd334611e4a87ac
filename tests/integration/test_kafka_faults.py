"""Kafka faults on the session's real broker, real workers and ZooKeeper: a poison record and a
record that always fails go to the dead-letter topic and their partition moves on; a broker that
cannot be reached, a topic that does not exist and wrong SASL credentials are each reported as one
line (no traceback) naming the bootstrap servers or the topic, and a topic created later is read."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall_operator.local import LocalCluster
from squall.zkserver import _free_port
from helpers import logs_tail, stop_topology, topology, wait_for, wait_running
from kafka_fixtures import SASL_USER, committed, consume_all, new_topic, pipeline, produce

pytestmark = pytest.mark.integration


def test_poison_records_and_spent_retries_go_to_the_dead_letter_topic(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    big = {"max.message.bytes": str(4 << 20)}
    source, sink, dlq = new_topic(kafka_broker, 1, config=big), new_topic(kafka_broker, 1), new_topic(kafka_broker, 1)
    records = [json.dumps({"n": i}).encode() for i in range(40)]
    records[10] = b"not json {"  # poison: the decoder refuses it
    records[20] = json.dumps({"n": 20, "bad": True}).encode()  # fails every time: retries spent
    # larger than the sink's limit (1 MiB): its write is refused, the retries are spent, and it is
    # too large for the dead-letter topic too: dropped, and the partition still moves on
    records[30] = json.dumps({"n": 30, "pad": "x" * (2 << 20)}).encode()
    produce(kafka_broker, source, records, max_bytes=4 << 20)
    topo = pipeline("kafka-dlq", kafka_broker, source, sink, spout_tasks=1, workers=1,
                    spout={"valueDecoder": "json", "deadLetterTopic": dlq,
                           "retry": {"initialDelayMs": 0, "delayPeriodMs": 10, "maxRetries": 2}},
                    extra={"test.fail_key": "bad"})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    dead = consume_all(kafka_broker, dlq, 2, timeout=60)
    by_source = {dict(m.headers())["squall.source"].decode(): m for m in dead}
    assert set(by_source) == {f"{source}/0/10", f"{source}/0/20"}, logs_tail(cluster)
    assert by_source[f"{source}/0/10"].value() == b"not json {"  # as it came
    assert dict(by_source[f"{source}/0/10"].headers())["squall.reason"].decode().startswith("poison: JSONDecodeError")
    assert dict(by_source[f"{source}/0/20"].headers())["squall.reason"] == b"failed 3 times"
    out = {m.value().decode().split(":", 2)[1] for m in consume_all(kafka_broker, sink, 37)}
    assert out == {str(i) for i in range(40)} - {"10", "20", "30"}
    # the partition moved on: the commit passes both
    wait_for(lambda: committed(kafka_broker, "g-kafka-dlq", source).get(0) == 40, 30,
             "the commit to pass the dead-lettered records", cluster, 0.3)
    # each reported in one line in the worker's log (ZooKeeper keeps a component's latest error)
    log = "\n".join(cluster.worker_logs().values())
    assert f"poison record {source}/0/10 (topic/partition/offset): JSONDecodeError" in log, log[-3000:]
    assert f"{source}/0/30 cannot go to {dlq}" in log and "Message size too large): dropped" in log, log[-3000:]
    assert f"cannot write to {sink} at {kafka_broker.bootstrap_servers}: " in log, log[-3000:]
    stop_topology(cluster, topo.name)


def _errors(cluster: LocalCluster, topo: str, component: str) -> list[str]:
    return [e.error for e in cluster.state.errors(topo, component)]


def test_unreachable_broker_missing_topic_and_wrong_credentials_are_reported(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    down = f"127.0.0.1:{_free_port()}"
    later = f"later-{_free_port()}"
    sink = new_topic(kafka_broker, 1)
    fields = [{"stream": "default", "fields": ["key", "value"]}]

    def spout(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "class": "squall.kafka:KafkaSpout", "outputs": fields,
                "config": {"kafka.spout": {"firstPollOffsetStrategy": "EARLIEST", "metadataTimeoutMs": 2000,
                                           "partitionRefreshPeriodMs": 500, **cfg}}}

    spec = {
        "numWorkers": 1, "messageTimeoutSecs": 10,
        "spouts": [
            spout("down", {"bootstrapServers": down, "topics": ["x"]}),
            spout("missing", {"bootstrapServers": kafka_broker.bootstrap_servers, "topics": [later]}),
            spout("badauth", {"bootstrapServers": kafka_broker.sasl_bootstrap_servers, "topics": [sink],
                              "props": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                        "sasl.username": SASL_USER, "sasl.password": "wrong"}}),
        ],
        "bolts": [{"name": "out", "class": "squall.kafka:KafkaBolt",
                   "config": {"kafka.bolt": {"bootstrapServers": kafka_broker.bootstrap_servers, "topic": sink},
                              "topology.tick.tuple.freq.secs": 0.2},
                   "inputs": [{"component": c} for c in ("down", "missing", "badauth")]}],
    }
    topo = topology("kafka-faults", spec, {})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)

    def reported(component: str, text: str) -> list[str]:
        return [e for e in _errors(cluster, topo.name, component) if text in e]

    got = wait_for(lambda: reported("down", f"no Kafka broker reachable at {down}"), 60,
                   "the unreachable broker's report", cluster, 0.5)
    assert "Traceback" not in got[0] and len(got[0].strip().splitlines()) == 1, got
    got = wait_for(lambda: reported("missing", f"topic {later!r} does not exist at "
                                               f"{kafka_broker.bootstrap_servers}; waiting for it"), 60,
                   "the missing topic's report", cluster, 0.5)
    assert "Traceback" not in got[0], got
    got = wait_for(lambda: reported("badauth", f"Kafka at {kafka_broker.sasl_bootstrap_servers} refused the "
                                               f"credentials"), 60, "the refused login's report", cluster, 0.5)
    assert "Traceback" not in got[0], got
    # the missing topic appears: the spout that waited for it reads it
    from squall.kafka.admin import create_topics

    create_topics(kafka_broker.bootstrap_servers, {later: 1})
    produce(kafka_broker, later, [b"a", b"b", b"c"], keys=[b"1", b"2", b"3"])
    out = consume_all(kafka_broker, sink, 3, timeout=60)
    assert sorted(m.value() for m in out) == [b"a", b"b", b"c"], logs_tail(cluster)
    stop_topology(cluster, topo.name)


def test_squall_kafka_check_says_which_component_cannot_reach_its_brokers(
        kafka_broker: EmbeddedKafka, tmp_path: Any) -> None:
    """Before anything starts: one line per component, naming the bootstrap servers; exit 2."""
    import subprocess
    import sys

    import yaml

    down = f"127.0.0.1:{_free_port()}"
    doc = {"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "check"},
           "spec": {"spouts": [{"name": "in", "class": "squall.kafka:KafkaSpout",
                                "config": {"kafka.spout": {"bootstrapServers": down, "topics": ["a"]}}}],
                    "bolts": [{"name": "out", "class": "squall.kafka:KafkaBolt", "inputs": [{"component": "in"}],
                               "config": {"kafka.bolt": {"bootstrapServers": kafka_broker.bootstrap_servers,
                                                         "topic": "b"}}}]}}
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    cmd = [sys.executable, "-m", "squall_operator", "kafka", "check", str(path), "--timeout", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].endswith(f"topology.yaml: spec.spouts[0].config['kafka.spout'] — no Kafka broker reachable "
                             f"at {down} (Failed to get metadata: Local: Broker transport failure)"), proc.stderr
    assert lines[1:] == ["invalid topology: 1 problem"], proc.stderr
    # squall run refuses the same file with the same line, before it starts anything
    run = subprocess.run([sys.executable, "-m", "squall_operator", "run", str(path), "--duration", "1",
                          "--no-progress"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.splitlines()[0] == lines[0] and "Traceback" not in run.stderr, run.stderr
    assert "ZooKeeper" not in run.stdout + run.stderr and run.stdout == "", run.stdout + run.stderr
    doc["spec"]["spouts"][0]["config"]["kafka.spout"]["bootstrapServers"] = kafka_broker.bootstrap_servers
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_max_uncommitted_offsets_pauses_a_partition_stuck_behind_a_failing_record(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    """Record 5 fails forever (unlimited retries): the commit stays at 5 and reading the partition
    pauses once `maxUncommittedOffsets` offsets are emitted and uncommitted (memory stays bounded)."""
    import time

    source, sink = new_topic(kafka_broker, 1), new_topic(kafka_broker, 1)
    records = [json.dumps({"n": i, "bad": i == 5}).encode() for i in range(300)]
    produce(kafka_broker, source, records)
    topo = pipeline("kafka-pause", kafka_broker, source, sink, spout_tasks=1, workers=1,
                    spout={"valueDecoder": "json", "maxUncommittedOffsets": 30, "pollBatchSize": 10,
                           "retry": {"maxRetries": -1, "delayPeriodMs": 50, "maxDelayMs": 200}},
                    extra={"test.fail_key": "bad"})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: committed(kafka_broker, "g-kafka-pause", source).get(0) == 5, 30,
             "the commit to reach the failing record", cluster, 0.3)
    time.sleep(3)  # time enough to read all 300 were it not paused
    out = consume_all(kafka_broker, sink, 1, timeout=10)
    assert 25 <= len(out) <= 30 + 10, f"{len(out)} outputs" + logs_tail(cluster)
    assert committed(kafka_broker, "g-kafka-pause", source).get(0) == 5
    stop_topology(cluster, topo.name)


def test_at_most_once_commits_before_emitting_and_never_retries(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    """Even offsets fail the first time they are seen: at least once would retry and deliver them
    (test_kafka_topology's first test); at most once delivers only the odd ones, and commits all."""
    source, sink = new_topic(kafka_broker, 1), new_topic(kafka_broker, 1)
    produce(kafka_broker, source, [f"r{i}".encode() for i in range(100)])
    topo = pipeline("kafka-amo", kafka_broker, source, sink, spout_tasks=1, workers=1,
                    spout={"processingGuarantee": "AT_MOST_ONCE"}, extra={"test.fail_mod": 2})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    out = consume_all(kafka_broker, sink, 50, timeout=60)
    assert sorted(int(m.value().decode().split(":", 2)[1]) for m in out) == list(range(1, 100, 2))
    assert committed(kafka_broker, "g-kafka-amo", source).get(0) == 100
    stop_topology(cluster, topo.name)


def test_a_partition_at_max_uncommitted_offsets_commits_at_once_instead_of_stalling(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    """maxUncommittedOffsets 200 with a commit period of a minute: the partition fills up within
    a second, and waiting for the period would stall it (about 200 records in 40 s); it commits what
    is done at once and reads on, so all 2000 records arrive well within the period."""
    source, sink = new_topic(kafka_broker, 1), new_topic(kafka_broker, 1)
    produce(kafka_broker, source, [f"r{i}".encode() for i in range(2000)])
    topo = pipeline("kafka-full", kafka_broker, source, sink, spout_tasks=1, workers=1,
                    spout={"maxUncommittedOffsets": 200, "pollBatchSize": 10, "offsetCommitPeriodMs": 60_000})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    out = consume_all(kafka_broker, sink, 2000, timeout=40)
    assert len({m.value() for m in out}) == 2000, f"{len(out)} of 2000 within 40 s" + logs_tail(cluster)
    stop_topology(cluster, topo.name)
