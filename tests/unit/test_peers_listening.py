"""The spouts' start condition (squall.worker.refresh.peers_listening): every slot of the
assignment has a worker of this launch listening. After a graph upgrade a slot may still hold the
old launch's worker, which drops what it is sent."""

from __future__ import annotations

from squall.models.cluster import Endpoint, WorkerSlot
from squall.worker.refresh import peers_listening

A, B = WorkerSlot("node-a", 6700), WorkerSlot("node-b", 6700)


def ep(launch: float) -> Endpoint:
    return Endpoint(host="127.0.0.1", port=6700, launch_secs=launch)


def test_every_slot_of_this_launch_listening() -> None:
    assert peers_listening({A: ep(20.0), B: ep(20.0)}, {A, B}, 20.0)


def test_a_slot_without_a_worker_is_not_ready() -> None:
    assert not peers_listening({A: ep(20.0)}, {A, B}, 20.0)
    assert not peers_listening({}, set(), 20.0)


def test_a_slot_still_held_by_the_old_launch_is_not_ready_until_its_successor_registers() -> None:
    endpoints = {A: ep(20.0), B: ep(10.0)}  # B's worker runs the launch before the upgrade
    assert not peers_listening(endpoints, {A, B}, 20.0)
    endpoints[B] = ep(20.0)
    assert peers_listening(endpoints, {A, B}, 20.0)


def test_an_endpoint_of_an_older_worker_that_names_no_launch_counts() -> None:
    assert peers_listening({A: ep(20.0), B: Endpoint(host="127.0.0.1", port=6700)}, {A, B}, 20.0)
