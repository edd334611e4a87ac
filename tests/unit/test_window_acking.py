"""A windowed bolt's acking, checked against the real XOR acker ledger on an injected clock.

Storm's contract: a tuple is acked when it leaves its last window, and the bolt's emits from
`execute(window)` are anchored to the window's tuples, so a spout tree completes only once every
one of its tuples left the windows *and* every window output anchored to them was acked
downstream. These tests run `WindowedBoltExecutor` over the real collector of a real, unstarted
`Executor` (one route, task 1 -> task 9, one acker) and apply what it sends to a real
`AckerLedger`; the windows fire from `on_timer` as the executor's loop calls it, and the
acker's completions of the windows' own trees (for task 1) go back to the window, as the
worker's control path hands them to the bolt's executor.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from squall import WindowedBolt, wire
from squall.acker import AckerLedger
from squall.components import Tuple
from squall.windowing import WindowConfig, WindowedBoltExecutor
from squall.worker.anchoring import BoltCollector
from squall.worker.bolt import WindowFeed
from test_collector_anchoring import executor  # the same real, unstarted executor (tests/unit)

pytestmark = pytest.mark.unit

SPOUT, BOLT, NEXT, ACKER = 7, 1, 9, 100


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def roots_of(tuples: list[Tuple]) -> set[int]:
    return {r for t in tuples for r in (t.anchors or {})}


class EmitEach(WindowedBolt):
    """Emits `per_window` tuples per window, anchored to the window (the default). `emitted`:
    for each output, in order, the spout trees it is anchored to (those of its anchors)."""

    per_window = 1
    # the spout trees of tuples (the test's own record: a window that mirrors its anchors drops
    # them from its tuples); `Run` sets it
    trees_of: Callable[[list[Tuple]], set[int]] = staticmethod(roots_of)

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.emitted: list[set[int]] = []

    def execute(self, window: Any) -> None:
        for i in range(self.per_window):
            self.collector.emit([len(window), i])
            self.emitted.append(self.trees_of(window.get()))


class EmitAlsoAnchoredToTheFirst(EmitEach):
    """Besides the default emit, one anchored explicitly to the window's first tuple."""

    def execute(self, window: Any) -> None:
        super().execute(window)
        self.collector.emit([len(window), -1], anchors=window.get()[:1])
        self.emitted.append(self.trees_of(window.get()[:1]))


class Delegating:
    """A collector wrapper without the window fast path (as the stateful harness wraps it)."""

    def __init__(self, delegate: BoltCollector) -> None:
        self.emit = delegate.emit
        self.emit_direct = delegate.emit_direct
        self.ack = delegate.ack
        self.fail = delegate.fail
        self.report_error = delegate.report_error


def flush(ex: Any, ledger: AckerLedger, failures: bool = False) -> list[list[int]]:
    """What `Executor.flush` sends the acker, applied; the completions (all must be successes
    unless `failures`)."""
    items = [[wire.ACK, ACKER, r, v, 0] for r, v in ex.out.acks.items()] + ex.out.control
    ex.out.acks.clear()
    ex.out.control = []
    done: list[list[int]] = []
    ledger.apply(items, done)
    assert failures or all(d[3] == 1 for d in done), done
    return done


def outputs(ex: Any) -> list[Tuple]:
    items = ex.bufs.pop("next-executor", [])
    return [Tuple(values, src, "bolt", stream, {}, anchors) for _dest, src, stream, values, anchors in items]


