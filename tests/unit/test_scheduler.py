"""The even scheduler, driven with plain values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest

from squall.models.cluster import ExecutorId, WorkerSlot
from squall_operator.scheduler import (
    AssignmentDiff,
    ClusterSnapshot,
    SchedulingRequest,
    diff_assignment,
    schedule,
)

pytestmark = pytest.mark.unit

A0, A1, A2 = WorkerSlot("a", 6700), WorkerSlot("a", 6701), WorkerSlot("a", 6702)
B0, B1 = WorkerSlot("b", 6700), WorkerSlot("b", 6701)
C0 = WorkerSlot("c", 6700)


def executors(n: int) -> tuple[ExecutorId, ...]:
    return tuple((i, i) for i in range(1, n + 1))


def cluster(**nodes: tuple[int, ...]) -> ClusterSnapshot:
    return ClusterSnapshot(slots=nodes)


TWO_BY_TWO = cluster(a=(6700, 6701), b=(6700, 6701))


def request(
    n: int | tuple[ExecutorId, ...],
    num_workers: int,
    current: Mapping[ExecutorId, WorkerSlot] | None = None,
    alive: frozenset[ExecutorId] | None = None,
    topology_id: str = "t",
) -> SchedulingRequest:
    needed = executors(n) if isinstance(n, int) else n
    current = dict(current or {})
    return SchedulingRequest(
        topology_id=topology_id,
        executors=needed,
        num_workers=num_workers,
        current=current,
        alive=frozenset(current) if alive is None else alive,
    )


def one(req: SchedulingRequest, snapshot: ClusterSnapshot) -> dict[ExecutorId, WorkerSlot]:
    return schedule([req], snapshot)[req.topology_id]


def loads(assignment: Mapping[ExecutorId, WorkerSlot]) -> dict[WorkerSlot, int]:
    return dict(Counter(assignment.values()))


def test_seed_example_one_slot_per_node_split_three_two() -> None:
    result = one(request(5, 2), TWO_BY_TWO)
    assert result == {(1, 1): A0, (2, 2): B0, (3, 3): A0, (4, 4): B0, (5, 5): A0}
    assert loads(result) == {A0: 3, B0: 2}


def test_spreads_across_nodes_first_most_free_node_first() -> None:
    snapshot = cluster(c=(6700,), b=(6700, 6701), a=(6700, 6701, 6702))
    # one worker: the node with the most free slots
    assert set(one(request(6, 1), snapshot).values()) == {A0}
    # three workers: one per node
    assert set(one(request(6, 3), snapshot).values()) == {A0, B0, C0}
    # Storm's sort-slots order a b c a b a: the fourth and fifth workers go to a and b
    assert set(one(request(6, 4), snapshot).values()) == {A0, B0, C0, A1}
    assert set(one(request(6, 5), snapshot).values()) == {A0, B0, C0, A1, B1}


def test_tie_between_nodes_broken_by_name() -> None:
    snapshot = cluster(b=(6700,), a=(6700,))
    assert set(one(request(2, 1), snapshot).values()) == {A0}


def test_fewer_executors_than_workers_uses_one_slot_each_and_is_stable() -> None:
    first = one(request(2, 4), TWO_BY_TWO)
    assert first == {(1, 1): A0, (2, 2): B0}
    assert one(request(2, 4, first), TWO_BY_TWO) == first


def test_stable_same_input_moves_nothing() -> None:
    first = one(request(7, 3), TWO_BY_TWO)
    second = one(request(7, 3, first), TWO_BY_TWO)
    assert second == first
    diff = diff_assignment(first, second)
    assert not diff.changed
    assert diff.unchanged == frozenset(first)


def test_healthy_uneven_topology_is_not_moved() -> None:
    current = {(1, 1): A0, (2, 2): A0, (3, 3): A0, (4, 4): B0}
    assert one(request(4, 2, current), TWO_BY_TWO) == current


def test_dead_executor_frees_its_slot_and_alive_ones_stay() -> None:
    current = one(request(4, 2), TWO_BY_TWO)
    assert current == {(1, 1): A0, (2, 2): B0, (3, 3): A0, (4, 4): B0}
    alive = frozenset({(1, 1), (3, 3), (4, 4)})  # (2, 2) timed out; (4, 4) shares its slot
    result = one(request(4, 2, current, alive), TWO_BY_TWO)
    # b-6700 is freed as a whole; b-6701 keeps the topology spread over both nodes
    assert result == {(1, 1): A0, (2, 2): B1, (3, 3): A0, (4, 4): B1}
    diff = diff_assignment(current, result)
    assert diff.moved == {(2, 2): (B0, B1), (4, 4): (B0, B1)}
    assert diff.unchanged == {(1, 1), (3, 3)}


def test_dead_slot_reused_only_when_no_other_slot_is_free() -> None:
    snapshot = cluster(a=(6700,), b=(6700,))
    current = {(1, 1): A0, (2, 2): B0}
    result = one(request(2, 2, current, alive=frozenset({(1, 1)})), snapshot)
    assert result == current


def test_suspect_slot_avoided_by_other_topologies_too() -> None:
    snapshot = cluster(a=(6700, 6701), b=(6700, 6701))
    current = {(1, 1): A0, (2, 2): B0}
    results = schedule(
        [
            request(2, 2, current, alive=frozenset({(1, 1)}), topology_id="t"),
            request(1, 1, topology_id="u"),
        ],
        snapshot,
    )
    assert results["t"] == {(1, 1): A0, (2, 2): B1}
    # b-6700 is the dead slot: u takes a-6701 rather than it
    assert results["u"] == {(1, 1): A1}


def test_short_slots_assign_what_fits_then_complete_later() -> None:
    assert one(request(4, 3), cluster()) == {}
    partial = one(request(4, 3), cluster(a=(6700,)))
    assert partial == {(1, 1): A0, (2, 2): A0, (3, 3): A0, (4, 4): A0}
    snapshot = cluster(a=(6700, 6701), b=(6700,))
    complete = one(request(4, 3, partial), snapshot)
    assert sorted(loads(complete).values()) == [1, 1, 2]
    assert set(complete.values()) == {A0, A1, B0}
    # the first executors stay on the slot they ran on
    assert complete[(1, 1)] == A0 and complete[(2, 2)] == A0
    assert one(request(4, 3, complete), snapshot) == complete


def test_zero_slots_keeps_the_kept_part() -> None:
    current = {(1, 1): A0, (2, 2): B0}
    # node b is gone and a has no other slot: (2, 2) joins (1, 1) on the only slot left
    result = one(request(2, 2, current), cluster(a=(6700,)))
    assert result == {(1, 1): A0, (2, 2): A0}
    # with the only slot taken by another topology, a new one gets nothing
    results = schedule(
        [request(1, 1, {(1, 1): A0}, topology_id="t"), request(3, 2, topology_id="u")],
        cluster(a=(6700,)),
    )
    assert results == {"t": {(1, 1): A0}, "u": {}}


def test_two_topologies_never_share_a_slot() -> None:
    snapshot = cluster(a=(6700, 6701), b=(6700,))
    results = schedule(
        [request(4, 2, topology_id="t"), request(4, 2, topology_id="u")], snapshot
    )
    t_slots, u_slots = set(results["t"].values()), set(results["u"].values())
    assert t_slots == {A0, B0}
    assert u_slots == {A1}
    assert len(results["u"]) == 4


def test_later_topology_keeps_its_slots_against_an_earlier_one() -> None:
    snapshot = cluster(a=(6700, 6701))
    results = schedule(
        [request(2, 2, topology_id="new"), request(1, 1, {(1, 1): A0}, topology_id="old")],
        snapshot,
    )
    assert results["old"] == {(1, 1): A0}
    assert results["new"] == {(1, 1): A1, (2, 2): A1}


def test_conflicting_current_assignments_first_topology_wins() -> None:
    snapshot = cluster(a=(6700, 6701))
    results = schedule(
        [
            request(1, 1, {(1, 1): A0}, topology_id="t"),
            request(1, 1, {(1, 1): A0}, topology_id="u"),
        ],
        snapshot,
    )
    assert results == {"t": {(1, 1): A0}, "u": {(1, 1): A1}}


def test_rebalance_two_to_three_workers() -> None:
    current = one(request(6, 2), TWO_BY_TWO)
    assert loads(current) == {A0: 3, B0: 3}
    result = one(request(6, 3, current), TWO_BY_TWO)
    assert loads(result) == {A0: 2, B0: 2, A1: 2}
    diff = diff_assignment(current, result)
    # only the two executors over the new share move
    assert len(diff.moved) == 2 and len(diff.unchanged) == 4
    assert one(request(6, 3, result), TWO_BY_TWO) == result


def test_rebalance_three_to_two_workers() -> None:
    current = one(request(6, 3), TWO_BY_TWO)
    assert set(current.values()) == {A0, B0, A1}
    result = one(request(6, 2, current), TWO_BY_TWO)
    # the kept workers stay on different nodes
    assert loads(result) == {A0: 3, B0: 3}
    assert diff_assignment(current, result).unchanged == {
        e for e, s in current.items() if s != A1
    }


def test_growing_parallelism_adds_without_moving() -> None:
    current = one(request(4, 2), TWO_BY_TWO)
    result = one(request(5, 2, current), TWO_BY_TWO)
    diff = diff_assignment(current, result)
    assert diff.added == {(5, 5): A0}
    assert not diff.moved and not diff.removed


def test_shrinking_parallelism_drops_old_executors_and_keeps_the_workers() -> None:
    current = {(1, 2): A1, (3, 4): B1, (5, 6): A1, (7, 8): B1}
    new_executors = ((1, 4), (5, 8))
    result = one(request(new_executors, 2, current), TWO_BY_TWO)
    assert result == {(1, 4): A1, (5, 8): B1}
    diff = diff_assignment(current, result)
    assert set(diff.removed) == set(current)
    assert set(diff.added) == set(new_executors)


def test_removed_executor_disappears_from_a_stable_topology() -> None:
    current = {(1, 1): A0, (2, 2): B0, (3, 3): A0}
    assert one(request(2, 2, current), TWO_BY_TWO) == {(1, 1): A0, (2, 2): B0}


def test_node_removed_moves_its_executors_and_keeps_the_rest() -> None:
    snapshot = cluster(a=(6700, 6701), b=(6700,), c=(6700,))
    current = one(request(6, 3), snapshot)
    assert set(current.values()) == {A0, B0, C0}
    without_b = cluster(a=(6700, 6701), c=(6700,))
    result = one(request(6, 3, current), without_b)
    assert set(result.values()) == {A0, A1, C0}
    for executor, slot in current.items():
        if slot != B0:
            assert result[executor] == slot
        else:
            assert result[executor] == A1


def test_result_has_every_topology() -> None:
    results = schedule([request(1, 1, topology_id="x"), request(1, 1, topology_id="y")], cluster())
    assert results == {"x": {}, "y": {}}


def test_rejects_duplicate_ids_and_non_positive_workers() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        schedule([request(1, 1), request(1, 1)], TWO_BY_TWO)
    with pytest.raises(ValueError, match="num_workers"):
        request(1, 0)


def test_diff_assignment() -> None:
    old = {(1, 1): A0, (2, 2): A0, (3, 3): B0}
    new = {(1, 1): A0, (2, 2): B1, (4, 4): B0}
    assert diff_assignment(old, new) == AssignmentDiff(
        added={(4, 4): B0},
        removed={(3, 3): B0},
        moved={(2, 2): (A0, B1)},
        unchanged=frozenset({(1, 1)}),
    )
    assert diff_assignment(old, new).changed
    assert not diff_assignment({}, {}).changed


def test_slot_given_up_by_a_shrinking_topology_serves_an_earlier_one_at_once() -> None:
    snapshot = cluster(a=(6700, 6701))
    results = schedule(
        [
            request(2, 2, topology_id="new"),
            request(2, 1, {(1, 1): A0, (2, 2): A1}, topology_id="old"),
        ],
        snapshot,
    )
    assert results == {"new": {(1, 1): A1, (2, 2): A1}, "old": {(1, 1): A0, (2, 2): A0}}


def test_slot_holding_only_removed_executors_is_not_reserved() -> None:
    # "old" now needs (1, 1) and (2, 2); its b worker only ran (3, 4), gone after a rebalance
    snapshot = cluster(a=(6700,), b=(6700,))
    old = {(1, 1): A0, (3, 4): B0}
    results = schedule(
        [request(1, 1, topology_id="new"), request(((1, 1), (2, 2)), 2, old, topology_id="old")],
        snapshot,
    )
    assert results == {"new": {(1, 1): B0}, "old": {(1, 1): A0, (2, 2): A0}}
    # alone, the topology keeps both of its workers
    assert one(request(((1, 1), (2, 2)), 2, old), snapshot) == {(1, 1): A0, (2, 2): B0}


# --- allowed slots (placement that respects Kubernetes) -------------------------------------------


def test_allowed_slots_limit_placement_and_move_executors_off_disallowed_slots() -> None:
    from squall_operator.scheduler import ClusterSnapshot, SchedulingRequest, schedule

    cluster = ClusterSnapshot(slots={"a": (6700, 6701), "b": (6700, 6701), "c": (6700, 6701)})
    executors = ((1, 1), (2, 2), (3, 3), (4, 4))
    only_b_c = frozenset(WorkerSlot(n, p) for n in ("b", "c") for p in (6700, 6701))
    out = schedule([SchedulingRequest("t", executors, 2, allowed=only_b_c)], cluster)["t"]
    assert {s.node for s in out.values()} == {"b", "c"}
    # a slot it runs on becomes disallowed (a taint added to node b): its executors move
    current = dict(out)
    only_c = frozenset(WorkerSlot("c", p) for p in (6700, 6701))
    moved = schedule([SchedulingRequest("t", executors, 2, current=current, alive=frozenset(executors),
                                        allowed=only_c)], cluster)["t"]
    assert {s.node for s in moved.values()} == {"c"} and len(set(moved.values())) == 2
    # nothing allowed: nothing placed; another topology still uses every slot
    both = schedule([SchedulingRequest("t", executors, 2, allowed=frozenset()),
                     SchedulingRequest("u", executors, 3)], cluster)
    assert both["t"] == {} and len(set(both["u"].values())) == 3
