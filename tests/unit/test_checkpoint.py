"""squall.checkpoint: Storm's checkpoint protocol as pure logic (the coordinator on an injected
clock, a bolt's barrier alignment and deferred acks with plain values), the plan's wiring of the
checkpoint spout, the validation of stateful components, and the in-memory state provider."""

from __future__ import annotations

from typing import Any

import pytest

from squall.builder import TopologyBuilder
from squall.checkpoint import (
    Action,
    BoltHarness,
    CheckPointState,
    Coordinator,
    SpoutHarness,
    TxState,
    wrap,
)
from squall.components import Tuple
from squall.errors import TopologyError
from squall.models import Grouping
from squall.plan import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, build_plan
from squall.statebackend import MemoryProvider, StateBackendError, config_problems, open_provider
from squall.validation import check_topology, declared_streams

from fixtures_stateful import CountWords, Lines, Split

pytestmark = pytest.mark.unit
FX = "fixtures_stateful"

C, P, R, I = Action.COMMIT, Action.PREPARE, Action.ROLLBACK, Action.INITSTATE  # noqa: E741


# -- Storm's CheckPointState ------------------------------------------------------------------
def test_checkpoint_state_transitions_are_storms() -> None:
    committed = CheckPointState(4, TxState.COMMITTED)
    preparing = CheckPointState(5, TxState.PREPARING)
    committing = CheckPointState(5, TxState.COMMITTING)
    assert committed.next_state(False) == preparing and committed.next_action(False) is P
    assert preparing.next_state(False) == committing and preparing.next_action(False) is P
    assert committing.next_state(False) == CheckPointState(5, TxState.COMMITTED)
    assert committing.next_action(False) is C and committing.next_action(True) is C
    # recovery: a PREPARING transaction rolls back, a COMMITTING one rolls forward
    assert preparing.next_action(True) is R and preparing.next_state(True) == committed
    assert committed.next_action(True) is I and committed.next_state(True) == committed


# -- the coordinator ----------------------------------------------------------------------------
def coordinator(tx: CheckPointState, saved: list[CheckPointState]) -> Coordinator:
    return Coordinator(tx, 1.0, saved.append, first_attempt=100)


def test_coordinator_starts_with_rollback_and_initstate_then_checkpoints_every_interval() -> None:
    saved: list[CheckPointState] = []
    co = coordinator(CheckPointState(-1, TxState.COMMITTED), saved)
    assert co.poll(0.0) == (-1, R, 100)
    assert co.poll(0.0) is None  # one step at a time
    co.ack(100)
    assert co.poll(0.1) == (-1, I, 101)
    co.ack(101)
    assert not co.recovering
    assert co.poll(0.2) == (0, P, 102)
    assert saved == [CheckPointState(0, TxState.PREPARING)]
    co.ack(102)
    assert co.poll(0.3) == (0, C, 103)  # a prepared transaction commits at once
    co.ack(103)
    assert saved[-1] == CheckPointState(0, TxState.COMMITTED)
    assert co.poll(0.5) is None and co.poll(1.19) is None  # the interval counts from PREPARE
    assert co.poll(1.21) == (1, P, 104)


def test_a_failed_prepare_rolls_back_everywhere_then_goes_on() -> None:
    saved: list[CheckPointState] = []
    co = coordinator(CheckPointState(3, TxState.COMMITTED), saved)
    co.recovering = False
    assert co.poll(5.0) == (4, P, 100)
    co.fail(100)
    assert co.poll(5.1) == (4, R, 101)
    co.ack(101)
    assert co.tx == CheckPointState(3, TxState.COMMITTED)
    assert co.poll(5.2) == (3, I, 102)
    co.ack(102)
    assert co.poll(5.3) is None  # 4's PREPARE at 5.0 started the interval
    assert co.poll(6.1) == (4, P, 103)


def test_restart_while_committing_rolls_forward_then_rolls_back_to_it() -> None:
    saved: list[CheckPointState] = []
    co = coordinator(CheckPointState(7, TxState.COMMITTING), saved)
    assert co.poll(0) == (7, C, 100)
    co.ack(100)
    assert co.poll(0) == (7, R, 101)
    co.ack(101)
    assert co.poll(0) == (7, I, 102)
    co.ack(102)
    assert not co.recovering and saved == [CheckPointState(7, TxState.COMMITTED)]