class Run:
    """Sentences of `words` tuples each (one spout tree per sentence) into a windowed bolt."""

    def __init__(self, length: str | int, sliding: str, *, per_window: int = 1, fast: bool = True,
                 seed: int = 0, bolt: type[EmitEach] = EmitEach, timeout: float = 30.0,
                 failures: bool = False, feed: bool = False) -> None:
        self.rng = random.Random(seed)
        self.clock = Clock(100.0)
        self.ledger = AckerLedger(30, now=0.0)
        self.ex = executor()
        self.bolt = bolt()
        self.bolt.per_window = per_window
        # each tuple sent (kept alive here, so that ids stay unique) with its spout tree
        self.tree_by_id: dict[int, tuple[Tuple, int]] = {}
        self.bolt.trees_of = self.trees_of  # type: ignore[method-assign]
        cfg = WindowConfig.from_spec({"windowLength": length, "slidingInterval": sliding})
        self.w = WindowedBoltExecutor(self.bolt, cfg, [("split", "default")], self.clock, timeout)
        self.failures = failures  # whether a tree may fail (else every completion is a success)
        self.failed: set[int] = set()
        collector = BoltCollector(self.ex, BOLT)
        self.w.prepare({}, None, collector if fast else Delegating(collector))  # type: ignore[arg-type]
        # `feed`: tuples join the window through the executor's compiled per-tuple input, as
        # `BoltExecutor.process` hands them over where the window mirrors its anchors
        rooted = self.w.rooted
        self.feed = WindowFeed(self.w) if feed and rooted is not None and rooted.rts is not None else None
        self.left: dict[int, int] = {}  # root -> its tuples not yet out of the windows
        self.completed: set[int] = set()
        # the window's outputs not acked yet downstream, each with the spout trees it holds
        self.children: list[tuple[Tuple, set[int]]] = []

    def sentence(self, words: int, root: int | None = None) -> int:
        root = self.rng.getrandbits(62) if root is None else root
        edges = [self.rng.getrandbits(62) for _ in range(words)]
        x = 0
        for e in edges:
            x ^= e
        self.ledger.apply([[wire.INIT, ACKER, root, x, SPOUT]], [])
        for e in edges:
            tup = Tuple(["w"], SPOUT, "split", "default", {"word": 0}, {root: e})
            self.tree_by_id[id(tup)] = (tup, root)
            if self.feed is None or not self.feed.add(tup):
                self.w.execute(tup)
        self.left[root] = words
        return root

    def trees_of(self, tuples: list[Tuple]) -> set[int]:
        return {self.tree_by_id[id(t)][1] for t in tuples}

    def timer(self, now: float) -> None:
        self.clock.now = now
        due = self.w.seconds_to_next()
        if due is not None and due <= 0:
            self.w.on_timer()
        new = outputs(self.ex)
        assert len(new) == len(self.bolt.emitted)
        self.children += zip(new, self.bolt.emitted)
        self.bolt.emitted.clear()
        self.settle(flush(self.ex, self.ledger, self.failures))

    def settle(self, done: list[list[int]]) -> None:
        """Completions: spout trees complete; a window's own tree goes back to the window,
        which may then send the acks it held (flushed in turn)."""
        while done:
            for _kind, task, root, ok, _x in done:
                if task == BOLT:
                    self.w.tree_done(root, bool(ok))
                else:
                    assert task == SPOUT
                    (self.completed if ok else self.failed).add(root)
            done = flush(self.ex, self.ledger, self.failures)

    def waiting(self) -> set[int]:
        """The spout trees some output not acked yet is anchored to."""
        return {r for _child, roots in self.children for r in roots}

    def ack_children(self, check: Callable[[set[int]], None] | None = None) -> None:
        downstream = BoltCollector(executor(), NEXT)
        self.rng.shuffle(self.children)
        for child, _roots in self.children:
            downstream.ack(child)
            self.settle(flush(downstream.ex, self.ledger, self.failures))
        self.children = []


def test_trees_complete_only_after_their_tuples_left_and_the_outputs_were_acked() -> None:
    """A 2 s window sliding every 1 s; sentences arrive through 3 s. No tree completes while its
    tuples are in a window or an output anchored to them is unacked; all complete at the end."""
    r = Run("2s", "1s")
    roots = []
    for step in range(30):
        r.clock.now = 100.0 + step * 0.1
        roots.append(r.sentence(1 + step % 4))
    for now in (101.0, 102.0, 103.0):
        r.timer(now)
        assert r.completed == set(), "a tree completed while its tuples were still in a window"
    # every tuple has left its last window (at 104 the last ones leave); outputs not acked yet
    r.timer(104.0)
    r.timer(105.0)
    assert r.completed == set(), "a tree completed before the window outputs anchored to it were acked"
    # each output holds the window's trees through one tree of the window's own: its ack
    # downstream is one acker message, however many spout trees the window held
    assert [len(ch.anchors or {}) for ch, _roots in r.children] == [1] * len(r.children)
    r.ack_children()
    assert r.completed == set(roots)
    assert len(r.ledger) == 0


def test_a_failed_output_fails_the_trees_of_its_window_only() -> None:
    """Sentences at 100.0 (in the windows ending at 101 and 102) and at 101.5 (in those ending
    at 102 and 103). The output of the window ending at 101 fails downstream: the first
    sentences fail (their spout replays them), the later ones complete as usual."""
    r = Run("2s", "1s", failures=True)
    first = [r.sentence(2) for _ in range(4)]
    r.timer(101.0)
    r.clock.now = 101.5
    later = [r.sentence(2) for _ in range(4)]
    failing = [(ch, roots) for ch, roots in r.children]
    assert [roots for _ch, roots in failing] == [set(first)]
    r.children = []
    downstream = BoltCollector(executor(), NEXT)
    downstream.fail(failing[0][0])
    r.settle(flush(downstream.ex, r.ledger, failures=True))
    assert r.failed == set(first) and r.completed == set()
    for now in (102.0, 103.0, 104.0, 105.0):
        r.timer(now)
        r.ack_children()
    assert r.completed == set(later)
    assert r.failed == set(first)


