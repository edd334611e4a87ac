"""A bolt's collector anchoring new tuples, checked against the real XOR acker ledger.

Storm's BoltOutputCollectorImpl draws a fresh edge id per anchor. With one edge id shared by
all anchors, two anchors in the same tree cancel out (e ^ e == 0) and the tree completes when
the parents are acked, before the child is processed. These tests run the collector's own
emit/ack/fail code on plain values: the executor it writes to is a real, unstarted `Executor`
with one route (task 1 -> task 9) and one acker task.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from squall import wire
from squall.acker import AckerLedger
from squall.components import Tuple
from squall.worker.executor import BoltCollector, Executor

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
