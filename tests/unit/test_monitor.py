"""Heartbeat-timeout detection on fake time."""

from __future__ import annotations

import pytest

from squall.models.cluster import ExecutorStats, WorkerHeartbeat, WorkerSlot
from squall_operator.monitor import (
    LOCAL_TIMEOUTS,
    STORM_TIMEOUTS,
    SeenBeat,
    alive_executors,
    dead_slots,
    executor_heartbeat_times,
    observe_heartbeats,
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
    seen = observe_heartbeats({}, beats, 100.0)
    assert executor_heartbeat_times(assignment, beats, seen) == {E1: 100.0}


def test_dead_slots() -> None:
    assignment = {E1: A0, E2: A0, E3: B0}
    assert dead_slots(assignment, {E1, E3}) == {A0}
    assert dead_slots(assignment, {E1, E2, E3}) == frozenset()


# --- nimbus-side time (a worker's clock may be off) and ZooKeeper outages ------------------------


def beat_at(worker_time: float) -> WorkerHeartbeat:
    return WorkerHeartbeat(time_secs=worker_time, uptime_secs=1.0, executors={"1-1": ExecutorStats(component="x")})


def test_observe_heartbeats_stamps_changes_with_nimbus_time() -> None:
    first = observe_heartbeats({}, {A0: beat_at(5.0)}, 100.0)
    assert first == {A0: SeenBeat(5.0, 100.0)}  # first seen: now
    same = observe_heartbeats(first, {A0: beat_at(5.0)}, 107.0)
    assert same == {A0: SeenBeat(5.0, 100.0)}  # unchanged: still seen at 100
    # a change counts when nimbus sees it, even if the worker's clock went backwards
    assert observe_heartbeats(same, {A0: beat_at(4.0)}, 108.0) == {A0: SeenBeat(4.0, 108.0)}
    assert observe_heartbeats(same, {}, 109.0) == {}  # node gone: forgotten


@pytest.mark.parametrize("skew", [-3600.0, 3600.0, 0.0])
def test_skewed_worker_clock_is_neither_dead_nor_immortal(skew: float) -> None:
    assignment = {E1: A0}
    starts = {E1: 1000.0}
    seen: dict[WorkerSlot, SeenBeat] = {}
    now = 1000.0
    for _ in range(60):  # beating every second: alive throughout
        now += 1.0
        beats = {A0: beat_at(now + skew)}
        seen = observe_heartbeats(seen, beats, now)
        times = executor_heartbeat_times(assignment, beats, seen)
        assert alive_executors([E1], times, starts, now, 5.0, 20.0) == {E1}
    for _ in range(5):  # silent: alive up to the task timeout
        now += 1.0
        seen = observe_heartbeats(seen, beats, now)
        times = executor_heartbeat_times(assignment, beats, seen)
        assert alive_executors([E1], times, starts, now, 5.0, 20.0) == {E1}
    now += 0.001
    seen = observe_heartbeats(seen, beats, now)
    times = executor_heartbeat_times(assignment, beats, seen)
    assert alive_executors([E1], times, starts, now, 5.0, 20.0) == frozenset()


def test_nothing_dies_for_staleness_nimbus_could_not_observe() -> None:
    # last beat seen at 100; ZooKeeper away from 101 to 130: every worker gets a whole window
    beats, starts = {E1: 100.0}, {E1: 50.0}
    assert alive_executors([E1], beats, starts, 131.0, 5.0, 20.0) == frozenset()
    assert alive_executors([E1], beats, starts, 131.0, 5.0, 20.0, observed_since=130.0) == {E1}
    assert alive_executors([E1], beats, starts, 135.0, 5.0, 20.0, observed_since=130.0) == {E1}
    assert alive_executors([E1], beats, starts, 135.001, 5.0, 20.0, observed_since=130.0) == frozenset()


def test_after_an_outage_a_reconnecting_worker_gets_the_grace_on_top() -> None:
    # ZooKeeper back at 130 for nimbus; the worker's client backs off or needs a new session
    beats, starts = {E1: 100.0}, {E1: 50.0}
    assert alive_executors([E1], beats, starts, 135.001, 5.0, 20.0, observed_since=130.0, grace=6.0) == {E1}
    assert alive_executors([E1], beats, starts, 141.0, 5.0, 20.0, observed_since=130.0, grace=6.0) == {E1}
    assert alive_executors([E1], beats, starts, 141.001, 5.0, 20.0, observed_since=130.0, grace=6.0) == frozenset()
    # a heartbeat seen after the outage gets the plain task timeout again
    beats = {E1: 132.0}
    assert alive_executors([E1], beats, starts, 137.0, 5.0, 20.0, observed_since=130.0, grace=6.0) == {E1}
    assert alive_executors([E1], beats, starts, 137.001, 5.0, 20.0, observed_since=130.0, grace=6.0) == frozenset()


def test_a_launching_executor_gets_a_whole_launch_window_after_an_outage() -> None:
    starts = {E1: 100.0}
    assert alive_executors([E1], {}, starts, 140.0, 5.0, 20.0) == frozenset()
    assert alive_executors([E1], {}, starts, 140.0, 5.0, 20.0, observed_since=130.0) == {E1}
    assert alive_executors([E1], {}, starts, 150.001, 5.0, 20.0, observed_since=130.0) == frozenset()
