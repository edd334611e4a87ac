"""The load signal a real (unstarted) executor feeds its load-aware shuffles, on plain values.

A target in this worker is as loaded as its executor's inbox is full; one in another worker is
1.0 while that worker announces it backpressured, else the share of the executor's sends to that
worker that met its socket's high-water mark. The executor re-weighs at most once per LOAD_REFRESH_SECS of the clock it is given, and
logs every change of scope (the routing shares a benchmark reads next to its rates)."""

from __future__ import annotations

import logging
import random
from types import SimpleNamespace
from typing import Any

import pytest
import zmq

from squall.groupings import HOST_LOCAL, WORKER_LOCAL, LoadAwareShuffle
from squall.models.cluster import WorkerSlot
from squall.worker.executor import LOAD_REFRESH_SECS, Executor
from squall.worker.routing import Inbox
from squall.worker.transport import DirectSender

pytestmark = pytest.mark.unit

SPOUT, LOCAL_SPLIT, REMOTE_SPLIT = 1, 9, 10
HERE, THERE = WorkerSlot("node1", 6700), WorkerSlot("node1", 6701)


def executor() -> tuple[Any, LoadAwareShuffle, Inbox]:
    inbox = Inbox(64)
    host = SimpleNamespace(remote_bp={})
    ex = Executor(host, (SPOUT, SPOUT), "sentences")  # type: ignore[arg-type]
    chooser = LoadAwareShuffle([LOCAL_SPLIT, REMOTE_SPLIT], {LOCAL_SPLIT: WORKER_LOCAL, REMOTE_SPLIT: HOST_LOCAL},
                               random.Random(1))
    ex.load_aware = [chooser]
    ex.task_dest = {LOCAL_SPLIT: inbox, REMOTE_SPLIT: THERE}
    return ex, chooser, inbox


def shares(chooser: LoadAwareShuffle) -> float:
    return sum(chooser([]) == [LOCAL_SPLIT] for _ in range(1000)) / 1000


def test_idle_targets_keep_every_tuple_in_the_worker() -> None:
    ex, chooser, _inbox = executor()
    ex.refresh_load(0.0)
    assert chooser.scope == WORKER_LOCAL and shares(chooser) == 1.0


def test_a_full_local_inbox_widens_once_per_refresh_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    ex, chooser, inbox = executor()
    for _ in range(60):
        inbox.put([])
    with caplog.at_level(logging.INFO, logger="squall.executor"):
        ex.refresh_load(0.0)
    assert chooser.scope == HOST_LOCAL
    assert 0.0 < shares(chooser) < 1.0
    assert "scope worker-local -> host-local" in caplog.text and "9: 0.94" in caplog.text
    # drained, but within the refresh period nothing is re-weighed
    while not inbox.empty():
        inbox.get()
    ex.refresh_load(LOAD_REFRESH_SECS / 2)
    assert chooser.scope == HOST_LOCAL
    ex.refresh_load(LOAD_REFRESH_SECS)
    assert chooser.scope == WORKER_LOCAL and shares(chooser) == 1.0


def test_a_backpressured_remote_target_counts_as_full() -> None:
    ex, chooser, inbox = executor()
    for _ in range(60):
        inbox.put([])
    ex.worker.remote_bp[REMOTE_SPLIT] = 5.0  # announced until t=5
    ex.refresh_load(0.0)
    assert chooser.scope == HOST_LOCAL
    # both loaded: the average stays above the higher bound, so the scope widens again
    ex.refresh_load(LOAD_REFRESH_SECS)
    assert chooser.scope > HOST_LOCAL


def test_a_remote_target_whose_socket_takes_nothing_counts_as_full() -> None:
    """The executor's own sender to that worker met its high-water mark (here: the worker has
    no address yet, which the sender treats alike) on every send since the last refresh."""
    ex, chooser, inbox = executor()
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        addresses: dict[WorkerSlot, str] = {}
        ex.direct_data = DirectSender(ctx, addresses.get, lambda slot: True, lambda items: b"", lambda n: None)
        for _ in range(60):
            inbox.put([])
        assert not ex.direct_data.send(THERE, [[REMOTE_SPLIT, SPOUT, "default", ["a"], None]])
        ex.refresh_load(0.0)
        assert chooser.scope == HOST_LOCAL
        assert not ex.direct_data.send(THERE, [[REMOTE_SPLIT, SPOUT, "default", ["a"], None]])
        ex.refresh_load(LOAD_REFRESH_SECS)
        assert chooser.scope > HOST_LOCAL  # both loaded: widened again, as a backpressured one
        ex.direct_data.close()
    finally:
        ctx.term()
