"""A worker's busy fraction and its peers' load announcements (squall.worker.load), and how an
executor's load-aware shuffles read them (`Executor.refresh_load` with the worker's loads), on
plain values with an injected clock; one test reads this process's own schedstat."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from squall import wire
from squall.acker import AckerLedger
from squall.groupings import HOST_LOCAL, WORKER_LOCAL, LoadAwareShuffle
from squall.models.cluster import WorkerSlot
from squall.worker import control
from squall.worker.control import sort_control, well_formed
from squall.worker.executor import LOAD_REFRESH_SECS, Executor
from squall.worker.load import (
    ANNOUNCE_SECS,
    ANNOUNCE_TTL_SECS,
    MIN_WINDOW_SECS,
    BusyMeter,
    PeerLoads,
    load_items,
    python_thread_secs,
)
from squall.worker.routing import Inbox
from squall.worker.transport import PeerQueues

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_busy_is_the_share_of_wall_time_the_threads_ran_or_waited_to() -> None:
    clock, secs = Clock(), [5.0]
    meter = BusyMeter(read=lambda: secs[0], clock=clock)
    clock.t += 2.0
    secs[0] += 1.5
    assert meter.sample() == pytest.approx(0.75)
    clock.t += 1.0
    secs[0] += 3.0  # two threads running outside the GIL at once: capped
    assert meter.sample() == 1.0
    clock.t += 1.0
    secs[0] -= 0.5  # a thread ended and took its seconds with it: not negative
    assert meter.sample() == 0.0
    assert meter.sample() == 0.0  # no time passed: the last value


def test_without_schedstat_it_falls_back_to_process_cpu() -> None:
    clock, cpu = Clock(), [1.0]
    meter = BusyMeter(read=lambda: None, clock=clock, fallback=lambda: cpu[0])
    clock.t += 1.0
    cpu[0] += 0.4
    assert meter.sample() == pytest.approx(0.4)


def test_this_process_reads_busy_while_a_thread_spins() -> None:
    before = python_thread_secs()
    if before is None:
        pytest.skip("no schedstat on this kernel")
    meter = BusyMeter()
    stop = time.monotonic() + 0.3
    while time.monotonic() < stop:
        pass
    assert meter.sample() > 0.5
    done = threading.Event()
    done.wait(0.3)  # sleeping: nothing runs
    assert meter.sample() < 0.5


def test_announcements_are_heard_until_they_go_stale() -> None:
    loads = PeerLoads()
    items = load_items(0.8349, {7: 0.25, 5: 1.5})
    assert items == [[wire.LOAD, 5, 835, 1000, 0], [wire.LOAD, 7, 835, 250, 0]]
    loads.hear(items, now=10.0)
    assert loads.of(7, 10.0 + ANNOUNCE_TTL_SECS) == (0.835, 0.25)
    assert loads.of(7, 10.1 + ANNOUNCE_TTL_SECS) == (0.0, 0.0)
    assert loads.of(99, 10.0) == (0.0, 0.0)
    loads.hear([[wire.LOAD, 8, -5, 7000, 0]], now=10.0)  # out of range: clamped
    assert loads.of(8, 10.0) == (0.0, 1.0)


def test_an_announcement_says_when_its_measure_began() -> None:
    items = load_items(0.5, {7: 0.0}, window=1.2344)
    assert items == [[wire.LOAD, 7, 500, 0, 1234]]
    assert all(well_formed(it) for it in items)
    loads = PeerLoads()
    loads.hear(items, now=10.0)
    assert loads.since(7, 10.0) == pytest.approx(10.0 - 1.234)
    loads.hear([[wire.LOAD, 7, 500, 0, 0]], now=20.0)  # a worker that does not say: one interval
    assert loads.since(7, 20.0) == pytest.approx(20.0 - ANNOUNCE_SECS)
    assert loads.since(7, 20.1 + ANNOUNCE_TTL_SECS) is None  # stale
    assert loads.since(99, 20.0) is None  # never heard


def test_the_meter_says_when_its_window_began_and_needs_a_long_enough_one() -> None:
    clock, secs = Clock(), [0.0]
    meter = BusyMeter(read=lambda: secs[0], clock=clock)
    start = clock.t
    clock.t += MIN_WINDOW_SECS / 2
    secs[0] += MIN_WINDOW_SECS / 2  # a few busy milliseconds right after the start
    assert meter.sample() == 0.0 and meter.since == start  # too short to tell: nothing yet
    clock.t += 1.0 - MIN_WINDOW_SECS / 2
    secs[0] += 0.5 - MIN_WINDOW_SECS / 2
    assert meter.sample() == pytest.approx(0.5) and meter.since == start  # the whole second
    clock.t += 1.5
    secs[0] += 1.5
    assert meter.sample() == 1.0 and meter.since == start + 1.0


def test_a_warming_up_meter_reports_nothing_for_its_first_windows() -> None:
    clock, secs = Clock(), [0.0]
    meter = BusyMeter(read=lambda: secs[0], clock=clock, warmup=1)
    start = clock.t
    clock.t += 1.0
    secs[0] += 1.0  # the worker starting: imports, prepare, connections
    assert meter.sample() == 0.0 and meter.since == start
    clock.t += 1.0
    secs[0] += 0.2
    assert meter.sample() == pytest.approx(0.2) and meter.since == start + 1.0


def test_load_items_are_well_formed_control_signals() -> None:
    assert control.LOAD == wire.LOAD
    items = load_items(0.5, {3: 0.0})
    assert all(well_formed(it) and wire.check_control(it) for it in items)
    signals: list[list[int]] = []
    mine: dict[int, list[list[int]]] = {}
    done: list[list[int]] = []
    remote: dict[str, list[list[int]]] = {}
    ledgers = {10: AckerLedger(30.0, 0.0)}
    assert sort_control(items, False, ledgers, {}, mine, done, signals, remote) == (0, 0)
    assert signals == items and not mine and not done and not remote


# -- an executor's shuffle fed with the worker's loads ----------------------------------------
SPOUT, LOCAL_SPLIT, REMOTE_SPLIT = 1, 9, 10
THERE = WorkerSlot("node1", 6701)


def executor(loads: PeerLoads | None) -> tuple[Any, LoadAwareShuffle]:
    inbox = Inbox(64)
    host = SimpleNamespace(remote_bp={}, data_peers=PeerQueues(64, 4096))
    ex = Executor(host, (SPOUT, SPOUT), "sentences")  # type: ignore[arg-type]
    ex.loads = loads
    chooser = LoadAwareShuffle([LOCAL_SPLIT, REMOTE_SPLIT], {LOCAL_SPLIT: WORKER_LOCAL, REMOTE_SPLIT: HOST_LOCAL},
                               random.Random(1))
    ex.load_aware = [chooser]
    ex.task_dest = {LOCAL_SPLIT: inbox, REMOTE_SPLIT: THERE}
    return ex, chooser


def test_a_busy_worker_spreads_to_the_less_busy_peer() -> None:
    loads = PeerLoads(busy_here=0.97)
    loads.hear([[wire.LOAD, REMOTE_SPLIT, 300, 0, 0]], now=0.0)
    ex, chooser = executor(loads)
    ex.refresh_load(0.0)
    assert chooser.scope == HOST_LOCAL
    loads.busy_here, loads.here_since = 0.97, 0.5
    loads.hear([[wire.LOAD, REMOTE_SPLIT, 300, 0, 1000]], now=1.5)  # measured after the widening
    ex.refresh_load(2 * LOAD_REFRESH_SECS)
    assert chooser.share(LOCAL_SPLIT) < chooser.share(REMOTE_SPLIT)


def test_an_executor_steps_again_only_on_measures_taken_after_its_last_step() -> None:
    loads = PeerLoads(busy_here=0.97, here_since=-1.0)
    loads.hear([[wire.LOAD, REMOTE_SPLIT, 300, 0, 1000]], now=0.0)  # measured over [-1, 0]
    ex, chooser = executor(loads)
    ex.refresh_load(0.0)  # widens to an even split
    assert chooser.scope == HOST_LOCAL and chooser.share(LOCAL_SPLIT) == 0.5
    ex.refresh_load(LOAD_REFRESH_SECS)  # the same measures, taken before: no step
    assert chooser.share(LOCAL_SPLIT) == 0.5
    loads.here_since = 0.2
    loads.hear([[wire.LOAD, REMOTE_SPLIT, 300, 0, 1000]], now=1.3)  # measured over [0.3, 1.3]
    ex.refresh_load(2 * LOAD_REFRESH_SECS)  # a step
    first = chooser.share(LOCAL_SPLIT)
    assert first < 0.5
    ex.refresh_load(3 * LOAD_REFRESH_SECS)  # nothing newer: no second step
    assert chooser.share(LOCAL_SPLIT) == first
    loads.here_since = 2.5
    loads.hear([[wire.LOAD, REMOTE_SPLIT, 300, 0, 1000]], now=3.6)  # measured over [2.6, 3.6]
    ex.refresh_load(4 * LOAD_REFRESH_SECS)
    assert chooser.share(LOCAL_SPLIT) < first


def test_a_peer_not_heard_from_yet_holds_the_split() -> None:
    ex, chooser = executor(PeerLoads(busy_here=0.97))
    ex.refresh_load(0.0)
    assert chooser.scope == HOST_LOCAL  # this worker's own busy fraction widens it
    assert chooser.cpu_factor == {LOCAL_SPLIT: 1.0, REMOTE_SPLIT: 1.0}


def test_an_idle_worker_keeps_tuples_local_and_queues_alone_are_storms_load() -> None:
    ex, chooser = executor(PeerLoads(busy_here=0.3))
    for i in range(5):
        ex.refresh_load(i * LOAD_REFRESH_SECS)
    assert chooser.scope == WORKER_LOCAL
    ex, chooser = executor(None)  # no worker loads: queues only
    ex.refresh_load(0.0)
    assert chooser.scope == WORKER_LOCAL


def test_a_peers_announced_inbox_fill_counts_as_its_queue_load() -> None:
    loads = PeerLoads(busy_here=0.85)
    loads.hear([[wire.LOAD, REMOTE_SPLIT, 800, 900, 0]], now=0.0)  # as busy, its inbox nearly full
    ex, chooser = executor(loads)
    ex.refresh_load(0.0)  # widened by this worker's CPU
    ex.refresh_load(LOAD_REFRESH_SECS)  # Storm's -10 for the filling inbox, twice
    assert chooser.weight == {LOCAL_SPLIT: 100, REMOTE_SPLIT: 80}


def test_with_the_cpu_side_off_a_busy_worker_keeps_storms_queue_load() -> None:
    ex, chooser = executor(PeerLoads(busy_here=0.97))
    ex.cpu_aware = False  # topology.localityaware.cpu: false
    ex.refresh_load(0.0)
    assert chooser.scope == WORKER_LOCAL
