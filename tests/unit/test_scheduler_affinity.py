"""Pod affinity, anti-affinity and preferred node affinity in the scheduler, with plain values.

Worker pods are pinned to their slot's node, so nimbus is the only scheduler that reads these
rules: a slot breaking a required term is never picked, and preferred terms rank the nodes."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from squall.models.cluster import ExecutorId, WorkerSlot
from squall_operator.scheduler import (
    ClusterSnapshot,
    LabelRequirement,
    LabelSelector,
    Placement,
    PodAffinityTerm,
    SchedulingRequest,
    schedule,
)

pytestmark = pytest.mark.unit

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def executors(n: int, first: int = 1) -> tuple[ExecutorId, ...]:
    return tuple((i, i) for i in range(first, first + n))


def snapshot(zones: Mapping[str, str] | None = None, **nodes: tuple[int, ...]) -> ClusterSnapshot:
    labels = {n: {HOST: n, **({ZONE: zones[n]} if zones and n in zones else {})} for n in nodes}
    return ClusterSnapshot(slots=nodes, node_labels=labels)


def workers_of(app: str, namespace: str = "ns") -> Placement:
    return Placement(namespace=namespace, labels={"app": app})


def term(app: str, key: str = HOST, weight: int = 0, namespaces: frozenset[str] = frozenset()) -> PodAffinityTerm:
    return PodAffinityTerm(topology_key=key, selector=LabelSelector(match_labels={"app": app}),
                           namespaces=namespaces, weight=weight)


def request(topology_id: str, n: int, num_workers: int, placement: Placement,
            current: Mapping[ExecutorId, WorkerSlot] | None = None, first: int = 1) -> SchedulingRequest:
    current = dict(current or {})
    return SchedulingRequest(topology_id=topology_id, executors=executors(n, first), num_workers=num_workers,
                             current=current, alive=frozenset(current), placement=placement)


def nodes(assignment: Mapping[ExecutorId, WorkerSlot]) -> list[str]:
    """The nodes the assignment uses, each once."""
    return sorted({s.node for s in assignment.values()})


def test_required_anti_affinity_keeps_workers_off_the_nodes_of_the_matching_topology() -> None:
    db = request("db", 1, 1, workers_of("db"), {(1, 1): WorkerSlot("a", 6700)})
    app = request("app", 4, 2, Placement(namespace="ns", labels={"app": "web"},
                                          required_anti_affinity=(term("db"),)), first=10)
    result = schedule([db, app], snapshot(a=(6700, 6701), b=(6700, 6701)))
    assert nodes(result["db"]) == ["a"]
    # without the rule the even spreading takes a:6701 and b:6700
    assert set(result["app"].values()) == {WorkerSlot("b", 6700), WorkerSlot("b", 6701)}


def test_required_anti_affinity_on_its_own_labels_puts_one_worker_per_node() -> None:
    own = Placement(namespace="ns", labels={"app": "wc"}, required_anti_affinity=(term("wc"),))
    result = schedule([request("wc", 4, 4, own)], snapshot(a=(6700, 6701, 6702), b=(6700,)))["wc"]
    # two of the four workers fit: one per node, the executors spread over them
    assert nodes(result) == ["a", "b"] and len(set(result.values())) == 2 and len(result) == 4
    assert sorted(list(result.values()).count(s) for s in set(result.values())) == [2, 2]


def test_anti_affinity_over_a_zone_label_puts_one_worker_per_zone() -> None:
    own = Placement(namespace="ns", labels={"app": "wc"}, required_anti_affinity=(term("wc", ZONE),))
    cluster = snapshot({"a": "z1", "b": "z1", "c": "z2"}, a=(6700, 6701), b=(6700, 6701), c=(6700,))
    result = schedule([request("wc", 4, 3, own)], cluster)["wc"]
    assert len(set(result.values())) == 2 and "c" in nodes(result)
    assert len(set(nodes(result)) & {"a", "b"}) == 1


def test_anti_affinity_is_symmetric_a_topology_without_rules_avoids_the_ones_that_refuse_it() -> None:
    db = request("db", 1, 1, Placement(namespace="ns", labels={"app": "db"},
                                        required_anti_affinity=(term("web"),)), {(1, 1): WorkerSlot("a", 6700)})
    web = request("web", 4, 2, workers_of("web"), first=10)
    result = schedule([db, web], snapshot(a=(6700, 6701), b=(6700, 6701)))
    assert nodes(result["web"]) == ["b"]


def test_a_term_matches_its_own_namespace_unless_it_names_others() -> None:
    db = request("db", 1, 1, workers_of("db", namespace="other"), {(1, 1): WorkerSlot("a", 6700)})
    own_ns = Placement(namespace="ns", labels={"app": "web"}, required_anti_affinity=(term("db"),))
    cluster = snapshot(a=(6700, 6701), b=(6700, 6701))
    assert nodes(schedule([db, request("web", 4, 2, own_ns, first=10)], cluster)["web"]) == ["a", "b"]
    named = Placement(namespace="ns", labels={"app": "web"},
                      required_anti_affinity=(term("db", namespaces=frozenset({"other"})),))
    assert nodes(schedule([db, request("web", 4, 2, named, first=10)], cluster)["web"]) == ["b"]


def test_required_affinity_follows_the_matching_workers() -> None:
    db = request("db", 1, 1, workers_of("db"), {(1, 1): WorkerSlot("b", 6700)})
    near = Placement(namespace="ns", labels={"app": "web"}, required_affinity=(term("db"),))
    result = schedule([db, request("web", 4, 2, near, first=10)], snapshot(a=(6700, 6701), b=(6700, 6701)))
    # one slot is left on b: all four executors go there rather than to a
    assert set(result["web"].values()) == {WorkerSlot("b", 6701)}


def test_required_affinity_with_no_matching_worker_waits_unless_it_matches_itself() -> None:
    cluster = snapshot({"a": "z1", "b": "z1", "c": "z2"}, a=(6700,), b=(6700,), c=(6700, 6701))
    near_db = Placement(namespace="ns", labels={"app": "web"}, required_affinity=(term("db", ZONE),))
    assert schedule([request("web", 2, 2, near_db)], cluster)["web"] == {}
    # Kubernetes' rule for the first of a group with affinity to itself: it may go anywhere,
    # and the rest follow it into its zone
    together = Placement(namespace="ns", labels={"app": "web"}, required_affinity=(term("web", ZONE),))
    result = schedule([request("web", 3, 3, together)], cluster)["web"]
    zones = {"a": "z1", "b": "z1", "c": "z2"}
    assert len(set(result.values())) >= 2 and len({zones[n] for n in nodes(result)}) == 1


def test_affinity_to_a_topology_placed_later_in_the_round_converges_next_round() -> None:
    near_db = Placement(namespace="ns", labels={"app": "app"}, required_affinity=(term("db"),))
    db_only_on_b = frozenset({WorkerSlot("b", 6700)})
    cluster = snapshot(a=(6700, 6701), b=(6700, 6701))
    app = request("app", 2, 2, near_db, first=10)
    db = SchedulingRequest(topology_id="db", executors=executors(1), num_workers=1,
                           placement=workers_of("db"), allowed=db_only_on_b)
    first = schedule([app, db], cluster)
    assert first["app"] == {} and nodes(first["db"]) == ["b"]
    db_now = SchedulingRequest(topology_id="db", executors=executors(1), num_workers=1, placement=workers_of("db"),
                               allowed=db_only_on_b, current=first["db"], alive=frozenset(first["db"]))
    second = schedule([app, db_now], cluster)
    assert set(second["app"].values()) == {WorkerSlot("b", 6701)} and second["db"] == first["db"]


def test_preferred_node_affinity_fills_the_preferred_node_first() -> None:
    prefer_b = Placement(namespace="ns", labels={"app": "wc"}, node_weights={"b": 50, "c": 10})
    cluster = snapshot(a=(6700, 6701, 6702), b=(6700, 6701), c=(6700, 6701))
    result = schedule([request("wc", 6, 3, prefer_b)], cluster)["wc"]
    # without preferences the even scheduler takes one slot of each node
    assert sorted(s.node for s in set(result.values())) == ["b", "b", "c"]


def test_preferred_anti_affinity_outweighs_a_smaller_node_preference() -> None:
    spread = Placement(namespace="ns", labels={"app": "wc"}, node_weights={"b": 10},
                       preferred_anti_affinity=(term("wc", weight=100),))
    result = schedule([request("wc", 4, 2, spread)], snapshot(a=(6700, 6701), b=(6700, 6701)))["wc"]
    assert nodes(result) == ["a", "b"]
    # and the preferred pod affinity packs them
    pack = Placement(namespace="ns", labels={"app": "wc"}, preferred_affinity=(term("wc", weight=100),))
    result = schedule([request("wc", 4, 2, pack)], snapshot(a=(6700, 6701), b=(6700, 6701)))["wc"]
    assert len(set(result.values())) == 2 and len(set(nodes(result))) == 1


def test_a_current_slot_that_breaks_a_required_term_is_given_up() -> None:
    """A topology whose anti-affinity changed: its two workers on node a become one on a
    (the fuller one stays) and one on b."""
    own = Placement(namespace="ns", labels={"app": "wc"}, required_anti_affinity=(term("wc"),))
    current = {(1, 1): WorkerSlot("a", 6700), (2, 2): WorkerSlot("a", 6700), (3, 3): WorkerSlot("a", 6701)}
    result = schedule([request("wc", 3, 2, own, current)], snapshot(a=(6700, 6701), b=(6700, 6701)))["wc"]
    assert result[(1, 1)] == result[(2, 2)] == WorkerSlot("a", 6700)
    assert result[(3, 3)].node == "b"


def test_preferences_never_move_a_healthy_topology() -> None:
    prefer_b = Placement(namespace="ns", labels={"app": "wc"}, node_weights={"b": 100})
    current = {(1, 1): WorkerSlot("a", 6700), (2, 2): WorkerSlot("a", 6701)}
    result = schedule([request("wc", 2, 2, prefer_b, current)], snapshot(a=(6700, 6701), b=(6700, 6701)))["wc"]
    assert result == current


def test_the_later_topology_yields_when_current_slots_conflict() -> None:
    x = request("x", 1, 1, Placement(namespace="ns", labels={"app": "x"}, required_anti_affinity=(term("y"),)),
                {(1, 1): WorkerSlot("a", 6700)})
    y = request("y", 1, 1, workers_of("y"), {(5, 5): WorkerSlot("a", 6701)}, first=5)
    result = schedule([x, y], snapshot(a=(6700, 6701), b=(6700,)))
    assert result["x"] == {(1, 1): WorkerSlot("a", 6700)} and result["y"] == {(5, 5): WorkerSlot("b", 6700)}


def test_a_node_without_the_topology_key_is_no_domain() -> None:
    cluster = ClusterSnapshot(slots={"a": (6700, 6701), "b": (6700,)}, node_labels={"a": {}, "b": {"rack": "r1"}})
    own = Placement(namespace="ns", labels={"app": "wc"}, required_anti_affinity=(term("wc", "rack"),))
    # a has no rack: its workers share no domain with anything, so all three slots may be used
    assert len(set(schedule([request("wc", 3, 3, own)], cluster)["wc"].values())) == 3
    near = Placement(namespace="ns", labels={"app": "wc"}, required_affinity=(term("wc", "rack"),))
    # required affinity needs the key on the node
    assert nodes(schedule([request("wc", 3, 3, near)], cluster)["wc"]) == ["b"]


def test_label_selector_expressions() -> None:
    sel = LabelSelector(match_labels={"tier": "back"},
                        match_expressions=(LabelRequirement("app", "In", ("db", "cache")),
                                           LabelRequirement("canary", "DoesNotExist")))
    assert sel.matches({"tier": "back", "app": "db"})
    assert not sel.matches({"tier": "back", "app": "web"})
    assert not sel.matches({"tier": "back", "app": "db", "canary": "1"})
    assert not sel.matches({"app": "db"})
    assert LabelSelector().matches({"anything": "x"})
    assert LabelRequirement("n", "Gt", ("3",)).matches("4") and not LabelRequirement("n", "Lt", ("3",)).matches("x")
    # a term without a selector matches no worker
    assert not workers_of("a").selects(PodAffinityTerm(topology_key=HOST), workers_of("a"))
