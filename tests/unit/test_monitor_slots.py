"""Which slots nimbus lets the scheduler hand out, with plain values."""

from __future__ import annotations

import pytest

from squall.models.cluster import WorkerSlot
from squall_operator import scheduler
from squall_operator.nimbus import schedulable_cluster

pytestmark = pytest.mark.unit

A, B = WorkerSlot("a", 6700), WorkerSlot("b", 6700)


def test_slots_of_a_topology_in_its_kill_wait_are_not_offered() -> None:
    cluster = schedulable_cluster({"a": [6700, 6701], "b": [6700]}, held=[A, B])
    assert cluster.all_slots() == {WorkerSlot("a", 6701)}


def test_a_new_topology_waits_while_the_only_slot_drains() -> None:
    new = scheduler.SchedulingRequest(topology_id="b", executors=((1, 1), (2, 2)), num_workers=1)
    assert scheduler.schedule([new], schedulable_cluster({"a": [6700]}, held=[A])).get("b", {}) == {}
    # once the killed topology is removed, the slot is free again
    assert set(scheduler.schedule([new], schedulable_cluster({"a": [6700]}, held=[]))["b"].values()) == {A}
