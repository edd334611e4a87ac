"""A Kafka spout's lag, as storm-kafka-client's KafkaOffsetMetric reports it (squall.kafka.lag),
from plain offsets, and the same figures on a worker's /metrics (squall.worker.metrics), parsed
back with prometheus_client's own parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from squall.kafka.config import KafkaConfigError, parse_spout_config
from squall.kafka.lag import PartitionOffsets, TopicTotals, partition_offsets, topic_totals, total_lag
from squall.stats import Counters
from squall.worker.metrics import ExecutorFigures, WorkerFigures, exposition, registry_for

pytestmark = pytest.mark.unit

MARKS = {("a", 0): (0, 120), ("a", 1): (10, 50), ("b", 0): (0, 7)}


def test_spout_lag_is_the_end_offset_less_the_committed_one() -> None:
    got = partition_offsets([("a", 1), ("a", 0), ("b", 0), ("c", 0)], MARKS,
                            completed={("a", 0): 100, ("a", 1): 50, ("b", 0): None},
                            emitted={("a", 0): 110, ("a", 1): 49})
    # c/0 has no watermarks yet: left out; b/0 has no commit: counts from its first offset
    assert got == [PartitionOffsets("a", 0, 0, 120, 100, 110), PartitionOffsets("a", 1, 10, 50, 50, 49),
                   PartitionOffsets("b", 0, 0, 7, 0, None)]
    assert [p.spout_lag for p in got] == [20, 0, 7]
    assert [p.records_in_partition for p in got] == [120, 40, 7]
    assert total_lag(got) == 27
    assert topic_totals(got) == [TopicTotals("a", 20, 10, 170, 159, 150, 160), TopicTotals("b", 7, 0, 7, 0, 0, 7)]
    # a commit read after older watermarks never makes the lag negative
    assert PartitionOffsets("a", 0, 0, 100, 105).spout_lag == 0
    assert total_lag([]) is None and partition_offsets([("a", 0)], {}, {}, {}) == []


def test_lag_refresh_period_is_off_or_at_least_100_ms() -> None:
    base = {"bootstrapServers": "127.0.0.1:9092", "topics": ["a"]}
    assert parse_spout_config({"kafka.spout": base}).lagRefreshPeriodMs == 5000
    assert parse_spout_config({"kafka.spout": {**base, "lagRefreshPeriodMs": 0}}).lagRefreshPeriodMs == 0
    with pytest.raises(KafkaConfigError, match=r"kafka.spout.lagRefreshPeriodMs: 50 is below 100 ms"):
        parse_spout_config({"kafka.spout": {**base, "lagRefreshPeriodMs": 50}})


def scrape(fig: WorkerFigures) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    status, _, body = exposition(registry_for(lambda: fig), "")
    assert status == 200
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_offsets_on_metrics_per_task_partition_and_topic() -> None:
    parts = partition_offsets(list(MARKS), MARKS, {("a", 0): 100, ("a", 1): 50, ("b", 0): 7},
                              {("a", 0): 110, ("a", 1): 49})
    spout = ExecutorFigures("kafka", (3, 4), "spout", Counters(), offsets={3: parts[:2], 4: parts[2:]})
    bolt = ExecutorFigures("sink", (5, 5), "bolt", Counters())
    got = scrape(WorkerFigures("t", "n-1", [spout, bolt]))

    def per(family: str) -> dict[tuple[str, ...], float]:
        return {tuple(v for k, v in labels if k not in ("topology", "component")): value
                for labels, value in got[family].items()}

    # labels sorted by name: partition, task, topic
    assert per("squall_kafka_spout_lag") == {("0", "3", "a"): 20, ("1", "3", "a"): 0, ("0", "4", "b"): 0}
    assert per("squall_kafka_latest_offset") == {("0", "3", "a"): 120, ("1", "3", "a"): 50, ("0", "4", "b"): 7}
    assert per("squall_kafka_earliest_offset")[("1", "3", "a")] == 10
    assert per("squall_kafka_latest_completed_offset")[("0", "3", "a")] == 100
    # nothing emitted from b/0: no sample rather than a made-up offset
    assert per("squall_kafka_latest_emitted_offset") == {("0", "3", "a"): 110, ("1", "3", "a"): 49}
    assert per("squall_kafka_records_in_partition")[("1", "3", "a")] == 40
    assert per("squall_kafka_topic_spout_lag") == {("3", "a"): 20, ("4", "b"): 0}
    assert per("squall_kafka_topic_latest_offset") == {("3", "a"): 170, ("4", "b"): 7}
    assert per("squall_kafka_topic_records_in_partitions") == {("3", "a"): 160, ("4", "b"): 7}
    assert {labels for labels in got["squall_kafka_spout_lag"]} == {
        (("component", "kafka"), ("partition", p), ("task", t), ("topic", tp), ("topology", "t"))
        for p, t, tp in (("0", "3", "a"), ("1", "3", "a"), ("0", "4", "b"))}
    # a worker without a Kafka spout has none of these families
    assert not [name for name in scrape(WorkerFigures("t", "n-1", [bolt])) if name.startswith("squall_kafka")]


def test_a_spout_not_yet_opened_reports_no_offsets() -> None:
    """The worker's heartbeat reads the offsets of every spout task, and may come before a task's
    `open` has made its metadata thread: no figures then (seen: an AttributeError logged with its
    traceback when a worker's first heartbeat came before its Kafka spout's open)."""
    from squall.kafka import KafkaSpout

    spout = KafkaSpout()
    assert spout.offset_metrics() == []
    assert spout.lag() is None