def test_a_failed_recovery_step_is_retried_with_a_new_attempt_and_late_answers_are_ignored() -> None:
    co = coordinator(CheckPointState(2, TxState.COMMITTED), [])
    assert co.poll(0) == (2, R, 100)
    co.fail(100)
    assert co.poll(0) == (2, R, 101)
    co.ack(100)  # the first attempt's late ack: ignored
    assert co.in_progress == 101
    co.ack(101)
    assert co.poll(0) == (2, I, 102)


# -- a bolt's harness: alignment, deferred acks, rollback --------------------------------------
class Recorder:
    """The collector the harness is given: records what it does."""

    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], str]] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> list[int]:
        self.emitted.append((list(values), stream))
        return []

    def emit_direct(self, task: int, values: Any, stream: str = "default", anchors: Any = None) -> None:
        self.emitted.append((list(values), stream))

    def ack(self, tup: Tuple) -> None:
        self.acked.append(tup)

    def fail(self, tup: Tuple) -> None:
        self.failed.append(tup)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


class Ctx:
    component_id = "count"
    task_id = 9

    def __init__(self, tasks: dict[str, list[int]]) -> None:
        self.tasks = {"count": [9], **tasks}  # task 9 is count's first: its state is count#0

    def component_tasks(self, component: str) -> list[int]:
        return self.tasks.get(component, [])


def data(src: int, word: str) -> Tuple:
    return Tuple([word], src, "split", "default", {"word": 0}, None)


def barrier(src: int, action: Action, txid: int, attempt: int) -> Tuple:
    return Tuple([txid, action.value, attempt], src, "split", CHECKPOINT_STREAM,
                 {"txid": 0, "action": 1, "attempt": 2}, None)


def harness(inner: type, provider: MemoryProvider) -> tuple[BoltHarness, Recorder]:
    cls = type("H", (BoltHarness,), {"inner": inner})
    h = cls()
    rec = Recorder()
    h.prepare({"squall.checkpoint.sources": ["split"]}, Ctx({"split": [1, 2]}), rec, provider=provider)  # type: ignore[arg-type]
    return h, rec


def checkpoints(rec: Recorder) -> list[tuple[Any, ...]]:
    return [tuple(v) for v, s in rec.emitted if s == CHECKPOINT_STREAM]


def test_state_waits_for_init_and_acks_wait_for_the_commit() -> None:
    provider = MemoryProvider()
    h, rec = harness(CountWords, provider)
    early = data(1, "a")
    h.execute(early)  # before the state is initialized: held (Storm's pendingTuples)
    assert rec.emitted == []
    for src in (1, 2):
        h.execute(barrier(src, I, -1, 5))
    assert checkpoints(rec) == [(-1, "INITSTATE", 5)]  # once both inputs sent it: forwarded
    assert h.bolt.state.get("a") == 1  # the early tuple ran after init
    h.execute(data(2, "a"))
    assert h.bolt.state.get("a") == 2
    assert early not in rec.acked  # the bolt acked, the harness holds the ack
    for src in (1, 2):
        h.execute(barrier(src, P, 0, 6))
    assert early not in rec.acked
    assert dict(provider.state("count#0")) == {}  # prepared, not committed
    for src in (1, 2):
        h.execute(barrier(src, C, 0, 7))
    assert early in rec.acked
    assert dict(provider.state("count#0")) == {"a": 2}
    assert checkpoints(rec)[-1] == (0, "COMMIT", 7)


def test_alignment_holds_an_input_after_its_barrier_so_the_cut_is_consistent() -> None:
    provider = MemoryProvider()
    h, rec = harness(CountWords, provider)
    for src in (1, 2):
        h.execute(barrier(src, R, -1, 1))
    h.execute(data(1, "x"))
    h.execute(barrier(1, P, 0, 2))
    after = data(1, "x")
    h.execute(after)  # input 1 is past txid 0's barrier: held
    h.execute(data(2, "x"))  # input 2 is not: processed, part of txid 0
    assert h.bolt.state.get("x") == 2
    assert (0, "PREPARE", 2) not in checkpoints(rec)
    h.execute(barrier(2, P, 0, 2))
    assert (0, "PREPARE", 2) in checkpoints(rec)
    assert h.bolt.state.get("x") == 3  # the held tuple ran after the prepare
    for src in (1, 2):
        h.execute(barrier(src, C, 0, 3))
    assert dict(provider.state("count#0")) == {"x": 2}  # exactly the tuples before the cut


