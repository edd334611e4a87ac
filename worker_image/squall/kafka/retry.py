"""When a failed Kafka tuple is emitted again: storm-kafka-client's
`KafkaSpoutRetryExponentialBackoff`.

The n-th failure of a message schedules its retry `initialDelay` later (n = 1), else
`delayPeriod * 2^(n-1)` later, never more than `maxDelay`; past `maxRetries` retries `schedule`
refuses and the spout hands the message to its dead-letter topic or drops it (counted), so a
record that always fails does not hold its partition's commits back forever.

Pure: times are the caller's (seconds from an injected monotonic clock), messages any hashable id.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["RetrySchedule"]

M = TypeVar("M", bound=Hashable)


class RetrySchedule(Generic[M]):
    """Failed messages waiting for their retry, earliest first.

    ``max_retries`` -1: no limit. ``partition_of`` maps a message to its partition, for
    `retain_partitions` (a rebalance drops the retries of partitions this task lost).
    """

    def __init__(
        self,
        *,
        initial_delay_s: float,
        delay_period_s: float,
        max_retries: int,
        max_delay_s: float,
        partition_of: Callable[[M], Hashable] = lambda m: m,
    ) -> None:
        self.initial_delay_s = initial_delay_s
        self.delay_period_s = delay_period_s
        self.max_retries = max_retries
        self.max_delay_s = max_delay_s
        self._partition_of = partition_of
        self._fails: dict[M, int] = {}  # failures so far, of messages seen failing
        self._due: dict[M, float] = {}  # scheduled message -> when it is due
        # the same dicts, read by the spout's loop without a call: `if schedule.due:` is whether
        # any retry is scheduled, `if schedule.failing:` whether any message has failed
        self.due = self._due
        self.failing = self._fails
        self._heap: list[tuple[float, int, M]] = []  # (due, seq, msg); stale entries skipped
        self._seq = 0

    def delay(self, num_fails: int) -> float:
        """Seconds before the retry that follows the `num_fails`-th failure (>= 1)."""
        if num_fails <= 1:
            d = self.initial_delay_s
        else:
            d = self.delay_period_s * (2.0 ** (num_fails - 1))
        return min(d, self.max_delay_s)

    def schedule(self, msg: M, now: float) -> bool:
        """Count a failure of `msg` and schedule its retry; False when its retries are spent
        (it is then forgotten)."""
        fails = self._fails.get(msg, 0) + 1
        if self.max_retries >= 0 and fails > self.max_retries:
            self.remove(msg)
            return False
        self._fails[msg] = fails
        due = now + self.delay(fails)
        self._due[msg] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, msg))
        return True

    def num_fails(self, msg: M) -> int:
        return self._fails.get(msg, 0)

    def is_scheduled(self, msg: M) -> bool:
        return msg in self._due

    def pop_ready(self, now: float) -> M | None:
        """The earliest message due by `now`, taken off the schedule (its failure count stays
        until `remove`: the next failure counts on from it); None when none is due."""
        heap = self._heap
        while heap:
            due, _, msg = heap[0]
            if self._due.get(msg) != due:
                heapq.heappop(heap)  # rescheduled or removed since
                continue
            if due > now:
                return None
            heapq.heappop(heap)
            del self._due[msg]
            return msg
        return None

    def next_due(self) -> float | None:
        heap = self._heap
        while heap and self._due.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def remove(self, msg: M) -> None:
        """`msg` is done (acked, or handed to the dead-letter topic)."""
        self._fails.pop(msg, None)
        self._due.pop(msg, None)

    def retain_partitions(self, partitions: Iterable[Hashable]) -> None:
        keep = set(partitions)
        for msg in [m for m in self._fails if self._partition_of(m) not in keep]:
            self.remove(msg)

    @property
    def scheduled(self) -> int:
        return len(self._due)

    def __len__(self) -> int:
        return len(self._fails)
