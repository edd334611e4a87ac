"""The sorting of acker messages by destination (squall.worker.control, the per-item part of
Worker.handle_control), with plain values: real acker ledgers, slots as plain strings."""

from __future__ import annotations

from typing import Any

from squall import wire
from squall.acker import AckerLedger
from squall.worker import control
from squall.worker.control import sort_control, well_formed


def _sort(items: list[Any], trusted: bool = True) -> tuple[Any, ...]:
    ledgers = {10: AckerLedger(30.0, 0.0), 11: AckerLedger(30.0, 0.0)}
    task_slot = {12: "w2", 13: "w2", 14: "w3"}
    mine: dict[int, list[list[int]]] = {}
    done: list[list[int]] = []
    signals: list[list[int]] = []
    remote: dict[str, list[list[int]]] = {}
    bad, dropped = sort_control(items, trusted, ledgers, task_slot, mine, done, signals, remote)
    return mine, done, signals, remote, bad, dropped


def test_kinds_are_the_wires() -> None:
    assert (control.INIT, control.ACK, control.FAIL, control.DONE, control.BACKPRESSURE) == (
        wire.INIT, wire.ACK, wire.FAIL, wire.DONE, wire.BACKPRESSURE)


def test_each_item_goes_to_its_bucket_in_order() -> None:
    items = [
        [1, 10, 100, 5, 0],
        [1, 10, 101, 6, 0],
        [0, 11, 102, 7, 3],
        [1, 12, 103, 8, 0],  # acker 12 lives on w2
        [3, 4, 104, 1, 0],   # a completion for spout task 4
        [1, 10, 105, 9, 0],  # back to acker 10 after others
        [4, 7, 1, 0, 0],     # a backpressure signal
        [2, 13, 106, 0, 0],  # acker 13 also on w2
        [1, 14, 107, 1, 0],  # w3
        [1, 99, 108, 1, 0],  # no such task: dropped
        [1, 99, 109, 1, 0],  # a run of it: each one dropped
        [1, 12, 110, 2, 0],
    ]
    mine, done, signals, remote, bad, dropped = _sort(items)
    assert mine == {10: [items[0], items[1], items[5]], 11: [items[2]]}
    assert done == [items[4]]
    assert signals == [items[6]]
    assert remote == {"w2": [items[3], items[7], items[11]], "w3": [items[8]]}
    assert (bad, dropped) == (0, 2)
    # the items themselves are passed on, not copies
    assert mine[10][0] is items[0]


def test_a_dropped_task_between_two_runs_does_not_join_them() -> None:
    items = [[1, 10, 1, 1, 0], [1, 99, 2, 1, 0], [1, 10, 3, 1, 0], [1, 99, 4, 1, 0]]
    mine, done, signals, remote, bad, dropped = _sort(items)
    assert mine == {10: [items[0], items[2]]}
    assert (done, signals, remote, bad, dropped) == ([], [], {}, 0, 2)


def test_untrusted_items_are_shape_checked_and_skipped() -> None:
    good = [1, 10, 1, 1, 0]
    items: list[Any] = [
        good,
        "not a list",
        [1, 10, 2, 1],            # four fields
        [1, 10, 2, 1, 0, 0],      # six
        [5, 10, 2, 1, 0],         # no such kind
        [-1, 10, 2, 1, 0],
        [1, "10", 2, 1, 0],       # a string task
        [1, 10, 2.5, 1, 0],       # a float root
        [1, 10, 2, None, 0],
        [1, 10, 2, 1, True],      # a bool is not an int on the wire
        (1, 10, 2, 1, 0),         # a tuple
        {"k": 1},
        [1, -1, 2, 1, 0],         # well formed, but no task -1: dropped, not misfiled
    ]
    mine, done, signals, remote, bad, dropped = _sort(items, trusted=False)
    assert mine == {10: [good]}
    assert (done, signals, remote) == ([], [], {})
    assert (bad, dropped) == (11, 1)


def test_well_formed() -> None:
    assert well_formed([0, 1, 2, 3, 4])
    assert well_formed([4, 0, 0, 0, 0])
    assert well_formed([1, 1, 2**62, 2**63 - 1, 0])
    assert not well_formed([1, 1, 2, 3])
    assert not well_formed([1.0, 1, 2, 3, 4])
    assert not well_formed(None)