def test_an_output_not_acked_within_the_message_timeout_fails_its_trees() -> None:
    """Nothing downstream acks the window's outputs: once the message timeout passed since a
    window's tree was registered, the window fails its spout trees; none ever completes."""
    r = Run("2s", "1s", timeout=10.0, failures=True)
    roots = [r.sentence(3) for _ in range(5)]
    for now in (101.0, 102.0, 103.0, 104.0):
        r.timer(now)
    assert r.completed == set() and r.failed == set()
    r.timer(110.5)
    assert r.failed == set()
    r.timer(111.0)  # the tree of the window ending at 101 was registered at 101.0
    assert r.failed == set(roots)
    r.timer(113.0)
    assert r.completed == set()
    assert r.w.rooted is not None and not r.w.rooted.trees and not r.w.rooted.held


@pytest.mark.parametrize("fast", [True, False])
def test_a_late_timer_firing_several_windows_at_once_completes_every_tree(fast: bool) -> None:
    """The executor was busy for 2.5 s: one `on_timer` fires the windows ending at 101 and 102
    (103's is empty) together. The sentence that arrived at 100.0 is in the first only and the
    second evicts it: it must still be acked after the first window's output was anchored to it,
    or its tree never completes (it times out and is replayed)."""
    r = Run("2s", "1s", fast=fast)
    roots = []
    for step in range(10):
        r.clock.now = 100.0 + step * 0.1
        roots.append(r.sentence(3))
    r.timer(103.5)  # the windows ending at 101, 102 and 103 are due in one call
    assert [ch.values[0] for ch, _roots in r.children] == [30, 27]
    assert r.completed == set(), "a tree completed before the output of a window holding it was acked"
    r.ack_children()
    r.timer(104.0)
    r.timer(105.0)
    assert r.completed == set(roots), f"{len(set(roots) - r.completed)} trees never complete"
    assert len(r.ledger) == 0


@pytest.mark.parametrize("fast,feed", [(True, False), (False, False), (True, True)])
@pytest.mark.parametrize("seed", range(4))
def test_random_sentences_and_several_outputs_per_window_complete_exactly(fast: bool, feed: bool,
                                                                          seed: int) -> None:
    """Sentences at random times, 1-3 outputs per window acked at random moments: a tree
    completes exactly when its last tuple left the windows and every output anchored to it was
    acked, never before."""
    rng = random.Random(seed)
    r = Run("1s", "500ms", per_window=rng.randint(1, 3), fast=fast, seed=seed, feed=feed)
    random_run(r, rng)


def random_run(r: Run, rng: random.Random, batches: bool = False) -> None:
    """Sentences at random times until 103 s, timers and acks of the outputs at random moments,
    then the windows drained: every tree completes exactly once, never while an output anchored
    to it waits, never before its arrival + 1 s (the windows are 1 s long). `batches`: a few
    sentences at a time with the clock moving within the batch, `end_batch` after each batch and
    before each timer, as the executor's loop runs a per-batch feed (their arrival: the batch's)."""
    feed = r.feed
    arrived: dict[int, float] = {}
    now = 100.0
    while now < 104.0:
        now += rng.uniform(0.01, 0.3)
        r.clock.now = now
        if now < 103.0:
            if batches:
                assert feed is not None
                for _ in range(rng.randint(1, 4)):  # one batch of a few sentences
                    arrived[r.sentence(rng.randint(1, 5))] = now
                    r.clock.now += rng.uniform(0.0, 0.05)
                now = r.clock.now
                feed.end_batch()
            else:
                arrived[r.sentence(rng.randint(1, 5))] = now
        if rng.random() < 0.5:
            if batches:
                feed.end_batch()  # type: ignore[union-attr]
            r.timer(now)
        if rng.random() < 0.3:
            # an output is pending for every tree with a tuple in a window that fired, so no
            # tree may complete while outputs wait
            assert not (r.completed & r.waiting())
            r.ack_children()
        for root, t in arrived.items():
            if root in r.completed:
                # its tuples left the 1 s windows: not before the clock passed their arrival + 1 s
                assert now >= t + 1.0, f"tree completed {now - t:.2f}s after it arrived"
    for end in (104.5, 105.0, 105.5, 106.0):
        r.timer(end)
    r.ack_children()
    assert r.completed == set(arrived)
    assert len(r.ledger) == 0


