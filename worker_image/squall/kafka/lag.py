"""A Kafka spout's lag: storm-kafka-client's `KafkaOffsetMetric`, from plain values.

Per partition of a spout task (Storm's metric names): `earliestTimeOffset` and
`latestTimeOffset`, the partition's first offset and its end (the next offset to be written, its
watermarks as the broker last gave them); `latestEmittedOffset`, the last offset the spout
emitted; `latestCompletedOffset`, the committed offset (where the spout resumes after a restart:
every record below it is processed); `spoutLag` = latestTimeOffset - latestCompletedOffset, the
records not yet processed for good, and `recordsInPartition` = latest - earliest. Per topic, the
sums of them (`totalSpoutLag`, ...).

The lag is counted against the committed offset, as Storm's is, not against the next offset to
emit: records emitted and acked but not yet committed still count, so between two commits it
runs up to what arrives in one `offsetCommitPeriodMs`.

Pure: the spout gives the watermarks its metadata thread fetched and its own offsets; no client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from squall.kafka.assignment import TopicPartitionKey

__all__ = ["PartitionOffsets", "ReportsOffsets", "TopicTotals", "partition_offsets", "topic_totals", "total_lag"]


@runtime_checkable
class ReportsOffsets(Protocol):
    """A spout that reports its partitions' offsets (KafkaSpout): the worker puts them on
    /metrics and their total lag in its heartbeat. Called off the spout's thread."""

    def offset_metrics(self) -> list[PartitionOffsets]: ...


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's offsets (Storm's names in the comments)."""

    topic: str
    partition: int
    earliest: int  # earliestTimeOffset
    latest: int  # latestTimeOffset: the end, the next offset to be written
    latest_completed: int  # latestCompletedOffset: the committed offset
    latest_emitted: int | None = None  # latestEmittedOffset (None: nothing emitted yet)

    @property
    def spout_lag(self) -> int:
        """spoutLag: records at or above the committed offset (never below 0: a commit read
        before a watermark that is older)."""
        return max(0, self.latest - self.latest_completed)

    @property
    def records_in_partition(self) -> int:
        """recordsInPartition."""
        return max(0, self.latest - self.earliest)


@dataclass(frozen=True)
class TopicTotals:
    """A topic's sums over a task's partitions (Storm's total* metrics)."""

    topic: str
    spout_lag: int = 0
    earliest: int = 0
    latest: int = 0
    latest_emitted: int = 0
    latest_completed: int = 0
    records_in_partitions: int = 0


def partition_offsets(partitions: Iterable[TopicPartitionKey],
                      watermarks: Mapping[TopicPartitionKey, tuple[int, int]],
                      completed: Mapping[TopicPartitionKey, int | None],
                      emitted: Mapping[TopicPartitionKey, int | None]) -> list[PartitionOffsets]:
    """The offsets of the task's `partitions` that have watermarks (low, high). A partition with
    no committed offset yet (`completed` None or absent) counts from its earliest offset: none of
    its records is processed for good."""
    out = []
    for tp in sorted(partitions):
        marks = watermarks.get(tp)
        if marks is None:
            continue
        low, high = marks
        done = completed.get(tp)
        out.append(PartitionOffsets(tp[0], tp[1], low, high, low if done is None else done, emitted.get(tp)))
    return out


def topic_totals(offsets: Iterable[PartitionOffsets]) -> list[TopicTotals]:
    """Storm's per-topic totals (a partition with nothing emitted adds 0 to totalLatestEmittedOffset)."""
    sums: dict[str, list[int]] = {}
    for p in offsets:
        s = sums.setdefault(p.topic, [0] * 6)
        for i, v in enumerate((p.spout_lag, p.earliest, p.latest, p.latest_emitted or 0, p.latest_completed,
                               p.records_in_partition)):
            s[i] += v
    return [TopicTotals(t, *s) for t, s in sorted(sums.items())]


def total_lag(offsets: Iterable[PartitionOffsets]) -> int | None:
    """The records not yet processed for good over all the partitions (None: no partition has
    watermarks yet, so no figure)."""
    lags = [p.spout_lag for p in offsets]
    return sum(lags) if lags else None
