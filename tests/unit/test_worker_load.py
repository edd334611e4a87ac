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
from squall.worker.load import ANNOUNCE_TTL_SECS, BusyMeter, PeerLoads, load_items, python_thread_secs
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
    ex.refresh_load(LOAD_REFRESH_SECS)
    assert chooser.weight[LOCAL_SPLIT] < chooser.weight[REMOTE_SPLIT]


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
