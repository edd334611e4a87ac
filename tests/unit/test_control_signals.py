"""Backpressure signals from the network without CURVE (`acking.handle_control` with `peer`):
applied when a worker of the assignment runs on the sender's host, refused and counted when
none does, and, while some worker of the assignment has no endpoint known yet (at start, after
a rebalance), neither applied nor counted as a stranger's: the sender may be that worker."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from squall import wire
from squall.builder import TopologyBuilder
from squall.models.cluster import Endpoint, WorkerSlot
from squall.plan import build_plan
from squall.validation import declared_streams
from squall.worker.acking import handle_control
from squall.worker.routing import Routing

pytestmark = pytest.mark.unit

HERE, THERE = WorkerSlot("node1", 6700), WorkerSlot("node2", 6700)


def state(endpoints: dict[WorkerSlot, Endpoint]) -> Any:
    b = TopologyBuilder("two")
    b.set_spout("s", "x:S", 1, outputs=["n"])
    b.set_bolt("a", "x:B", 1, outputs=["n"]).shuffle_grouping("s")
    topo = b.build()
    plan = build_plan(topo, {c.name: declared_streams(c) for c in topo.spec.components})
    (s,), (a,) = plan.component_tasks["s"], plan.component_tasks["a"]
    task_slot = {s: HERE, a: THERE}
    routing = Routing(plan, frozenset({s}), {a: THERE}, task_slot, {}, {}, frozenset({HERE, THERE}))
    return SimpleNamespace(
        routing=routing, ledgers={}, endpoints=endpoints, peer_hosts=frozenset(), peer_hosts_of=(None, None),
        refused_signals=0, unjudged_signals=0, remote_bp={}, dropped=0, slot=HERE, acker_lock=threading.Lock(),
        bolt_task=a)


def signal(w: Any) -> list[list[int]]:
    return [[wire.BACKPRESSURE, w.bolt_task, 1, 0, 0]]


def test_a_signal_is_applied_from_a_peer_refused_from_a_stranger_and_unjudged_before_the_peers_are_known() -> None:
    here = Endpoint(host="127.0.0.1", port=6700)
    w = state({HERE: here})  # node2's worker not read yet
    handle_control(w, signal(w), None, trusted=False, peer="127.0.0.2")
    assert (w.unjudged_signals, w.refused_signals, w.remote_bp) == (1, 0, {})  # not applied, not a stranger yet
    w.endpoints = {HERE: here, THERE: Endpoint(host="127.0.0.2", port=6700)}
    handle_control(w, signal(w), None, trusted=False, peer="127.0.0.2")
    assert list(w.remote_bp) == [w.bolt_task] and w.refused_signals == 0  # the peer's: applied
    w.remote_bp.clear()
    handle_control(w, signal(w), None, trusted=False, peer="127.0.0.9")
    assert (w.refused_signals, w.unjudged_signals, w.remote_bp) == (1, 1, {})  # a stranger's: refused
