"""A bolt's collector anchoring new tuples, checked against the real XOR acker ledger.

Storm's BoltOutputCollectorImpl draws a fresh edge id per anchor. With one edge id shared by
all anchors, two anchors in the same tree cancel out (e ^ e == 0) and the tree completes when
the parents are acked, before the child is processed. These tests run the collector's own
emit/ack/fail code on plain values: the executor it writes to is a real, unstarted `Executor`
with one route (task 1 -> task 9) and one acker task.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from squall import wire
from squall.acker import AckerLedger
from squall.components import Tuple
from squall.worker.anchoring import BoltCollector
from squall.worker.executor import Executor

pytestmark = pytest.mark.unit

ROOT = 0x0123_4567_89AB_CDEF
SPOUT, BOLT, NEXT, ACKER = 7, 1, 9, 100


def executor() -> Any:
    """A real (unstarted) Executor with one route, task 1 -> task 9, and one acker."""
    ex = Executor(None, (BOLT, BOLT), "bolt")  # type: ignore[arg-type]
    ex.routes = {BOLT: {"default": [lambda values: [NEXT]]}, NEXT: {}}
    ex.direct = {BOLT: {"default": frozenset({NEXT})}}
    ex.task_dest = {NEXT: "next-executor"}
    ex.acker_tasks = (ACKER,)
    ex.n_ackers = 1
    ex.auto_anchor = None  # type: ignore[attr-defined]
    return ex


def flush_acks(ex: Any, ledger: AckerLedger) -> list[list[int]]:
    """What `Executor.flush` does with the collector's acks and fails: acker messages, applied."""
    items = [[wire.ACK, ACKER, r, v, 0] for r, v in ex.out.acks.items()] + ex.out.control
    ex.out.acks.clear()
    ex.out.control = []
    done: list[list[int]] = []
    ledger.apply(items, done)
    return done


def received(ex: Any) -> list[Tuple]:
    """The tuples the collector buffered for task NEXT, as that task's executor builds them."""
    items = ex.bufs.pop("next-executor", [])
    return [Tuple(values, src, "bolt", stream, {}, anchors) for _dest, src, stream, values, anchors in items]


def two_inputs_of_one_tree(ledger: AckerLedger) -> list[Tuple]:
    """The spout emitted ROOT's two first tuples (edges a and b); both reached our bolt."""
    a, b = random.getrandbits(62), random.getrandbits(62)
    ledger.apply([[wire.INIT, ACKER, ROOT, a ^ b, SPOUT]], [])
    return [Tuple([n], SPOUT, "spout", "default", {}, {ROOT: e}) for n, e in ((1, a), (2, b))]


@pytest.mark.parametrize("emit_direct", [False, True])
def test_child_of_two_anchors_in_one_tree_keeps_the_tree_open(emit_direct: bool) -> None:
    ledger = AckerLedger(30, now=0.0)
    ex = executor()
    c = BoltCollector(ex, BOLT)
    inputs = two_inputs_of_one_tree(ledger)
    if emit_direct:
        c.emit_direct(NEXT, ["joined"], anchors=inputs)
    else:
        c.emit(["joined"], anchors=inputs)
    for tup in inputs:
        c.ack(tup)
    assert flush_acks(ex, ledger) == [], "the tree completed before its child was processed"
    (child,) = received(ex)
    assert child.anchors is not None and child.anchors[ROOT] != 0
    # the child is failed downstream: the spout hears `fail`
    downstream = BoltCollector(executor(), NEXT)
    downstream.fail(child)
    assert flush_acks(downstream.ex, ledger) == [[wire.DONE, SPOUT, ROOT, 0, 0]]


def test_child_of_two_anchors_acked_downstream_completes_the_tree() -> None:
    ledger = AckerLedger(30, now=0.0)
    ex = executor()
    c = BoltCollector(ex, BOLT)
    inputs = two_inputs_of_one_tree(ledger)
    c.emit(["joined"], anchors=inputs)
    for tup in inputs:
        c.ack(tup)
    assert flush_acks(ex, ledger) == []
    (child,) = received(ex)
    downstream = BoltCollector(executor(), NEXT)
    downstream.ack(child)
    assert flush_acks(downstream.ex, ledger) == [[wire.DONE, SPOUT, ROOT, 1, 0]]


def test_the_same_input_twice_in_the_anchors_keeps_the_tree_open() -> None:
    ledger = AckerLedger(30, now=0.0)
    e = random.getrandbits(62)
    ledger.apply([[wire.INIT, ACKER, ROOT, e, SPOUT]], [])
    tup = Tuple([1], SPOUT, "spout", "default", {}, {ROOT: e})
    ex = executor()
    c = BoltCollector(ex, BOLT)
    c.emit(["x"], anchors=[tup, tup])
    c.ack(tup)
    assert flush_acks(ex, ledger) == []
    (child,) = received(ex)
    downstream = BoltCollector(executor(), NEXT)
    downstream.ack(child)
    assert flush_acks(downstream.ex, ledger) == [[wire.DONE, SPOUT, ROOT, 1, 0]]