def test_tuples_waiting_for_init_are_dropped_by_a_rollback() -> None:
    h, rec = harness(CountWords, MemoryProvider())
    early = data(1, "a")
    h.execute(early)
    for src in (1, 2):
        h.execute(barrier(src, R, -1, 5))
    assert early in rec.failed  # sent before the spouts rewound: they emit it again
    assert h.initialized and h.bolt.state.get("a") is None


def test_rollback_drops_tuples_sent_before_it_and_fails_unacked_work() -> None:
    provider = MemoryProvider()
    h, rec = harness(CountWords, provider)
    for src in (1, 2):
        h.execute(barrier(src, R, -1, 1))
    for src in (1, 2):
        h.execute(barrier(src, P, 0, 2))
    for src in (1, 2):
        h.execute(barrier(src, C, 0, 3))
    counted = data(1, "y")
    h.execute(counted)
    assert h.bolt.state.get("y") == 1
    h.execute(barrier(1, R, 0, 4))
    assert counted in rec.failed  # its ack waited for a commit that will not come
    assert h.bolt.state.get("y") is None  # back to the commit
    new = data(1, "y")
    h.execute(new)  # after input 1's ROLLBACK: held until input 2's
    old = data(2, "y")
    h.execute(old)  # before input 2's ROLLBACK: sent before its spout rewound
    assert old in rec.failed
    h.execute(barrier(2, R, 0, 4))
    assert h.bolt.state.get("y") == 1  # only the tuple after the rollback
    assert checkpoints(rec)[-1] == (0, "ROLLBACK", 4)


def test_a_new_rollback_attempt_aborts_an_unfinished_round() -> None:
    provider = MemoryProvider()
    h, rec = harness(CountWords, provider)
    h.execute(barrier(1, R, -1, 1))
    held = data(1, "z")
    h.execute(held)
    h.execute(barrier(2, R, -1, 9))  # attempt 1 never came from input 2; attempt 9 did
    assert held in rec.failed
    h.execute(barrier(1, R, -1, 9))
    assert checkpoints(rec) == [(-1, "ROLLBACK", 9)]
    assert h.initialized


def test_prepare_before_init_fails_so_the_checkpoint_spout_recovers() -> None:
    h, rec = harness(CountWords, MemoryProvider())
    b1, b2 = barrier(1, P, 3, 1), barrier(2, P, 3, 1)
    h.execute(b1)
    h.execute(b2)
    assert b2 in rec.failed and checkpoints(rec) == []


def test_a_plain_bolt_forwards_checkpoints() -> None:
    h, rec = harness(Split, MemoryProvider())
    h.execute(Tuple(["a b"], 1, "s", "default", {"sentence": 0}, None))
    assert rec.emitted == [(["a"], "default"), (["b"], "default")]
    for src in (1, 2):
        h.execute(barrier(src, I, 0, 1))
    assert checkpoints(rec) == [(0, "INITSTATE", 1)]


def test_a_stateful_spout_rewinds_on_rollback() -> None:
    class Counter(Lines):
        def init_state(self, state: Any) -> None:
            super().init_state(state)
            self.offset = state.get("offset", 0)

        def next_tuple(self) -> None:
            self.offset += 1
            self.state.put("offset", self.offset)

    provider = MemoryProvider()
    cls = type("S", (SpoutHarness,), {"inner": Counter})
    s = cls()
    s.open({}, Ctx({}), Recorder(), state=provider.state("lines-1"))  # type: ignore[arg-type]
    rec = Recorder()
    s.next_tuple()
    assert not hasattr(s.spout, "offset")  # no next_tuple before the state is there
    s.receive(barrier(0, R, -1, 1), rec)  # type: ignore[arg-type]
    for _ in range(3):
        s.next_tuple()
    s.receive(barrier(0, P, 0, 2), rec)  # type: ignore[arg-type]
    s.receive(barrier(0, C, 0, 3), rec)  # type: ignore[arg-type]
    s.next_tuple()
    assert s.spout.offset == 4
    s.receive(barrier(0, R, 0, 4), rec)  # type: ignore[arg-type]
    assert s.spout.offset == 3  # the committed position
    assert [v for v, _ in rec.emitted] == [[-1, "ROLLBACK", 1], [0, "PREPARE", 2], [0, "COMMIT", 3],
                                           [0, "ROLLBACK", 4]]


