"""The engine loop's pure parts, on plain values: the order of a turn (`engine.step_order`) and
the steps of real, unstarted executors (`BoltExecutor.step`, `SpoutExecutor.step`) against a
worker made of plain values and real inboxes: backpressure as scheduling, the step's time
budget, nothing lost, spouts under maxSpoutPending.

The loop itself (sockets, sleeping, threads) runs in the integration tier: every topology test
there runs on it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from squall.builder import TopologyBuilder
from squall.components import Bolt, Spout
from squall.models import Topology
from squall.models.cluster import WorkerSlot
from squall.plan import CHECKPOINT_COMPONENT, TopologyPlan, build_plan
from squall.validation import declared_streams
from squall.worker.engine import step_order
from squall.worker.errorlog import ErrorThrottle
from squall.worker.bolt import BoltExecutor
from squall.worker.executor import HELD_WAIT, SPOUT_BATCH, is_isolated
from squall.worker.spout import SpoutExecutor
from squall.worker.routing import Inbox, Routing

pytestmark = pytest.mark.unit

HERE = WorkerSlot("node", 6700)


class Numbers(Spout):
    """Emits 0, 1, 2, ... with the number as its message id."""

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.n = 0
        self.acked: list[int] = []

    def next_tuple(self) -> None:
        self.collector.emit([self.n], msg_id=self.n)
        self.n += 1

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)


class Forward(Bolt):
    """Emits each input's value on, unanchored."""

    def execute(self, tup: Any) -> None:
        self.collector.emit([tup.values[0]])


class Blocks(Bolt):
    isolated = True

    def execute(self, tup: Any) -> None: ...


def chain(**build: Any) -> Topology:
    b = TopologyBuilder("chain")
    b.set_spout("s", "x:Numbers", 1, outputs=["n"])
    b.set_bolt("a", "x:Forward", 1, outputs=["n"]).shuffle_grouping("s")
    b.set_bolt("b", "x:Forward", 1, outputs=["n"]).shuffle_grouping("a")
    b.set_bolt("c", "x:Forward", 1, outputs=["n"]).shuffle_grouping("b")
    return b.build(**build)


def plan_of(topo: Topology) -> TopologyPlan:
    return build_plan(topo, {c.name: declared_streams(c) for c in topo.spec.components})


def worker(plan: TopologyPlan, inboxes: dict[str, Inbox], max_pending: int | None = None) -> Any:
    """A worker of plain values: every task of `plan` local, each component's inbox given."""
    task_dest: dict[int, Any] = {}
    for comp, tasks in plan.component_tasks.items():
        if comp in inboxes:
            for t in tasks:
                task_dest[t] = inboxes[comp]
    task_slot = {t: HERE for t in plan.task_component}
    routing = Routing(plan, frozenset(task_slot), task_dest, task_slot, {},
                      {q: tuple(plan.component_tasks[c]) for c, q in inboxes.items()}, frozenset({HERE}))
    return SimpleNamespace(
        slot=HERE, conf={}, routing=routing, active=True, error_throttle=ErrorThrottle(), remote_bp={},
        spec=SimpleNamespace(message_timeout_secs=30, max_spout_pending=max_pending),
        init_trees=lambda inits, spill: [], handle_control=lambda items, caller, trusted=True: [],
        report_error=lambda *a: None, executor_died=lambda *a: None,
    )


def bolt(w: Any, plan: TopologyPlan, comp: str, inbox: Inbox) -> BoltExecutor:
    (task,) = plan.component_tasks[comp]
    ex = BoltExecutor(w, plan, (task, task), comp, Forward, {}, None)
    ex.inbox = inbox
    ex.open()
    return ex


def batch_for(plan: TopologyPlan, comp: str, values: range) -> list[list[Any]]:
    (task,) = plan.component_tasks[comp]
    (src,) = plan.component_tasks["s"]
    return [[task, src, "default", [v], None] for v in values]


