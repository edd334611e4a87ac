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
from typing import Any

__all__ = [
    "BEGINNING",
    "END",
    "LAUNCH_TIME_KEY",
    "TopicPartitionKey",
    "assign_partitions",
    "deployment_id",
    "first_poll_position",
    "task_index",
]

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


# the worker's config key for when the topology was submitted (StormBase.launch_time_secs)
LAUNCH_TIME_KEY = "topology.launch.time.secs"


def deployment_id(topology_id: str, launch_time_secs: Any) -> str:
    """"This topology" in the spout's commit metadata: Storm's storm id (`name-N-launchtime`)
    differs with each submission, and so does this, the topology's name and when it was
    submitted (milliseconds). Without a launch time: the name alone."""
    if launch_time_secs is None:
        return topology_id
    return f"{topology_id}-{round(float(launch_time_secs) * 1000)}"


BEGINNING = "beginning"
END = "end"


def first_poll_position(strategy: str, committed: int | None, committed_by_this_topology: bool) -> int | str:
    """Where a newly assigned partition is read from (storm-kafka-client's `doSeek`): an offset,
    or `BEGINNING` / `END` of the partition.

    A commit of this deployment of the topology (`deployment_id`) is always resumed from (a
    worker restarted, a partition moved); any other commit (an earlier submission's, another
    topology's) only by the UNCOMMITTED_* strategies: EARLIEST and LATEST apply at every
    submission, regardless of previous commits. Without a commit, *EARLIEST starts at the
    beginning and *LATEST at the end."""
    if committed is not None and committed >= 0:
        if committed_by_this_topology or strategy.startswith("UNCOMMITTED_"):
            return committed
    return BEGINNING if strategy.endswith("EARLIEST") else END