# -- the plan ---------------------------------------------------------------------------------
def stateful_wordcount(stateful_spout: bool = False, **build: Any) -> Any:
    b = TopologyBuilder("swc")
    b.set_spout("lines", f"{FX}:Lines", 2, outputs=["sentence"], stateful=stateful_spout)
    b.set_bolt("split", f"{FX}:Split", 2, outputs=["word"]).shuffle_grouping("lines")
    b.set_bolt("count", CountWords, 3).fields_grouping("split", ["word"])
    return b.build(**build)


def test_plan_adds_the_checkpoint_spout_and_wires_every_bolt() -> None:
    topo = stateful_wordcount()
    assert [c.stateful for c in topo.spec.components] == [False, False, True]
    plan = build_plan(topo, {c.name: declared_streams(c) for c in topo.spec.components})
    assert plan.component_tasks[CHECKPOINT_COMPONENT] == (1,)
    assert CHECKPOINT_COMPONENT in plan.spouts
    assert plan.checkpoint_sources("split") == (CHECKPOINT_COMPONENT,)  # a plain spout's stand-in
    assert plan.checkpoint_sources("count") == ("split",)
    (sub,) = plan.subscriptions[(CHECKPOINT_COMPONENT, CHECKPOINT_STREAM)]
    assert sub.component == "split" and sub.grouping is Grouping.ALL
    assert plan.streams["count"][CHECKPOINT_STREAM].fields == ["txid", "action", "attempt"]
    # the spout's trees are acked: the checkpoint spout talks to the ackers like any spout
    assert any(s.component == CHECKPOINT_COMPONENT for s in plan.subscriptions[("__acker", "__ack_ack")])


def test_a_stateful_spout_receives_the_checkpoint_and_stands_for_itself() -> None:
    topo = stateful_wordcount(stateful_spout=True)
    plan = build_plan(topo, {c.name: declared_streams(c) for c in topo.spec.components})
    assert plan.checkpoint_sources("lines") == (CHECKPOINT_COMPONENT,)
    assert plan.checkpoint_sources("split") == ("lines",)
    cls, conf = wrap(Lines, "lines", plan, {}, spout=True)
    assert issubclass(cls, SpoutHarness) and conf["squall.checkpoint.sources"] == [CHECKPOINT_COMPONENT]


def test_a_topology_without_stateful_components_has_no_checkpoint_spout() -> None:
    b = TopologyBuilder("plain")
    b.set_spout("lines", f"{FX}:Lines", 1, outputs=["sentence"], stateful=False)
    b.set_bolt("split", f"{FX}:Split", 1).shuffle_grouping("lines")
    plan = build_plan(b.build(), {})
    assert not plan.checkpointing and CHECKPOINT_COMPONENT not in plan.component_tasks
    assert (CHECKPOINT_COMPONENT, CHECKPOINT_STREAM) not in plan.subscriptions


# -- validation -------------------------------------------------------------------------------
def test_validation_names_a_stateful_flag_that_disagrees_with_the_class() -> None:
    b = TopologyBuilder("bad")
    b.set_spout("lines", f"{FX}:Lines", 1)  # a StatefulSpout not declared stateful
    b.set_bolt("split", f"{FX}:NotStateful", 1, stateful=True).shuffle_grouping("lines")
    with pytest.raises(TopologyError) as got:
        check_topology(b.build(num_ackers=0), resolve_classes=True)
    text = str(got.value)
    assert "spec.spouts[0].stateful" in text and "declare the component `stateful: true`" in text
    assert "spec.bolts[0].stateful" in text and "not a StatefulBolt" in text
    assert "spec.numAckers" in text


