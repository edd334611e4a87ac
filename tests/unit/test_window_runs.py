"""A window's anchors folded into runs of one root (`_WindowAnchoring.fr/fx/fk`), which its expiry
acks send: a run that the window's edge cuts (a tree whose tuples arrived on both sides of it), a
run that goes on across a settle, runs of two trees interleaved. Checked against the real XOR
acker ledger, with the harness of test_window_acking.py (a real, unstarted executor's collector),
through the window's own `execute` and through the executor's compiled feed.
"""

from __future__ import annotations

import pytest

from squall import wire
from squall.components import Tuple
from test_window_acking import ACKER, SPOUT, Run

pytestmark = pytest.mark.unit


def start_tree(r: Run, words: int) -> tuple[int, list[int]]:
    """A spout tree of `words` tuples registered with the acker; its root and its edges."""
    root = r.rng.getrandbits(62)
    edges = [r.rng.getrandbits(62) for _ in range(words)]
    x = 0
    for e in edges:
        x ^= e
    r.ledger.apply([[wire.INIT, ACKER, root, x, SPOUT]], [])
    r.left[root] = words
    return root, edges


def add(r: Run, root: int, edge: int) -> None:
    """One tuple of `root`'s tree joins the window at the clock's time."""
    tup = Tuple(["w"], SPOUT, "split", "default", {"word": 0}, {root: edge})
    r.tree_by_id[id(tup)] = (tup, root)
    if r.feed is None or not r.feed.add(tup):
        r.w.execute(tup)


def check_runs(r: Run) -> None:
    rooted = r.w.rooted
    assert rooted is not None and rooted.rts is not None
    assert len(rooted.fr) == len(rooted.fx) == len(rooted.fk)
    assert sum(rooted.fk) == len(rooted.rid) == len(rooted.rts)
    # each run's XOR is that of its entries in the arrays
    i = 0
    for root, x, k in zip(rooted.fr, rooted.fx, rooted.fk):
        assert list(rooted.rid[i:i + k]) == [root] * k
        y = 0
        for e in rooted.redge[i:i + k]:
            y ^= e
        assert y == x
        i += k


@pytest.mark.parametrize("feed", [False, True])
def test_a_tree_cut_by_the_windows_edge_completes_when_its_last_tuple_leaves(feed: bool) -> None:
    """A 2 s window sliding every 1 s (fires at 101, 102, ...; the fire at `e` evicts what
    arrived at or before `e - 2`). Trees B and A alternate at 100.5, three tuples each (B first),
    then a settle and three more of A at 101.5: A's last run goes on across the settle and is cut
    at 103."""
    r = Run("2s", "1s", feed=feed)
    a, a_edges = start_tree(r, 6)
    b, b_edges = start_tree(r, 3)
    r.clock.now = 100.5
    for ea, eb in zip(a_edges[:3], b_edges):
        add(r, b, eb)
        add(r, a, ea)
    r.timer(101.0)  # fires, and settles the anchors into the arrays and runs
    r.ack_children()
    check_runs(r)
    r.clock.now = 101.5
    add(r, a, a_edges[3])
    rooted = r.w.rooted
    assert rooted is not None and rooted.rts is not None  # settles
    assert rooted.fr[-1] == a and rooted.fk[-1] == 2, "A's run goes on across the settle"
    for e in a_edges[4:]:
        add(r, a, e)
    r.timer(102.0)
    r.ack_children()
    assert r.completed == set()
    check_runs(r)
    r.timer(103.0)  # evicts what arrived at or before 101: B, and half of A's last run
    r.ack_children()
    assert r.completed == {b}, "A completed while three of its tuples were still in a window"
    check_runs(r)
    assert rooted.fr == [a] and rooted.fk == [3]
    r.timer(104.0)
    r.ack_children()
    r.timer(105.0)
    r.ack_children()
    assert r.completed == {a, b}
    assert not rooted.fr and not rooted.fx and not rooted.fk and not len(rooted.rid)
    assert len(r.ledger) == 0
