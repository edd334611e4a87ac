"""Heartbeat-timeout detection: which executors nimbus still counts as alive.

Nimbus's monitor round (Storm's `nimbus.monitor.freq.secs`) reads the workers' heartbeats and
the assignment's start times, asks `alive_executors` which executors are alive, and hands that
set to the scheduler, which frees the slots of the dead ones. The decision is pure: heartbeat
times, start times and `now` come in as plain numbers, so tests run on fake time.

Heartbeat times are nimbus's, never the worker's (Storm's heartbeat cache): a worker's
`time_secs` is only compared with its previous value, and the time that counts is when nimbus
saw it change (`observe_heartbeats`). A worker whose clock is an hour off is neither dead nor
immortal; a heartbeat node that stops changing is stale whatever time it claims.

An executor is alive when

* nimbus saw its heartbeat change at most `task_timeout` seconds ago (Storm's
  `nimbus.task.timeout.secs`), or
* no heartbeat of it changed since its (re)start and it was (re)started at most
  `launch_timeout` seconds ago (Storm's `nimbus.task.launch.secs`): its worker is still
  launching.

Both bounds are inclusive. An executor with neither a heartbeat nor a start time is dead.

Staleness counts only from `observed_since`: the time since which nimbus could watch the
heartbeats without a gap (its start, or its reconnection to ZooKeeper after an outage). Nimbus
declares nothing dead for time it could not observe: after an outage every worker gets a whole
task timeout (and a launching one a whole launch timeout) to show a new heartbeat, plus
`reconnect_grace` after a ZooKeeper outage: nimbus's client is often back before the workers'
(each backs off between attempts, and one whose session expired needs a new session before it
can write), so a worker that heartbeats every second may still need several seconds to be seen.

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
    "SeenBeat",
    "dead_slots",
    "executor_heartbeat_times",
    "observe_heartbeats",
]


@dataclass(frozen=True)
class MonitorTimeouts:
    # seconds after its last heartbeat an executor is dead
    task_timeout: float
    # seconds after its (re)start an executor that never heartbeat is dead
    launch_timeout: float
    # extra seconds a worker gets to heartbeat again after a ZooKeeper outage: its session
    # timeout (the worker's default is 10 s) plus its client's longest back-off (2 s)
    reconnect_grace: float = 12.0


STORM_TIMEOUTS = MonitorTimeouts(task_timeout=30.0, launch_timeout=120.0)
LOCAL_TIMEOUTS = MonitorTimeouts(task_timeout=5.0, launch_timeout=20.0)


@dataclass(frozen=True)
class SeenBeat:
    """What nimbus knows of one slot's heartbeat node."""

    # the worker's own `time_secs`: compared only with its previous value, never with a clock
    reported_secs: float
    # nimbus time when `reported_secs` last changed (or was first seen)
    seen_secs: float


def observe_heartbeats(
    previous: Mapping[WorkerSlot, SeenBeat],
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat],
    now: float,
) -> dict[WorkerSlot, SeenBeat]:
    """Storm's heartbeat cache: slot -> when nimbus (at `now`, its clock) saw its beat change.

    A slot seen for the first time counts as seen now (a restarted nimbus gives every worker a
    fresh window, as Storm's does); a slot whose node is gone is forgotten.
    """
    seen: dict[WorkerSlot, SeenBeat] = {}
    for slot, beat in heartbeats.items():
        old = previous.get(slot)
        if old is not None and old.reported_secs == beat.time_secs:
            seen[slot] = old
        else:
            seen[slot] = SeenBeat(beat.time_secs, now)
    return seen


def alive_executors(
    executors: Iterable[ExecutorId],
    heartbeat_times: Mapping[ExecutorId, float],
    start_times: Mapping[ExecutorId, float],
    now: float,
    task_timeout: float,
    launch_timeout: float,
    *,
    observed_since: float | None = None,
    grace: float = 0.0,
) -> frozenset[ExecutorId]:
    """The executors among `executors` that are alive at `now` (see the module doc).

    `heartbeat_times` and `start_times` are nimbus times (`executor_heartbeat_times`, the
    assignment's start times); `observed_since` is when nimbus's view last became continuous;
    `grace` is added to the task timeout of an executor whose last heartbeat nimbus saw before
    then (a worker reconnecting after an outage).
    """
    alive: set[ExecutorId] = set()
    since = float("-inf") if observed_since is None else observed_since
    for executor in executors:
        beat = heartbeat_times.get(executor)
        start = start_times.get(executor)
        if beat is not None and now - max(beat, since) <= task_timeout + (grace if beat < since else 0.0):
            alive.add(executor)
        elif (
            start is not None
            and (beat is None or beat < start)
            and now - max(start, since) <= launch_timeout
        ):
            alive.add(executor)
    return frozenset(alive)


def executor_heartbeat_times(
    assignment: Mapping[ExecutorId, WorkerSlot],
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat],
    seen: Mapping[WorkerSlot, SeenBeat],
) -> dict[ExecutorId, float]:
    """Executor -> nimbus time of the last change of a heartbeat that reported it from its
    assigned slot (`seen` from `observe_heartbeats`).

    A worker that still runs an executor moved elsewhere does not keep it alive: only the
    heartbeat of the slot the executor is assigned to counts.
    """
    times: dict[ExecutorId, float] = {}
    for executor, slot in assignment.items():
        beat = heartbeats.get(slot)
        at = seen.get(slot)
        if beat is not None and at is not None and executor_key(executor) in beat.executors:
            times[executor] = at.seen_secs
    return times


def dead_slots(
    assignment: Mapping[ExecutorId, WorkerSlot], alive: Iterable[ExecutorId]
) -> frozenset[WorkerSlot]:
    """Slots running at least one executor that is not alive (the scheduler frees them)."""
    alive = frozenset(alive)
    return frozenset(slot for executor, slot in assignment.items() if executor not in alive)