def test_validation_names_an_unknown_state_provider() -> None:
    topo = stateful_wordcount(config={"topology.state.provider": "cassandra",
                                      "topology.state.checkpoint.interval.ms": 0})
    with pytest.raises(TopologyError) as got:
        check_topology(topo, resolve_classes=True)
    assert "spec.config['topology.state.provider']: 'cassandra'" in str(got.value)
    assert "unknown state provider" in str(got.value)


def test_provider_config_problems() -> None:
    assert config_problems({}) == []
    assert config_problems({"topology.state.provider": "redis",
                            "topology.state.provider.config": {"host": "r", "port": 6379}}) == []
    got = config_problems({"topology.state.provider": "redis",
                           "topology.state.provider.config": {"hots": "r", "port": "6379"}})
    assert [k for k, _ in got] == ["topology.state.provider.config.hots", "topology.state.provider.config.port"]
    assert config_problems({"topology.state.checkpoint.interval.ms": -1})[0][0] == \
        "topology.state.checkpoint.interval.ms"
    with pytest.raises(StateBackendError, match="unknown state provider 'nope'"):
        open_provider({"topology.state.provider": "nope"})


# -- the in-memory provider -------------------------------------------------------------------
def test_memory_state_transactions() -> None:
    provider = MemoryProvider()
    s = provider.state("c-1")
    s.put("a", 1)
    s.put(("t", 1), [1])
    s.prepare_commit(0)
    s.put("b", 2)
    s.prepare_commit(0)  # the same txid again: its changes grow
    with pytest.raises(StateBackendError, match="txid 0 is prepared"):
        s.prepare_commit(1)
    s.commit(0)
    s.commit(0)  # rolled forward twice: a no-op
    assert dict(provider.state("c-1")) == {"a": 1, ("t", 1): [1], "b": 2}
    assert s.delete("a") == 1 and "a" not in s
    s.put("c", 3)
    s.rollback()
    assert dict(s) == {"a": 1, ("t", 1): [1], "b": 2} and len(s) == 3
    assert sorted(map(str, s.keys())) == ["('t', 1)", "a", "b"]
    with pytest.raises(TypeError, match="hashable"):
        s.put(["list"], 1)


def test_windowed_bolts_run_beside_stateful_components_and_stateful_ones_say_so() -> None:
    b = TopologyBuilder("mixed")
    b.set_spout("lines", f"{FX}:Lines", 1, outputs=["sentence"], stateful=True)
    b.set_bolt("win", "fixtures_windowing:WindowCount", 1).with_window(10).shuffle_grouping("lines")
    b.set_bolt("sums", f"{FX}:Sums", 1, stateful=False).with_window(3).shuffle_grouping("lines")
    with pytest.raises(TopologyError) as got:
        check_topology(b.build(), resolve_classes=True)
    assert [p.path for p in got.value.problems] == ["spec.bolts[1].stateful"]
    assert "Sums is a StatefulWindowedBolt" in str(got.value)


def window_tuple(i: int) -> Tuple:
    return Tuple([i], 1, "ids", "default", {"id": 0}, {100 + i: 7})


def windowed_harness(provider: MemoryProvider) -> tuple[BoltHarness, Recorder]:
    from fixtures_stateful import Sums

    cls = type("W", (BoltHarness,), {"inner": Sums})
    h = cls()
    rec = Recorder()
    conf = {"squall.checkpoint.sources": ["ids"], "squall.checkpoint.window": {"windowLength": 3},
            "squall.checkpoint.window.inputs": [["ids", "default"]]}
    h.prepare(conf, Ctx({"ids": [1]}), rec, provider=provider)  # type: ignore[arg-type]
    return h, rec