@pytest.mark.parametrize("feed", [False, True])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", ["explicit anchors", "count length", "ids beyond 64 bits"])
def test_other_window_kinds_and_anchors_complete_exactly(case: str, seed: int, feed: bool) -> None:
    """The per-root anchoring where the window's anchors are read from its tuples: a bolt that
    also anchors emits itself (the tuples' ack values are set), a window whose length is a
    count, and a tuple whose anchors do not fit 64-bit arrays (the window reads its tuples from
    then on); the trees complete exactly as in the common case."""
    r = Run(50 if case == "count length" else "1s", "500ms", seed=seed,
            bolt=EmitAlsoAnchoredToTheFirst if case == "explicit anchors" else EmitEach, feed=feed)
    rng = random.Random(seed)
    arrived: dict[int, float] = {}
    now = 100.0
    while now < 103.0:
        now += rng.uniform(0.01, 0.2)
        r.clock.now = now
        root = None
        if case == "ids beyond 64 bits" and len(arrived) == 5:
            root = 2**64 - 5  # a spout of ours makes 62-bit ids; a foreign one might not
        arrived[r.sentence(rng.randint(1, 5), root)] = now
        if rng.random() < 0.5:
            r.timer(now)
        if rng.random() < 0.3:
            assert not (r.completed & r.waiting())
            r.ack_children()
    if case == "ids beyond 64 bits":
        assert r.w.rooted is not None and r.w.rooted.rts is None
    for end in range(104, 110):
        r.timer(float(end))
    r.ack_children()
    # a count window keeps its last 50 tuples until newer ones push them out
    held = r.trees_of(r.w.manager.items)
    assert bool(held) == (case == "count length")
    assert r.completed == set(arrived) - held
    assert len(r.ledger) == len(held)


def test_the_compiled_feed_builds_the_window_execute_builds() -> None:
    """`WindowFeed.add` (the executor's compiled per-tuple input) leaves the manager's lists and
    the anchor arrays exactly as the window's own `execute`, a clock that steps back included;
    ticks and, after anchors beyond 64 bits, every tuple go to `execute`."""
    a, b = Run("2s", "1s", seed=1), Run("2s", "1s", seed=1, feed=True)
    assert a.feed is None and b.feed is not None
    for now in (100.0, 100.25, 100.1, 100.5):  # 100.1: the clock stepped back
        a.clock.now = b.clock.now = now
        assert a.sentence(3) == b.sentence(3)
    assert a.w.manager.ts == b.w.manager.ts == [100.0] * 3 + [100.25] * 6 + [100.5] * 3
    assert len(a.w.manager.items) == len(b.w.manager.items) == 12
    # the anchors moved to the arrays, dropped from the tuples, the same way
    assert [t.anchors for t in a.w.manager.items] == [t.anchors for t in b.w.manager.items] == [None] * 12
    ra, rb = a.w.rooted, b.w.rooted
    assert ra is not None and rb is not None and ra.rts is not None and rb.rts is not None
    assert (list(ra.rts), list(ra.rid), list(ra.redge)) == (list(rb.rts), list(rb.rid), list(rb.redge))
    assert list(ra.rn) == list(rb.rn) == [1] * 12
    tick = Tuple([1], -1, "__system", "__tick", {}, None)
    assert not b.feed.add(tick)
    edges = list(rb.redge)
    b.sentence(2, root=2**64 - 5)  # anchors beyond the arrays: the window reads its tuples now
    assert rb.rts is None and not b.feed.on
    # ... with their own anchors back on them
    items = b.w.manager.items
    assert [t.anchors for t in items[:12]] == [{b.tree_by_id[id(t)][1]: e} for t, e in zip(items, edges)]
    assert [list(t.anchors or {}) for t in items[12:]] == [[2**64 - 5]] * 2
    assert not b.feed.add(Tuple(["w"], SPOUT, "split", "default", {"word": 0}, {5: 6}))


@pytest.mark.parametrize("feed", [False, True])
def test_a_window_tuple_failed_by_the_bolt_fails_its_tree(feed: bool) -> None:
    """The window keeps its tuples without their anchors (copied into its arrays); a bolt that
    fails one of them through its collector still fails that tuple's spout tree, and the
    window's other trees complete as usual."""

    class FailTheFirst(EmitEach):
        def execute(self, window: Any) -> None:
            super().execute(window)
            self.collector.fail(window.get()[0])

    r = Run("2s", "1s", bolt=FailTheFirst, failures=True, feed=feed)
    roots = [r.sentence(2) for _ in range(3)]
    assert [t.anchors for t in r.w.manager.items] == [None] * 6
    for now in (101.0, 102.0, 103.0):
        r.timer(now)
        r.ack_children()
    assert r.failed == {roots[0]}
    assert r.completed == set(roots[1:])