# -- the order of a turn ------------------------------------------------------------------------
def test_a_turn_steps_bolts_furthest_from_the_spouts_first_then_the_spouts() -> None:
    plan = plan_of(chain())
    execs = [SimpleNamespace(kind=k, component=c, id=(i, i)) for i, (k, c) in
             enumerate([("spout", "s"), ("bolt", "a"), ("bolt", "c"), ("bolt", "b")])]
    assert [ex.component for ex in step_order(execs, plan)] == ["c", "b", "a", "s"]  # type: ignore[arg-type]


def test_the_order_of_a_diamond_and_of_a_graph_with_a_cycle() -> None:
    subs = {
        ("s", "default"): (SimpleNamespace(component="left"), SimpleNamespace(component="right")),
        ("left", "default"): (SimpleNamespace(component="join"),),
        ("right", "default"): (SimpleNamespace(component="deep"),),
        ("deep", "default"): (SimpleNamespace(component="join"),),
    }
    plan: Any = SimpleNamespace(spouts=frozenset({"s"}), subscriptions=subs)
    execs: Any = [SimpleNamespace(kind="bolt" if c != "s" else "spout", component=c, id=(i, i))
                  for i, c in enumerate(["s", "left", "right", "deep", "join"])]
    # join is 3 hops away on its longest path (s, right, deep, join)
    assert [ex.component for ex in step_order(execs, plan)] == ["join", "deep", "left", "right", "s"]
    subs[("join", "default")] = (SimpleNamespace(component="right"),)  # a cycle back
    order = [ex.component for ex in step_order(execs, plan)]
    assert sorted(order) == sorted(ex.component for ex in execs) and order[-1] == "s"
    assert order == [ex.component for ex in step_order(list(reversed(execs)), plan)]


# -- backpressure as scheduling -----------------------------------------------------------------
def test_a_bolt_whose_output_is_held_back_takes_no_input_until_it_left() -> None:
    plan = plan_of(chain())
    a_in, b_in = Inbox(8), Inbox(1)
    w = worker(plan, {"a": a_in, "b": b_in})
    a = bolt(w, plan, "a", a_in)
    b_in.put_nowait([["full"]])  # b is full
    for lo in (0, 10, 20):
        a_in.put_nowait(batch_for(plan, "a", range(lo, lo + 10)))
    assert a.step(0.0) == 0.0  # took a batch; its output stays in its buffers
    assert a.stats.executed == 30 and a.bufs  # up to BOLT_BATCHES batches per step
    a_in.put_nowait(batch_for(plan, "a", range(30, 40)))
    assert a.step(0.0) == HELD_WAIT
    assert a.stats.executed == 30 and a_in.qsize() == 1, "a bolt with output held back took input"
    b_in.get_nowait()  # b drained its inbox
    assert a.step(0.0) == 0.0  # its output left, so it took its next batch
    assert a.stats.executed == 40
    assert [it[3][0] for it in b_in.get_nowait()] == list(range(30)), "lost or reordered"
    a.step(0.0)
    assert not a.bufs and [it[3][0] for it in b_in.get_nowait()] == list(range(30, 40))


def test_a_slow_batch_is_left_for_the_next_step_past_the_budget_with_nothing_lost() -> None:
    plan = plan_of(chain())
    a_in, b_in = Inbox(64), Inbox(64)
    w = worker(plan, {"a": a_in, "b": b_in})
    a = bolt(w, plan, "a", a_in)
    a.step_budget = a.flush_secs = -1.0  # every check finds the step over its budget
    a_in.put_nowait(batch_for(plan, "a", range(20)))
    steps = 0
    while a_in.qsize() or a.held is not None:
        assert a.step(0.0) == 0.0
        steps += 1
        assert steps < 10
    # the budget is checked every 8 tuples, never before the first: 8 + 8 + 4
    assert steps == 3
    out = []
    while b_in.qsize():
        out.extend(it[3][0] for it in b_in.get_nowait())
    assert out == list(range(20))


