"""Prometheus metrics of one worker, read from the counters it keeps anyway (docs/operator.md).

Nothing here runs per tuple: a `WorkerCollector` turns a snapshot of the executors' existing
`Counters` (the ones heartbeats carry) into metric families when `/metrics` is scraped, so the
hot path pays nothing for metrics being on. `families` is a pure function of a `WorkerFigures`
(plain values), tested without a worker.

Labels: `topology`, `component`, `task` (an executor's task, or "first-last" when one executor
runs several tasks) on per-executor metrics; `topology`, `worker` (the slot, "node-port") on
per-worker ones. The components' own metrics (`context.register_counter` & co.) follow as
`squall_user_*` families, labelled `topology`, `component`, `task`, `name` and `worker` (squall.usermetrics).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from squall import usermetrics
from squall.kafka.lag import PartitionOffsets, topic_totals
from squall.stats import Counters, bucket_upper_ms

# upper bounds of the latency histograms' buckets, seconds
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


@dataclass(frozen=True)
class ExecutorFigures:
    component: str
    tasks: tuple[int, int]
    kind: str  # "spout" or "bolt"
    stats: Counters
    inbox_batches: int = 0
    pending: int = 0
    backpressure_secs: float = 0.0
    # a Kafka spout's tasks: task -> its partitions' offsets (squall.kafka.lag)
    offsets: Mapping[int, Sequence[PartitionOffsets]] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerFigures:
    topology: str
    worker: str
    executors: Sequence[ExecutorFigures] = ()
    # peer slot key -> batches queued for it (data and acker traffic)
    send_queue_batches: Mapping[str, int] = field(default_factory=dict)
    bad_frames: int = 0
    # peers refused: handshakes without the topology's CURVE key, backpressure signals from strangers
    refused: int = 0
    dropped: int = 0
    unsendable: int = 0
    peer_reconnects: int = 0
    zk_reconnects: int = 0
    zk_sessions_expired: int = 0
    # errors of the components the error throttle left out of the log and of ZooKeeper
    errors_not_logged: int = 0
    # the metrics the tasks registered themselves (squall.usermetrics), read at scrape time
    user: Sequence[usermetrics.TaskMetrics] = ()


def task_label(tasks: tuple[int, int]) -> str:
    return str(tasks[0]) if tasks[0] == tasks[1] else f"{tasks[0]}-{tasks[1]}"


def histogram_buckets(hist: Mapping[int, int], bounds: Sequence[float] = LATENCY_BUCKETS) -> list[tuple[str, float]]:
    """Squall's geometric latency buckets (ms, see squall.stats) as cumulative Prometheus buckets
    (seconds): each geometric bucket counts under the first bound at or above its upper edge."""
    counts = [0] * (len(bounds) + 1)
    for b, n in hist.items():
        upper = bucket_upper_ms(int(b)) / 1000.0
        i = 0
        while i < len(bounds) and bounds[i] < upper:
            i += 1
        counts[i] += n
    out: list[tuple[str, float]] = []
    total = 0
    for bound, n in zip([*bounds, math.inf], counts):
        total += n
        out.append(("+Inf" if bound == math.inf else repr(bound), float(total)))
    return out


def families(fig: WorkerFigures) -> list[Metric]:
    """The worker's metric families for one scrape."""
    labels = ["topology", "component", "task"]

    def counter(name: str, doc: str) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=labels)

    emitted = counter("squall_emitted", "Tuples emitted (one per emit per target stream).")
    transferred = counter("squall_transferred", "Tuples handed on to their consumer tasks.")
    executed = counter("squall_executed", "Tuples a bolt processed.")
    acked = counter("squall_acked", "Tuples acked: a bolt's acks, a spout's completed trees.")
    failed = counter("squall_failed", "Tuples failed: a bolt's fails, a spout's failed or timed-out trees.")
    dropped = counter("squall_executor_dropped", "Tuples an executor dropped (no route).")
    complete = HistogramMetricFamily(
        "squall_complete_latency_seconds",
        "Spouts: time from emit to a tree's completion (sampled: 1 tree in 4).", labels=labels)
    execute = HistogramMetricFamily(
        "squall_execute_latency_seconds", "Bolts: time a tuple spends in process().", labels=labels)
    inbox = GaugeMetricFamily(
        "squall_receive_queue_batches", "Batches waiting in an executor's inbox.", labels=labels)
    pending = GaugeMetricFamily(
        "squall_spout_pending", "A spout's trees not yet completed.", labels=labels)
    bp = CounterMetricFamily(
        "squall_backpressure_seconds",
        "Time an executor's inbox was full, tuples for it held back (backpressure).", labels=labels)
    for ex in fig.executors:
        s = ex.stats
        lv = [fig.topology, ex.component, task_label(ex.tasks)]
        emitted.add_metric(lv, s.emitted)
        transferred.add_metric(lv, s.transferred)
        executed.add_metric(lv, s.executed)
        acked.add_metric(lv, s.acked)
        failed.add_metric(lv, s.failed)
        dropped.add_metric(lv, s.dropped)
        (complete if ex.kind == "spout" else execute).add_metric(
            lv, histogram_buckets(dict(s.hist)), s.lat_sum / 1000.0)
        inbox.add_metric(lv, ex.inbox_batches)
        if ex.kind == "spout":
            pending.add_metric(lv, ex.pending)
        bp.add_metric(lv, ex.backpressure_secs)

    wl = ["topology", "worker"]
    wv = [fig.topology, fig.worker]
    send = GaugeMetricFamily("squall_send_queue_batches", "Batches queued for a peer worker.",
                             labels=[*wl, "peer"])
    for peer, n in sorted(fig.send_queue_batches.items()):
        send.add_metric([*wv, peer], n)

    def worker_counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=wl)
        c.add_metric(wv, value)
        return c

    return [
        emitted, transferred, executed, acked, failed, dropped, complete, execute, inbox, pending, bp,
        send,
        worker_counter("squall_bad_frames", "Frames from the network that did not decode (dropped).", fig.bad_frames),
        worker_counter("squall_refused", "Peers refused: handshakes without the topology's CURVE key, and "
                       "backpressure signals from a host running none of its workers.", fig.refused),
        worker_counter("squall_worker_dropped", "Tuples and acker messages the worker dropped (no route).", fig.dropped),
        worker_counter("squall_unsendable", "Tuples whose values could not be encoded (their trees failed).",
                       fig.unsendable),
        worker_counter("squall_peer_reconnects", "Times a peer worker moved to a new address and was connected again.",
                       fig.peer_reconnects),
        worker_counter("squall_zookeeper_reconnects", "Times the ZooKeeper connection came back.", fig.zk_reconnects),
        worker_counter("squall_zookeeper_sessions_expired",
                       "ZooKeeper sessions that expired (the endpoint was registered again).", fig.zk_sessions_expired),
        worker_counter("squall_errors_not_logged", "Errors of the components counted but not logged or reported "
                       "(over topology.max.error.report.per.interval in an interval).", fig.errors_not_logged),
        *offset_families(fig),
        *usermetrics.families(fig.user, fig.worker),
    ]