def test_window_contents_are_checkpointed_and_survive_a_restart() -> None:
    provider = MemoryProvider()
    h, rec = windowed_harness(provider)
    h.execute(barrier(1, R, -1, 1))
    for i in range(5):  # window [0, 1, 2] fires; 3 and 4 wait
        h.execute(window_tuple(i))
    h.execute(barrier(1, P, 0, 2))
    h.execute(barrier(1, C, 0, 3))
    assert dict(provider.state("count#0")) == {0: 3}
    h.execute(window_tuple(5))  # [3, 4, 5] fires, not committed
    assert h.bolt.state.get(3) == 12
    # the worker dies; a new one restores the state and the windows of txid 0
    h2, rec2 = windowed_harness(provider)
    h2.execute(barrier(1, R, 0, 4))
    assert h2.bolt.state.get(3) is None
    # the windows as committed: [0, 1, 2] (fired, expiring at the next window) and 3, 4 waiting
    m = h2.runner.manager  # type: ignore[union-attr]
    assert [t.values[0] for t in m.items] == [0, 1, 2, 3, 4] and m._seen == 3
    h2.execute(window_tuple(5))  # replayed by the spout after its rollback
    assert h2.bolt.state.get(3) == 12
    # the restored tuples have no tree: the window's emit is unanchored, nothing waits on them
    assert rec2.emitted[-1] == ([3, 12], "default")


def test_a_rollback_restores_the_windows_in_place() -> None:
    provider = MemoryProvider()
    h, rec = windowed_harness(provider)
    h.execute(barrier(1, R, -1, 1))
    h.execute(window_tuple(0))
    h.execute(barrier(1, P, 0, 2))
    h.execute(barrier(1, C, 0, 3))
    late = window_tuple(1)
    h.execute(late)
    h.execute(barrier(1, R, 0, 4))
    assert late in rec.failed  # its tree is failed: the spout re-emits it
    assert [t.values for t in h.runner.manager.items] == [[0]]  # type: ignore[union-attr]


def test_a_basic_bolt_inside_the_harness_anchors_and_acks_its_input() -> None:
    from squall import BasicBolt, FailedException

    class Upper(BasicBolt):
        outputs = ["w"]

        def process(self, tup: Tuple) -> None:
            if tup.values[0] == "bad":
                raise FailedException()
            self.collector.emit([tup.values[0].upper()])

    class AnchorRecorder(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.anchors: list[Any] = []

        def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> list[int]:
            self.anchors.append(anchors)
            return super().emit(values, stream, anchors)

    cls = type("H", (BoltHarness,), {"inner": Upper})
    h = cls()
    rec = AnchorRecorder()
    h.prepare({"squall.checkpoint.sources": ["split"]}, Ctx({"split": [1]}), rec)  # type: ignore[arg-type]
    good, bad = data(1, "a"), data(1, "bad")
    h.execute(good)
    h.execute(bad)
    assert rec.emitted == [(["A"], "default")] and rec.anchors == [good]
    assert rec.acked == [good] and rec.failed == [bad]


def test_a_stateful_windowed_bolt_tells_the_collector_policy_what_its_windows_hold() -> None:
    """The harness fires time windows on ticks; after each it reports what its windows hold to
    the worker's GC policy (a fresh one here, its setter recorded), as the executor does for a
    plain windowed bolt, and 0 at cleanup (squall/gcpolicy.py)."""
    from fixtures_stateful import Sums

    from squall.gcpolicy import YOUNG, GcPolicy, young_threshold

    thresholds: list[int] = []
    cls = type("W", (BoltHarness,), {"inner": Sums})
    h = cls()
    h.gc_policy = GcPolicy(lambda young, _middle, _old: thresholds.append(young))
    conf = {"squall.checkpoint.sources": ["ids"],
            "squall.checkpoint.window": {"windowLength": "1h", "slidingInterval": "1h"},
            "squall.checkpoint.window.inputs": [["ids", "default"]]}
    h.prepare(conf, Ctx({"ids": [1]}), Recorder(), provider=MemoryProvider())  # type: ignore[arg-type]
    h.execute(barrier(1, R, -1, 1))
    for i in range(40_000):
        h.execute(window_tuple(i))
    h.execute(Tuple([0.1], -1, "__system", "__tick", {}, None))
    assert thresholds == [young_threshold(40_000)] and thresholds[0] > YOUNG
    h.cleanup()
    assert thresholds[-1] == YOUNG
