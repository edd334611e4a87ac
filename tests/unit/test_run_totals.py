"""`squall run`'s totals survive worker replacement and executor moves."""

from __future__ import annotations

import pytest

from squall.models.cluster import ExecutorStats, WorkerHeartbeat, WorkerSlot
from squall_operator.totals import Totals

pytestmark = pytest.mark.unit

A, B = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)


def beat(uptime: float, **executors: int) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        time_secs=0.0, uptime_secs=uptime,
        executors={k.replace("_", "-"): ExecutorStats(component="s", acked=n, emitted=n) for k, n in executors.items()},
    )


def acked(totals: Totals) -> int:
    return sum(ex.acked for ex, _ in totals.executor_stats())


def test_a_worker_replaced_on_its_slot_keeps_the_old_counts() -> None:
    t = Totals()
    t.update({A: beat(10, e1_1=100)})
    t.update({A: beat(20, e1_1=250)})
    assert acked(t) == 250
    t.update({A: beat(1, e1_1=5)})  # a new worker process on the same slot
    assert acked(t) == 255
    t.update({A: beat(2, e1_1=40)})
    assert acked(t) == 290
    # even if the new one got past the old counts before the first read of it
    t.update({A: beat(0.5, e1_1=400)})
    assert acked(t) == 250 + 40 + 400


def test_a_moved_executor_keeps_its_counts_from_the_old_slot() -> None:
    t = Totals()
    t.update({A: beat(10, e1_1=100)})
    t.update({A: beat(11), B: beat(3, e1_1=7)})  # moved to B; A's worker no longer has it
    assert acked(t) == 107
    running = [ex for ex, now in t.executor_stats() if now]
    assert [ex.acked for ex in running] == [7]
    t.update({B: beat(4, e1_1=9)})  # A's heartbeat node is gone
    assert acked(t) == 109