# -- spouts ---------------------------------------------------------------------------------------
def spout(w: Any, plan: TopologyPlan) -> SpoutExecutor:
    (task,) = plan.component_tasks["s"]
    ex = SpoutExecutor(w, plan, (task, task), "s", Numbers, {})
    ex.open()
    return ex


def test_a_spout_emits_a_batch_per_step_while_its_output_has_room() -> None:
    plan = plan_of(chain(num_ackers=0))
    a_in = Inbox(4)
    w = worker(plan, {"a": a_in})
    s = spout(w, plan)
    assert s.step(0.0) == 0.0
    assert s.stats.emitted == SPOUT_BATCH and a_in.qsize() == 1
    w.active = False
    assert s.step(0.0) == 0.1  # deactivated: nothing emitted, no hurry
    assert s.stats.emitted == SPOUT_BATCH
    w.active = True
    for _ in range(3):
        s.step(0.0)
    assert a_in.full()
    s.step(0.0)  # its output is held back: it emits no more
    held = s.stats.emitted
    assert s.step(0.0) > 0.0 and s.stats.emitted == held


def test_a_spout_stops_at_max_spout_pending_and_goes_on_as_trees_complete() -> None:
    plan = plan_of(chain(max_spout_pending=100))
    w = worker(plan, {"a": Inbox(64)}, max_pending=100)
    s = spout(w, plan)
    s.step(0.0)
    assert s.pending_count() == 100
    assert s.step(0.0) > 0.0 and s.pending_count() == 100  # nothing more until completions
    (task,) = plan.component_tasks["s"]
    roots = list(s.collectors[task].pending.pending._head)[:10]
    s.inbox.put_nowait([[0, task, r, 1, 0] for r in roots])  # ten trees completed
    s.step(0.0)
    assert s.instances[task].acked == list(range(10))
    assert s.pending_count() == 100 and s.stats.emitted > 100



def test_a_spout_not_asked_for_tuples_for_twice_the_timeout_says_why(caplog: pytest.LogCaptureFixture) -> None:
    """Its own checks (a Kafka spout's commits) run inside next_tuple: a spout whose output
    stays held would otherwise stop without a word."""
    plan = plan_of(chain(num_ackers=0))
    a_in = Inbox(1)
    w = worker(plan, {"a": a_in})
    s = spout(w, plan)
    t0 = s.now
    s.step(t0)
    s.step(t0)  # the inbox is full: this batch stays held
    assert s.bufs
    with caplog.at_level("WARNING", logger="squall.executor"):
        s.step(t0 + 59.0)  # twice the 30 s timeout not yet up
        assert not caplog.records
        s.step(t0 + 61.0)
        s.step(t0 + 62.0)  # said once per 60 s, not every step
    (said,) = [r.getMessage() for r in caplog.records]
    assert "next_tuple not called for 61s" in said and "its output is held" in said, said
    a_in.get_nowait()  # the peer takes it: asked again, and a new stall counts from then
    s.step(t0 + 63.0)  # hands the held batch on
    s.step(t0 + 63.5)
    assert s.asked_at == t0 + 63.5


class Quiet(Spout):
    """Emits nothing; counts its activations."""

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.activations = 0

    def next_tuple(self) -> None: ...

    def activate(self) -> None:
        self.activations += 1


