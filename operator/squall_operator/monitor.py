"""Heartbeat-timeout detection: which executors nimbus still counts as alive.

Nimbus's monitor round (Storm's `nimbus.monitor.freq.secs`) reads the workers' heartbeats and
the assignment's start times, asks `alive_executors` which executors are alive, and hands that
set to the scheduler, which frees the slots of the dead ones. The decision is pure: heartbeat
times, start times and `now` come in as plain numbers, so tests run on fake time.

An executor is alive when

* its last heartbeat is at most `task_timeout` seconds old (Storm's `nimbus.task.timeout.secs`),
  or
* it has no heartbeat newer than its (re)start and it was (re)started at most `launch_timeout`
  seconds ago (Storm's `nimbus.task.launch.secs`): its worker is still launching.

Both bounds are inclusive. An executor with neither a heartbeat nor a start time is dead.

Storm's defaults (30 s task timeout, 120 s launch) make recovery take 30-60 s. The local cluster
uses `LOCAL_TIMEOUTS`: workers heartbeat every second and a Python worker starts in a couple of
seconds, so a few missed beats are enough to call an executor dead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from squall.models.cluster import ExecutorId, WorkerHeartbeat, WorkerSlot, executor_key

__all__ = [
    "LOCAL_TIMEOUTS",
    "STORM_TIMEOUTS",
    "MonitorTimeouts",
    "alive_executors",
    "dead_slots",
    "executor_heartbeat_times",
]


@dataclass(frozen=True)
class MonitorTimeouts:
    # seconds after its last heartbeat an executor is dead
    task_timeout: float
    # seconds after its (re)start an executor that never heartbeat is dead
    launch_timeout: float


STORM_TIMEOUTS = MonitorTimeouts(task_timeout=30.0, launch_timeout=120.0)
LOCAL_TIMEOUTS = MonitorTimeouts(task_timeout=5.0, launch_timeout=20.0)


def alive_executors(
    executors: Iterable[ExecutorId],
    heartbeat_times: Mapping[ExecutorId, float],
    start_times: Mapping[ExecutorId, float],
    now: float,
    task_timeout: float,
    launch_timeout: float,
) -> frozenset[ExecutorId]:
    """The executors among `executors` that are alive at `now` (see the module doc)."""
    alive: set[ExecutorId] = set()
    for executor in executors:
        beat = heartbeat_times.get(executor)
        start = start_times.get(executor)
        if beat is not None and now - beat <= task_timeout:
            alive.add(executor)
        elif start is not None and (beat is None or beat < start) and now - start <= launch_timeout:
            alive.add(executor)
    return frozenset(alive)


def executor_heartbeat_times(
    assignment: Mapping[ExecutorId, WorkerSlot],
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat],
) -> dict[ExecutorId, float]:
    """Executor -> time of the last heartbeat that reported it from its assigned slot.

    A worker that still runs an executor moved elsewhere does not keep it alive: only the
    heartbeat of the slot the executor is assigned to counts.
    """
    times: dict[ExecutorId, float] = {}
    for executor, slot in assignment.items():
        beat = heartbeats.get(slot)
        if beat is not None and executor_key(executor) in beat.executors:
            times[executor] = beat.time_secs
    return times


def dead_slots(
    assignment: Mapping[ExecutorId, WorkerSlot], alive: Iterable[ExecutorId]
) -> frozenset[WorkerSlot]:
    """Slots running at least one executor that is not alive (the scheduler frees them)."""
    alive = frozenset(alive)
    return frozenset(slot for executor, slot in assignment.items() if executor not in alive)
