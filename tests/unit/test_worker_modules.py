"""The worker's jobs as functions of its state (squall.worker.workerstate), on plain values and
an injected clock, with no process, socket or ZooKeeper: the data port's dispatch and parking
(`receive`), the announcements that follow from it, and the hand-over of in-flight trees when
the ackers change (`hotupdate`).

The same functions run in every integration test's workers; these pin down their rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from squall import wire
from squall.acker import AckerLedger
from squall.builder import TopologyBuilder
from squall.models.cluster import WorkerSlot
from squall.plan import TopologyPlan, build_plan
from squall.state import ClusterState
from squall.validation import declared_streams
from squall.worker import hotupdate, receive
from squall.worker.routing import Inbox, Routing
from squall.worker.workerstate import WorkerState

pytestmark = pytest.mark.unit

HERE = WorkerSlot("node-a", 6700)
PEER = WorkerSlot("node-b", 6700)


def plan_of(num_ackers: int = 1) -> TopologyPlan:
    b = TopologyBuilder("t")
    b.set_spout("s", "x:S", 1, outputs=["n"])
    b.set_bolt("a", "x:A", 1, outputs=["n"]).shuffle_grouping("s")
    b.set_bolt("b", "x:B", 1, outputs=["n"]).shuffle_grouping("a")
    topo = b.build(num_ackers=num_ackers)
    return build_plan(topo, {c.name: declared_streams(c) for c in topo.spec.components})


@pytest.fixture
def w() -> Iterator[WorkerState]:
    # the functions under test never reach ZooKeeper: no cluster state is given
    state = WorkerState(cast(ClusterState, None), "t", HERE)
    yield state
    state.zmq.term()


def route(w: WorkerState, plan: TopologyPlan, inbox: Inbox) -> tuple[int, int]:
    """Bolt `a` local with `inbox`, bolt `b` on PEER. Returns their tasks."""
    (a,) = plan.component_tasks["a"]
    (b,) = plan.component_tasks["b"]
    task_slot = {t: HERE for t in plan.task_component}
    task_slot[b] = PEER
    w.routing = Routing(plan, frozenset(t for t, s in task_slot.items() if s == HERE), {a: inbox, b: PEER},
                        task_slot, {}, {inbox: (a,)}, frozenset({HERE, PEER}))
    return a, b


def tup(task: int, v: Any) -> list[Any]:
    return [task, 1, "default", [v], {}]


def signals(w: WorkerState, kind: int) -> list[list[int]]:
    """What the control transfer would send PEER, of one kind."""
    return [it for batch in w.control_peers.queues.get(PEER, ()) for it in batch if it[0] == kind]


def test_a_full_inbox_parks_batches_in_order_announces_backpressure_and_counts_its_time(w: WorkerState) -> None:
    plan = plan_of()
    inbox = Inbox(2)
    a, _ = route(w, plan, inbox)
    assert receive.data_turn(w, 100.0) == (True, 100)  # nothing parked: the loop may sleep long
    for v in range(4):
        receive.dispatch_data(w, [tup(a, v)])
    assert inbox.qsize() == 2  # the other two wait, in order, for room
    assert receive.data_turn(w, 100.0) == (True, 1)
    assert signals(w, wire.BACKPRESSURE) == [[wire.BACKPRESSURE, a, 1, 0, 0]]
    assert [inbox.get_nowait()[0][3] for _ in range(2)] == [[0], [1]]
    assert receive.data_turn(w, 100.5) == (True, 100)  # room again: both moved in
    assert [inbox.get_nowait()[0][3] for _ in range(2)] == [[2], [3]]
    assert w.bp_secs == {a: 0.5}
    assert signals(w, wire.BACKPRESSURE)[-1] == [wire.BACKPRESSURE, a, 0, 0, 0]


def test_a_tuple_for_a_task_that_moved_is_forwarded_and_garbage_is_counted_not_kept(w: WorkerState) -> None:
    plan = plan_of()
    inbox = Inbox(4)
    a, b = route(w, plan, inbox)
    receive.dispatch_data(w, [tup(b, "on"), "garbage", tup(a, "here"), [b, 1, "default"]])
    assert [it for batch in w.data_peers.queues[PEER] for it in batch] == [tup(b, "on")]
    assert inbox.get_nowait() == [tup(a, "here")]
    assert w.bad_frames == 1  # one malformed frame reported, with 2 bad items in it


def test_more_ackers_hand_the_trees_that_change_acker_to_their_new_one(w: WorkerState) -> None:
    plan = plan_of(num_ackers=1)
    (acker,) = plan.acker_tasks
    w.routing = Routing(plan, frozenset(plan.task_component), {}, {t: HERE for t in plan.task_component}, {})
    led = w.ledgers[acker] = AckerLedger(30.0, 0.0)
    led.init_new([(10, 7, 1), (11, 9, 1)], [])
    new_acker = acker + 100  # on another worker
    out = hotupdate.rehome_trees(w, (acker, new_acker), frozenset({acker}))
    assert out == [[wire.INIT, new_acker, 11, 9, 1]]  # 11 % 2 names the new acker; 10 stays
    assert len(led) == 1 and acker in w.ledgers


def test_an_acker_task_that_leaves_the_worker_hands_on_every_tree_and_its_ledger_goes(w: WorkerState) -> None:
    plan = plan_of(num_ackers=1)
    (acker,) = plan.acker_tasks
    w.routing = Routing(plan, frozenset(plan.task_component), {}, {t: HERE for t in plan.task_component}, {})
    w.ledgers[acker] = led = AckerLedger(30.0, 0.0)
    led.init_new([(12, 5, 1)], [])
    led.apply([[wire.ACK, acker, 14, 6, 0]], [])  # a tree only acks have reached so far
    out = hotupdate.rehome_trees(w, (acker,), frozenset())  # the task now lives on another worker
    assert sorted(out) == [[wire.INIT, acker, 12, 5, 1], [wire.ACK, acker, 14, 6, 0]]
    assert acker not in w.ledgers