# storm-kafka-client's KafkaOffsetMetric names -> (family, help); per partition, then per topic
PARTITION_OFFSETS: tuple[tuple[str, str, str], ...] = (
    ("spoutLag", "squall_kafka_spout_lag",
     "Records of a partition not yet processed for good: its end offset less the committed one."),
    ("earliestTimeOffset", "squall_kafka_earliest_offset", "A partition's first offset."),
    ("latestTimeOffset", "squall_kafka_latest_offset", "A partition's end offset (the next to be written)."),
    ("latestEmittedOffset", "squall_kafka_latest_emitted_offset", "The last offset the spout emitted."),
    ("latestCompletedOffset", "squall_kafka_latest_completed_offset",
     "The committed offset: every record below it is processed."),
    ("recordsInPartition", "squall_kafka_records_in_partition", "A partition's records: its end less its first offset."),
)
TOPIC_TOTALS: tuple[tuple[str, str, str], ...] = (
    ("totalSpoutLag", "squall_kafka_topic_spout_lag", "A task's spout lag summed over its partitions of the topic."),
    ("totalEarliestTimeOffset", "squall_kafka_topic_earliest_offset", "The sum of the partitions' first offsets."),
    ("totalLatestTimeOffset", "squall_kafka_topic_latest_offset", "The sum of the partitions' end offsets."),
    ("totalLatestEmittedOffset", "squall_kafka_topic_latest_emitted_offset",
     "The sum of the partitions' last emitted offsets."),
    ("totalLatestCompletedOffset", "squall_kafka_topic_latest_completed_offset",
     "The sum of the partitions' committed offsets."),
    ("totalRecordsInPartitions", "squall_kafka_topic_records_in_partitions", "The partitions' records, summed."),
)


def offset_families(fig: WorkerFigures) -> list[Metric]:
    """The Kafka spouts' offsets and lag (Storm's KafkaOffsetMetric), per task: per partition
    (labels topic, partition) and per topic (label topic). None when no spout reports any."""
    if not any(ex.offsets for ex in fig.executors):
        return []
    labels = ["topology", "component", "task", "topic"]
    parts = {key: GaugeMetricFamily(name, doc, labels=[*labels, "partition"]) for key, name, doc in PARTITION_OFFSETS}
    totals = {key: GaugeMetricFamily(name, doc, labels=labels) for key, name, doc in TOPIC_TOTALS}
    for ex in fig.executors:
        for task, offsets in sorted(ex.offsets.items()):
            for p in offsets:
                lv = [fig.topology, ex.component, str(task), p.topic, str(p.partition)]
                for key, value in (("spoutLag", p.spout_lag), ("earliestTimeOffset", p.earliest),
                                   ("latestTimeOffset", p.latest), ("latestEmittedOffset", p.latest_emitted),
                                   ("latestCompletedOffset", p.latest_completed),
                                   ("recordsInPartition", p.records_in_partition)):
                    if value is not None:
                        parts[key].add_metric(lv, value)
            for t in topic_totals(offsets):
                lv = [fig.topology, ex.component, str(task), t.topic]
                for key, value in (("totalSpoutLag", t.spout_lag), ("totalEarliestTimeOffset", t.earliest),
                                   ("totalLatestTimeOffset", t.latest), ("totalLatestEmittedOffset", t.latest_emitted),
                                   ("totalLatestCompletedOffset", t.latest_completed),
                                   ("totalRecordsInPartitions", t.records_in_partitions)):
                    totals[key].add_metric(lv, value)
    return [*parts.values(), *totals.values()]


class WorkerCollector(Collector):
    """A prometheus_client collector reading a worker's figures at scrape time."""

    def __init__(self, figures: Callable[[], WorkerFigures]) -> None:
        self.figures = figures

    def collect(self) -> Iterable[Metric]:
        return families(self.figures())


def registry_for(figures: Callable[[], WorkerFigures]) -> CollectorRegistry:
    """A registry holding only the worker's metrics (no process or platform collectors, whose
    names would repeat across the workers `squall run` aggregates)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(figures))
    return registry


def exposition(registry: CollectorRegistry, accept: str) -> tuple[int, str, bytes]:
    """`/metrics`' answer: (status, content type, body), in the format the scraper asked for."""
    encoder, content_type = choose_encoder(accept)
    return 200, content_type, encoder(registry)