@pytest.mark.parametrize("seed", range(5))
def test_random_anchoring_over_several_trees_completes_exactly_when_all_are_acked(seed: int) -> None:
    """Inputs from 3 trees; children anchored to random subsets (repeats allowed), emitted to
    one or two targets; each tree completes only after the last of its tuples is acked."""
    rng = random.Random(seed)
    ledger = AckerLedger(30, now=0.0)
    roots = [rng.getrandbits(62) for _ in range(3)]
    inputs: list[Tuple] = []
    for r in roots:
        edges = [rng.getrandbits(62) for _ in range(rng.randint(2, 4))]
        x = 0
        for e in edges:
            x ^= e
            inputs.append(Tuple([r], SPOUT, "spout", "default", {}, {r: e}))
        ledger.apply([[wire.INIT, ACKER, r, x, SPOUT]], [])
    ex = executor()
    ex.routes = {BOLT: {"default": [lambda values: [NEXT] * rng.randint(1, 2)]}}
    c = BoltCollector(ex, BOLT)
    for _ in range(6):
        c.emit(["child"], anchors=[rng.choice(inputs) for _ in range(rng.randint(1, 4))])
    for tup in inputs:
        c.ack(tup)
    children = received(ex)
    # every tree that has a child is still open; a tree without children completed
    with_children = {r for ch in children for r in (ch.anchors or {})}
    done = flush_acks(ex, ledger)
    assert {d[2] for d in done} == set(roots) - with_children
    assert all(d[3] == 1 for d in done)
    downstream = BoltCollector(executor(), NEXT)
    rng.shuffle(children)
    left = {r: sum(r in (ch.anchors or {}) for ch in children) for r in with_children}
    for child in children:
        downstream.ack(child)
        finished = set()
        for r in child.anchors or {}:
            left[r] -= 1
            if not left[r]:
                finished.add(r)
        done = flush_acks(downstream.ex, ledger)
        assert {d[2] for d in done} == finished and all(d[3] == 1 for d in done)
    assert len(ledger) == 0


def test_runs_of_acks_of_one_root_make_one_acker_message_per_tree_per_flush() -> None:
    """The collector XORs a run of acks of one root outside the acks dict (Outbox.run_x) and
    settles it when another root comes or the acks are read: the flush sends one message per
    tree with the XOR of all its acks, runs interleaved or not, and a tree acked whole completes."""
    rng = random.Random(7)
    ledger = AckerLedger(30, now=0.0)
    roots = [rng.getrandbits(62) for _ in range(3)] + [0]  # 0 is a root like any other
    edges: dict[int, list[int]] = {r: [rng.getrandbits(62) for _ in range(4)] for r in roots}
    for r in roots:
        x = 0
        for e in edges[r]:
            x ^= e
        ledger.apply([[wire.INIT, ACKER, r, x, SPOUT]], [])
    ex = executor()
    c = BoltCollector(ex, BOLT)
    # runs: r0 r0 | r1 | r0 | r2 r2 r2 | 0 0 | r1 r1 r1 | r0 | 0 0 | r2 (decoded ints: equal, not identical)
    order = [0, 0, 1, 0, 2, 2, 2, 3, 3, 1, 1, 1, 0, 3, 3, 2]
    nth = {i: 0 for i in range(4)}
    for i in order:
        r = roots[i]
        c.ack(Tuple([1], SPOUT, "spout", "default", {}, {int(str(r)): edges[r][nth[i]]}))
        nth[i] += 1
    assert ex.stats.acked == len(order)
    sent: list[list[int]] = []
    ex.worker = SimpleNamespace(handle_control=lambda items, caller: sent.extend(items) or [])
    ex.local_inits = []
    assert ex.flush()
    assert sorted(m[2] for m in sent) == sorted(roots), "one acker message per tree"
    done: list[list[int]] = []
    ledger.apply(sent, done)
    assert sorted(d[2] for d in done) == sorted(roots) and all(d[3] == 1 for d in done)
    assert len(ledger) == 0
    # nothing is left over for the next flush
    sent.clear()
    assert ex.flush() and sent == []


def test_a_fail_after_acks_of_its_tree_drops_them_with_the_open_run() -> None:
    """`fail` forgets this turn's acks of the failed tree (the open run included) and sends
    FAIL; the other trees' acks still go."""
    ledger = AckerLedger(30, now=0.0)
    a, b, other = (random.getrandbits(62) for _ in range(3))
    ledger.apply([[wire.INIT, ACKER, ROOT, a ^ b, SPOUT], [wire.INIT, ACKER, 5, other, SPOUT]], [])
    ex = executor()
    c = BoltCollector(ex, BOLT)
    c.ack(Tuple([1], SPOUT, "spout", "default", {}, {5: other}))
    c.ack(Tuple([1], SPOUT, "spout", "default", {}, {ROOT: a}))  # the open run
    c.fail(Tuple([2], SPOUT, "spout", "default", {}, {ROOT: b}))
    assert ex.out.acks == {5: other}
    assert sorted(flush_acks(ex, ledger)) == [[wire.DONE, SPOUT, 5, 1, 0], [wire.DONE, SPOUT, ROOT, 0, 0]]
