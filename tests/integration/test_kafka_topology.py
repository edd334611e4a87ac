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
from squall_operator.local import LocalCluster
from helpers import component_slots, logs_tail, stop_topology, wait_for, wait_running
from kafka_fixtures import committed, consume_all, new_topic, pipeline, produce, read_to_end

pytestmark = pytest.mark.integration

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


def source_offsets(out: list[Any]) -> set[tuple[int, int]]:
    """(partition, offset) of the source records whose output is in `out` (Tag's values)."""
    got = set()
    for m in out:
        partition, offset, _ = m.value().decode().split(":", 2)
        got.add((int(partition), int(offset)))
    return got


def check_commits_behind_outputs(broker: EmbeddedKafka, group: str, source: str, sink: str) -> int:
    """Every source record below the group's committed offsets has its output in `sink`; returns
    how many offsets are committed."""
    commits = committed(broker, group, source)  # first: outputs only grow after it
    done = source_offsets(read_to_end(broker, sink))
    for partition, offset in commits.items():
        missing = [o for o in range(offset) if (partition, o) not in done]
        assert not missing, f"committed {source}[{partition}] up to {offset} but offsets {missing[:10]} have no output"
    return sum(commits.values())


def test_kill_9_of_a_worker_loses_nothing_and_commits_never_pass_unprocessed_records(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    n = 4000
    source, sink = new_topic(kafka_broker, 4), new_topic(kafka_broker, 2)
    produce(kafka_broker, source, [f"r{i}".encode() for i in range(n)])
    topo = pipeline("kafka-kill", kafka_broker, source, sink, extra={"test.sleep_ms": 2}, timeout=8)
    group = "g-kafka-kill"
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: check_commits_behind_outputs(kafka_broker, group, source, sink) >= 600, 60,
             "a few commits", cluster, 0.3)
    assert len(read_to_end(kafka_broker, sink)) < n - 1000, "the run ended before the kill; slow it down"
    slots = component_slots(cluster, topo)
    victim = sorted(slots["kafka"])[0]  # a worker reading Kafka (and committing)
    pid = cluster.worker_pids(topo.name)[victim]
    os.kill(pid, signal.SIGKILL)
    checks = 0
    while len(source_offsets(read_to_end(kafka_broker, sink))) < n:
        check_commits_behind_outputs(kafka_broker, group, source, sink)
        checks += 1
        assert checks < 400, "not every record arrived" + logs_tail(cluster)
        time.sleep(0.3)
    assert any("exited with -9" in c for c in cluster.crashes), cluster.crashes
    wait_for(lambda: check_commits_behind_outputs(kafka_broker, group, source, sink) == n, 30,
             "the commits to reach the end", cluster, 0.5)
    stop_topology(cluster, topo.name)


def test_a_broker_restart_mid_run_loses_nothing(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    """The session's broker is stopped mid-run and started again (same ports, same data): the
    topology resumes by itself and every record arrives."""
    n = 3000
    source, sink = new_topic(kafka_broker, 2), new_topic(kafka_broker, 2)
    produce(kafka_broker, source, [f"r{i}".encode() for i in range(n)])
    topo = pipeline("kafka-restart", kafka_broker, source, sink, extra={"test.sleep_ms": 2}, timeout=8)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: len(read_to_end(kafka_broker, sink)) >= 500, 60, "the first outputs", cluster, 0.3)
    kafka_broker.stop(keep_data=True)
    time.sleep(2)
    kafka_broker.start()
    assert len(read_to_end(kafka_broker, sink)) < n, "the run ended before the restart; slow it down"
    try:
        wait_for(lambda: len(source_offsets(read_to_end(kafka_broker, sink))) == n, 120,
                 "every record after the broker's restart", cluster, 0.5)
    except pytest.fail.Exception as exc:
        pytest.fail(f"{exc}{kafka_lines(cluster)}")
    try:
        wait_for(lambda: check_commits_behind_outputs(kafka_broker, "g-kafka-restart", source, sink) == n, 60,
                 "the commits to reach the end", cluster, 0.5)
    except pytest.fail.Exception as exc:
        # last: a CI log shows the end of the message
        pytest.fail(f"{exc}{kafka_lines(cluster)}\n--- committed of {n}: "
                    f"{committed(kafka_broker, 'g-kafka-restart', source)}")
    stop_topology(cluster, topo.name)


