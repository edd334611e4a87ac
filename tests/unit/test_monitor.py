"""Heartbeat-timeout detection on fake time."""

from __future__ import annotations

import pytest

from squall.models.cluster import ExecutorStats, WorkerHeartbeat, WorkerSlot
from squall_operator.monitor import (
    LOCAL_TIMEOUTS,
    STORM_TIMEOUTS,
    alive_executors,
    dead_slots,
    executor_heartbeat_times,
)

pytestmark = pytest.mark.unit

E1, E2, E3 = (1, 1), (2, 3), (4, 4)
A0, B0 = WorkerSlot("a", 6700), WorkerSlot("b", 6700)
TASK, LAUNCH = 30.0, 120.0


def alive(
    heartbeats: dict[tuple[int, int], float], starts: dict[tuple[int, int], float], now: float
) -> frozenset[tuple[int, int]]:
    return alive_executors([E1], heartbeats, starts, now, TASK, LAUNCH)


def test_fresh_heartbeat_alive_up_to_the_task_timeout_inclusive() -> None:
    beats, starts = {E1: 100.0}, {E1: 50.0}
    assert alive(beats, starts, 100.0) == {E1}
    assert alive(beats, starts, 130.0) == {E1}
    assert alive(beats, starts, 130.001) == frozenset()


def test_launching_executor_alive_up_to_the_launch_timeout_inclusive() -> None:
    starts = {E1: 100.0}
    assert alive({}, starts, 100.0) == {E1}
    assert alive({}, starts, 220.0) == {E1}
    assert alive({}, starts, 220.001) == frozenset()


def test_heartbeat_from_before_a_restart_does_not_count_as_launched() -> None:
    # reassigned at 200; the last beat (150) came from the previous incarnation
    beats, starts = {E1: 150.0}, {E1: 200.0}
    assert alive(beats, starts, 250.0) == {E1}  # still launching
    assert alive(beats, starts, 320.0) == {E1}
    assert alive(beats, starts, 320.001) == frozenset()


def test_launched_executor_that_stops_beating_dies_after_the_task_timeout() -> None:
    # once it has beaten since its start, the launch grace no longer applies
    beats, starts = {E1: 110.0}, {E1: 100.0}
    assert alive(beats, starts, 140.0) == {E1}
    assert alive(beats, starts, 141.0) == frozenset()


def test_no_heartbeat_and_no_start_time_is_dead() -> None:
    assert alive({}, {}, 0.0) == frozenset()


def test_many_executors() -> None:
    beats = {E1: 95.0, E2: 50.0}
    starts = {E1: 0.0, E2: 0.0, E3: 90.0}
    assert alive_executors([E1, E2, E3], beats, starts, 100.0, 10.0, 20.0) == {E1, E3}


def test_defaults() -> None:
    assert (STORM_TIMEOUTS.task_timeout, STORM_TIMEOUTS.launch_timeout) == (30.0, 120.0)
    assert LOCAL_TIMEOUTS.task_timeout < STORM_TIMEOUTS.task_timeout
    assert LOCAL_TIMEOUTS.launch_timeout < STORM_TIMEOUTS.launch_timeout


def test_heartbeat_times_come_from_the_assigned_slot_only() -> None:
    stats = ExecutorStats(component="split")
    beats = {
        A0: WorkerHeartbeat(time_secs=100.0, uptime_secs=5.0, executors={"1-1": stats}),
        # b still reports 2-3, which has moved to a: it must not keep 2-3 alive
        B0: WorkerHeartbeat(time_secs=101.0, uptime_secs=5.0, executors={"2-3": stats}),
    }
    assignment = {E1: A0, E2: A0, E3: B0}
    assert executor_heartbeat_times(assignment, beats) == {E1: 100.0}


def test_dead_slots() -> None:
    assignment = {E1: A0, E2: A0, E3: B0}
    assert dead_slots(assignment, {E1, E3}) == {A0}
    assert dead_slots(assignment, {E1, E2, E3}) == frozenset()