def test_sorted_acks_complete_trees_in_the_ledger() -> None:
    # the sorted batch applied to the real ledger: an init and the acks that cancel it
    ledgers = {10: AckerLedger(30.0, 0.0)}
    items = [[0, 10, 77, 0b1010, 4], [1, 10, 77, 0b1000, 0], [1, 10, 77, 0b0010, 0]]
    mine: dict[int, list[list[int]]] = {}
    done: list[list[int]] = []
    sort_control(items, True, ledgers, {}, mine, done, [], {})
    ledgers[10].apply(mine[10], done)
    assert done == [[3, 4, 77, 1, 0]]
    assert len(ledgers[10]) == 0


class _Retiring:
    """A spout executor a hot update removed, still finishing the trees it holds."""

    def __init__(self, roots: set[int]) -> None:
        self.inbox = "old-inbox"
        self.roots = roots

    def has_root(self, task: int, root: int) -> bool:
        return root in self.roots


def _route(done: list[list[int]], own_tasks: tuple[int, ...] = (), retiring: dict[int, Any] | None = None,
           remote: dict[str, list[list[int]]] | None = None) -> tuple[Any, ...]:
    # spout task 1 is the caller's, 2 and 3 have executors here, 4 runs on w2, 5 is placed here
    # but has no executor (nowhere to go), 6 is unknown, 7 is a windowed bolt's task here
    own: list[list[int]] = []
    local: dict[Any, list[list[int]]] = {}
    trees: dict[Any, list[list[int]]] = {}
    remote = {} if remote is None else remote
    dropped = control.route_done(done, own_tasks, {2: "inbox-2", 3: "inbox-3"}, {7: "trees-7"},
                                 {1: "w1", 2: "w1", 3: "w1", 4: "w2", 5: "w1", 7: "w1"}, "w1", retiring or {},
                                 own, local, trees, remote)
    if trees:
        local["trees"] = trees
    return own, local, remote, dropped


def test_completions_go_to_their_spouts_in_order() -> None:
    done = [[3, t, 100 + i, 1, 0] for i, t in enumerate([2, 2, 1, 4, 3, 2, 5, 6, 6, 4, 1, 7, 7])]
    own, local, remote, dropped = _route(done, own_tasks=(1,), remote={"w2": [[1, 12, 1, 1, 0]]})
    assert own == [done[2], done[10]]
    assert local == {"inbox-2": [done[0], done[1], done[5]], "inbox-3": [done[4]],
                     "trees": {"trees-7": [done[11], done[12]]}}
    # appended to what the acker messages already put there
    assert remote == {"w2": [[1, 12, 1, 1, 0], done[3], done[9]]}
    assert dropped == 3
    assert local["inbox-2"][0] is done[0]


def test_without_a_calling_spout_its_tasks_completions_go_to_its_inbox() -> None:
    done = [[3, 2, 1, 1, 0], [3, 1, 2, 1, 0]]
    own, local, remote, dropped = _route(done)
    assert (own, local, remote) == ([], {"inbox-2": [done[0]]}, {})
    assert dropped == 1  # task 1 is placed here (w1) but has no inbox in this routing


def test_a_retiring_spouts_trees_go_to_its_old_inbox() -> None:
    done = [[3, 2, 7, 1, 0], [3, 2, 8, 1, 0], [3, 2, 9, 1, 0]]
    own, local, remote, dropped = _route(done, retiring={2: _Retiring({8})})
    assert local == {"inbox-2": [done[0], done[2]], "old-inbox": [done[1]]}
    assert (own, remote, dropped) == ([], {}, 0)


def test_new_trees_are_grouped_by_acker_task() -> None:
    inits = [(10, 1, 4), (11, 2, 4), (12, 3, 4), (14, 5, 4)]
    assert control.group_inits(inits, (20, 21, 22)) == {21: [(10, 1, 4)], 22: [(11, 2, 4), (14, 5, 4)],
                                                        20: [(12, 3, 4)]}
    assert control.group_inits([], (20,)) == {}