def kafka_lines(cluster: LocalCluster) -> str:
    """What the Kafka components and their clients said, beyond the logs' tails (and a spout
    executor's report that its next_tuple is no longer called)."""
    said = [line for text in cluster.worker_logs().values() for line in text.splitlines()
            if ("squall.kafka." in line and "Connection refused" not in line) or "next_tuple not called" in line]
    return "\n--- the Kafka components' lines ---\n" + "\n".join(said[-60:])


def test_partitions_added_mid_run_are_re_spread_and_nothing_is_lost(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    """Two topics, two spout tasks: [a0, b0, b1] is spread t0 = {a0, b1}, t1 = {b0}. Topic a gains a
    partition: [a0, a1, b0, b1] gives t0 = {a0, b0}, t1 = {a1, b1}, so b0 and b1 change readers
    mid-run (each task revokes one and is given one). Every record of both topics arrives and the
    commits never pass a record without output."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    a, b, sink = new_topic(kafka_broker, 1, prefix="a"), new_topic(kafka_broker, 2, prefix="b"), new_topic(kafka_broker, 2)
    n = 1500
    produce(kafka_broker, a, [f"a{i}".encode() for i in range(n)])
    produce(kafka_broker, b, [f"b{i}".encode() for i in range(n)])
    topo = pipeline("kafka-respread", kafka_broker, a, sink, extra={"test.sleep_ms": 2}, timeout=8,
                    spout={"topics": [a, b], "partitionRefreshPeriodMs": 500})
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: len(read_to_end(kafka_broker, sink)) >= 400, 60, "the first outputs", cluster, 0.3)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})  # kept: its futures need it
    futures = admin.create_partitions([NewPartitions(a, 2)])
    for f in futures.values():
        f.result(30)
    produce(kafka_broker, a, [f"a-late{i}".encode() for i in range(200)], partition=1)
    assert len(read_to_end(kafka_broker, sink)) < 2 * n, "the run ended before the re-spread; slow it down"

    def values() -> set[str]:
        return {m.value().decode().split(":", 2)[2] for m in read_to_end(kafka_broker, sink)}

    expected = {f"a{i}" for i in range(n)} | {f"b{i}" for i in range(n)} | {f"a-late{i}" for i in range(200)}
    wait_for(lambda: values() >= expected, 120, "every record of both topics", cluster, 0.5)
    log = "\n".join(cluster.worker_logs().values())
    assert "revoked [(" in log, "no task gave a partition up" + logs_tail(cluster)
    group = "g-kafka-respread"
    for topic in (a, b):
        commits = committed(kafka_broker, group, topic)
        done = {(int(p), int(o)) for p, o, value in (m.value().decode().split(":", 2)
                                                     for m in read_to_end(kafka_broker, sink))
                if value.startswith(topic[0])}
        for partition, offset in commits.items():
            assert all((partition, o) in done for o in range(offset)), (topic, partition, offset)
    stop_topology(cluster, topo.name)


def test_squall_run_reads_and_writes_kafka(kafka_broker: EmbeddedKafka, tmp_path: Path) -> None:
    """The user's way: a topology file with a KafkaSpout and a KafkaBolt, `squall run` on it
    against the broker (`squall kafka up` in real life, the session's broker here)."""
    import shutil
    import subprocess
    import sys

    import yaml

    source, sink = new_topic(kafka_broker, 2), new_topic(kafka_broker, 1)
    produce(kafka_broker, source, [f"r{i}".encode() for i in range(200)])
    topo = pipeline("kafka-run", kafka_broker, source, sink)
    shutil.copy(Path(__file__).resolve().parent / "topologies" / "kafka_components.py", tmp_path)
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(topo.model_dump(mode="json", by_alias=True, exclude_none=True)))
    proc = subprocess.run([sys.executable, "-m", "squall_operator", "run", "topology.yaml", "--duration", "6",
                           "--kill-wait", "3", "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = {m.value().decode().split(":", 2)[2] for m in consume_all(kafka_broker, sink, 200, timeout=30)}
    assert got == {f"r{i}" for i in range(200)}
    assert sum(committed(kafka_broker, "g-kafka-run", source).values()) == 200