def test_the_checkpoint_spout_runs_while_deactivated_but_not_before_its_peers_listen() -> None:
    """The checkpoint spout stays active while the topology is deactivated (a drain ends with
    everything committed), but like every spout waits for each worker of the assignment to
    listen: a round sent before is dropped and fails only after messageTimeoutSecs (on the
    real nodes nothing was committed for ~20 s after a graph upgrade). In a worker of a
    launch that an upgrade replaced, it stops."""
    b = TopologyBuilder("stateful")
    b.set_spout("s", "x:Numbers", 1, outputs=["n"])
    b.set_bolt("count", "x:Count", 1, outputs=["n"], stateful=True).shuffle_grouping("s")
    plan = plan_of(b.build())
    w = worker(plan, {})
    (task,) = plan.component_tasks[CHECKPOINT_COMPONENT]
    ex = SpoutExecutor(w, plan, (task, task), CHECKPOINT_COMPONENT, Quiet, {})
    ex.open()
    w.active, w.peers_ready, w.relaunched = False, False, False
    ex.step(0.0)
    assert not ex.active, "the checkpoint spout ran before every peer listened"
    w.peers_ready = True  # the topology is still deactivated (a drain): it runs
    ex.step(0.0)
    assert ex.active and ex.instances[task].activations == 1
    w.relaunched = True  # an upgrade launched the new graph: this worker's launch is over
    ex.step(0.0)
    assert not ex.active
    w.relaunched, w.active = False, True
    ex.step(0.0)
    assert ex.active

def test_which_components_run_on_a_thread_of_their_own() -> None:
    assert is_isolated(Blocks, {}) and not is_isolated(Forward, {})
    assert is_isolated(Forward, {"squall.executor.isolated": True})
    assert not is_isolated(Blocks, {"squall.executor.isolated": False})


def test_a_failure_of_the_loop_itself_stops_the_worker_and_closes_its_executors() -> None:
    """Not an executor's error (those are reported and the executor leaves): the loop's own. The
    worker is told (it exits to be restarted) and every executor is closed, spouts first."""
    import threading

    import zmq

    from squall.worker.engine import Engine
    from squall.worker.transport import DirectSender

    ctx = zmq.Context()
    data, control = ctx.socket(zmq.PULL), ctx.socket(zmq.PULL)
    failed: list[BaseException] = []
    closed: list[str] = []

    def data_turn(now: float) -> tuple[bool, int]:
        raise RuntimeError("a bug of ours")

    host: Any = SimpleNamespace(
        routing=None, stop_event=threading.Event(), loop_turns={}, conf={},
        control_peers=SimpleNamespace(over_hard_limit=lambda: False),
        data_turn=data_turn, loop_failed=failed.append,
        shared_sender=lambda: DirectSender(ctx, lambda s: None, lambda s: True, lambda i: None, lambda n: None),
    )
    engine = Engine(host, data, control, peer_addresses=False)
    for kind in ("bolt", "spout"):
        engine.executors.append(SimpleNamespace(  # type: ignore[arg-type]
            kind=kind, retiring=False, stop_event=threading.Event(), done=False,
            close=lambda kind=kind: closed.append(kind), flush=lambda: True))
    try:
        engine.run()
        assert [str(e) for e in failed] == ["a bug of ours"]
        assert closed == ["spout", "bolt"] and all(ex.done for ex in engine.executors)
    finally:
        engine.close()
        data.close(0)
        control.close(0)
        ctx.term()


def test_a_bolt_slow_three_times_within_the_window_leaves_the_loop_though_it_idles_between() -> None:
    """A slow bolt fed slower than it works steps quickly (nothing to do) between its slow
    steps: those do not count for it, so it still leaves the loop; slow steps spread wider than
    the window do not add up."""
    from squall.worker.engine import ISOLATE_WINDOW_SECS, too_slow

    times: list[float] = []
    for t in (100.0, 102.5, 105.0):  # every 2.5 s, quick idle steps in between
        assert not too_slow(times, t)
        times.append(t)
    assert too_slow(times, 105.0)
    spread = [100.0, 100.0 + ISOLATE_WINDOW_SECS, 100.0 + 2 * ISOLATE_WINDOW_SECS]
    kept: list[float] = []
    for t in spread:
        kept.append(t)
        assert not too_slow(kept, t)
    assert kept == spread[1:]  # the ones older than the window were dropped
