"""Which partitions a spout task reads: storm-kafka-client's `RoundRobinManualPartitioner`.

Every task of the spout sees the same sorted list of the subscribed topics' partitions and takes
every n-th one, starting at its index among the component's tasks: each partition has exactly one
reader, decided without the consumer group's own assignment protocol (no group rebalance pauses
the whole spout). A topic that gains partitions, or a new topic matching the pattern, re-spreads
them at the next metadata refresh. Squall's tasks are fixed for a topology's life (a rebalance
moves executors, not tasks), so a Squall rebalance keeps every partition where it was.

Pure: plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["BEGINNING", "END", "TopicPartitionKey", "assign_partitions", "first_poll_position", "task_index"]

TopicPartitionKey = tuple[str, int]


def task_index(task: int, component_tasks: Sequence[int]) -> int:
    """The index of `task` among its component's tasks (sorted by task id)."""
    return sorted(component_tasks).index(task)


def assign_partitions(partitions: Iterable[TopicPartitionKey], index: int, total: int) -> list[TopicPartitionKey]:
    """The partitions of the task at `index` of `total`: every `total`-th of the sorted list."""
    if not 0 <= index < total:
        raise ValueError(f"task index {index} is not in [0, {total})")
    ordered = sorted(set(partitions))
    return ordered[index::total]


BEGINNING = "beginning"
END = "end"


def first_poll_position(strategy: str, committed: int | None, committed_by_this_topology: bool) -> int | str:
    """Where a newly assigned partition is read from (storm-kafka-client's `doSeek`): an offset,
    or `BEGINNING` / `END` of the partition.

    A commit of this topology is always resumed from; another's only by the UNCOMMITTED_*
    strategies; without a commit, *EARLIEST starts at the beginning and *LATEST at the end."""
    if committed is not None and committed >= 0:
        if committed_by_this_topology or strategy.startswith("UNCOMMITTED_"):
            return committed
    return BEGINNING if strategy.endswith("EARLIEST") else END
