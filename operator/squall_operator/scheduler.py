"""Storm's EvenScheduler, with DefaultScheduler's repair of uneven topologies, as a pure function.

Nimbus reads the cluster state, calls `schedule` on an in-memory snapshot, compares the result
with what ZooKeeper holds (`diff_assignment`) and writes only what changed. The decision itself
does no I/O and reads no clock, so every placement rule is tested with plain values.

The rules, per topology and in the order the requests are given:

1. A slot serves at most one topology. Before anything is placed, every topology's *usable*
   current slots that hold a needed executor are reserved (at most ``min(num_workers,
   executors)`` of them: a topology shrinking to fewer workers gives up the rest first), so a
   topology early in the order never takes the slot a healthy topology later in the order
   runs on. If two current assignments name the same slot, the topology earlier in the order
   gets it.
0. A topology sees only the slots it is *allowed* (`SchedulingRequest.allowed`: the nodes its
   pods may use, as Kubernetes decides it: taints, node selector, required node affinity,
   allocatable resources); a current slot it may no longer use counts as gone (rule 2).
   Its `Placement` adds Kubernetes' inter-pod rules, read against the workers of every
   topology (one pod per slot, with the topology's namespace and pod labels) and the nodes'
   labels (`ClusterSnapshot.node_labels`): a slot breaking a *required* pod affinity or
   anti-affinity term (its own, or an anti-affinity term of a worker already there) is never
   picked, and a current slot that breaks one is given up (the topology later in the order
   yields); among the slots that may be picked, nodes are ranked by the *preferred* weights
   (rule 4).
2. A current slot is usable when it still exists in the cluster and every needed executor on it
   is alive. A slot with a dead executor is freed as a whole, alive executors included (Storm
   frees the worker: executors of a worker share its heartbeat, so one dead executor means the
   worker is in trouble). Such a slot is *suspect*: it is picked again, by any topology, only
   when no other free slot is left. Executors the topology no longer needs are ignored here
   and vanish from the result.
3. The target is ``T = min(num_workers, executors needed, usable slots + free slots)``. A
   topology whose needed executors all sit on usable slots, using exactly ``T`` slots, is
   returned as it is: a healthy topology is never moved, even if its layout is uneven.
4. Otherwise it gets ``T`` slots: its usable slots holding needed executors first (when it
   holds more than ``T``, the fullest ones, spread across nodes), then its slots holding only
   executors no longer needed, then free slots spread across nodes. Spreading is
   Storm's sort-slots (interleave the nodes round-robin, the node with the most free slots
   first, ties by name, ports ascending) extended to count the slots the topology already holds
   on each node; suspect slots come after every other free slot. A node's preference score
   (the weights of the preferred node-affinity terms it matches, plus the weight of each
   preferred pod-affinity term per matching worker in its domain, minus the same for preferred
   anti-affinity, counting the slots picked so far) outranks the spreading: each pick goes to
   the best-scored node, spread among equals. When the required terms leave fewer slots than
   ``T``, the topology gets the slots that are left.
5. Executors are spread evenly: each slot gets ``n // T`` executors and ``n % T`` slots one
   more. An executor stays on its current slot while that slot is chosen and below its share;
   the others, in sorted order, go to the least-loaded slot (ties in the order of step 4).

When slots are short, a topology gets what is there (all its executors on fewer workers, or
nothing when there is no slot at all); a later call with more slots brings it to ``T``.

Rebalance needs no flag: since every call converges to ``T`` evenly loaded slots, nimbus
rebalances by calling `schedule` with the new ``num_workers`` and the new executor set. Storm
frees all of the topology's slots and starts from scratch; Squall prefers the current slots and
keeps executors where the new even layout allows, which saves worker restarts.

A dead executor can land on its old slot again when that slot is the only one left; the
assignment is then unchanged and the worker's supervisor (the kubelet, locally the local
cluster) restarts it in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from squall.models.cluster import ExecutorId, WorkerSlot
from squall.topology_keys import TopologyKey

__all__ = [
    "AssignmentDiff",
    "ClusterSnapshot",
    "LabelRequirement",
    "LabelSelector",
    "Placement",
    "PodAffinityTerm",
    "SchedulingRequest",
    "diff_assignment",
    "schedule",
]


@dataclass(frozen=True)
class LabelRequirement:
    """One of Kubernetes' set-based requirements on a label: `In`, `NotIn`, `Exists`,
    `DoesNotExist` (and `Gt`, `Lt`, which only node selectors use)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if op == "Gt" else have < bound
        return False


@dataclass(frozen=True)
class LabelSelector:
    """Kubernetes' LabelSelector: every `match_labels` pair and every requirement must hold; an
    empty selector matches every pod."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels.get(r.key)) for r in self.match_expressions
        )


@dataclass(frozen=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term: the pods `selector` matches in `namespaces` (empty: the
    topology's own), counted per domain of the node label `topology_key` (nodes with the same
    value of it share a domain; a node without it is in none). `weight` is for preferred terms.
    A `selector` of None matches no pod (Kubernetes' rule for a missing labelSelector)."""

    topology_key: str
    selector: LabelSelector | None = None
    namespaces: frozenset[str] = frozenset()
    weight: int = 0


@dataclass(frozen=True)
class Placement:
    """Where one topology's workers want to run, beyond the slots they are allowed: the
    Kubernetes placement rules nimbus honours itself, since worker pods are pinned with
    `nodeName` and no Kubernetes scheduler looks at them."""

    # the namespace and labels of the topology's worker pods (the labels every worker has)
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # node -> the summed weights of the preferred node-affinity terms it matches
    node_weights: Mapping[str, int] = field(default_factory=dict)
    required_affinity: tuple[PodAffinityTerm, ...] = ()
    required_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[PodAffinityTerm, ...] = ()

    def selects(self, term: PodAffinityTerm, other: Placement) -> bool:
        """`term` (one of this topology's) matches the workers of `other`."""
        namespaces = term.namespaces or {self.namespace}
        return (term.selector is not None and other.namespace in namespaces
                and term.selector.matches(other.labels))

    @property
    def ranks(self) -> bool:
        return bool(self.node_weights or self.preferred_affinity or self.preferred_anti_affinity)


NO_PLACEMENT: Placement = Placement()


@dataclass(frozen=True)
class SchedulingRequest:
    """What one topology needs now, and where it runs."""

    # the topology's key (squall.topology_keys)
    topology_id: TopologyKey
    # every executor the topology needs now
    executors: tuple[ExecutorId, ...]
    num_workers: int
    # existing assignment; may name executors no longer needed, or slots that are gone
    current: Mapping[ExecutorId, WorkerSlot] = field(default_factory=dict)
    # executors whose heartbeats are fresh (or that are still launching)
    alive: frozenset[ExecutorId] = frozenset()
    # the slots this topology's workers may use (their nodes' taints, selectors, affinity and
    # resources allow them; see squall_operator.pods.allowed_slots); None: every slot
    allowed: frozenset[WorkerSlot] | None = None
    # pod affinity, anti-affinity and preferred node affinity (rules 0 and 4)
    placement: Placement = NO_PLACEMENT

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise ValueError(
                f"topology {self.topology_id}: num_workers must be at least 1, "
                f"got {self.num_workers}"
            )


@dataclass(frozen=True)
class ClusterSnapshot:
    """The slots the healthy nodes offer."""

    # healthy node -> ports it offers
    slots: Mapping[str, tuple[int, ...]]
    # node -> its labels (the domains of pod affinity's topology keys)
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def all_slots(self) -> frozenset[WorkerSlot]:
        return frozenset(
            WorkerSlot(node, port) for node, ports in self.slots.items() for port in ports
        )


@dataclass(frozen=True)
class AssignmentDiff:
    """How a new assignment differs from the old one, executor by executor."""

    # executor -> its slot, for executors only in the new assignment
    added: dict[ExecutorId, WorkerSlot]
    # executor -> its old slot, for executors only in the old assignment
    removed: dict[ExecutorId, WorkerSlot]
    # executor -> (old slot, new slot)
    moved: dict[ExecutorId, tuple[WorkerSlot, WorkerSlot]]
    unchanged: frozenset[ExecutorId]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.moved)


def diff_assignment(
    old: Mapping[ExecutorId, WorkerSlot], new: Mapping[ExecutorId, WorkerSlot]
) -> AssignmentDiff:
    """Compare two assignments; nimbus writes (and restamps start times) only when `changed`."""
    added = {e: s for e, s in new.items() if e not in old}
    removed = {e: s for e, s in old.items() if e not in new}
    moved = {e: (old[e], s) for e, s in new.items() if e in old and old[e] != s}
    unchanged = frozenset(e for e, s in new.items() if e in old and old[e] == s)
    return AssignmentDiff(added=added, removed=removed, moved=moved, unchanged=unchanged)


@dataclass(frozen=True)
class _Current:
    """One topology's current slots, sorted into usable and suspect (rules 1 and 2)."""

    # usable slot -> the needed executors on it (possibly none)
    usable: dict[WorkerSlot, list[ExecutorId]]
    # existing slots freed because a needed executor on them is dead
    suspect: frozenset[WorkerSlot]


def schedule(
    requests: Sequence[SchedulingRequest], cluster: ClusterSnapshot
) -> dict[str, dict[ExecutorId, WorkerSlot]]:
    """Place every requested topology's executors on the cluster's slots (see the module doc).

    Returns topology id -> executor -> slot, for every request (an empty mapping when no slot
    could be given).
    """
    ids = [r.topology_id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate topology ids in scheduling requests: {sorted(ids)}")
    existing = cluster.all_slots()

    claimed: set[WorkerSlot] = set()
    currents: list[_Current] = []
    for request in requests:
        current = _sort_current(request, _usable_by(request, existing), claimed)
        claimed.update(slot for slot, executors in current.usable.items() if executors)
        currents.append(current)
    rules = _Rules(cluster.node_labels)
    currents = rules.keep_fitting(requests, currents)
    claimed = {slot for c in currents for slot, executors in c.usable.items() if executors}
    suspect = frozenset(slot for c in currents for slot in c.suspect) - claimed

    # `taken` holds the slots reserved or handed out so far. A usable slot holding only
    # executors no longer needed is a preference, not a reservation: the topology gets it
    # back only if no topology before it took it; if it does not use it, topologies later in
    # the order may.
    taken = set(claimed)
    result: dict[str, dict[ExecutorId, WorkerSlot]] = {}
    for request, current in zip(requests, currents):
        usable = {s: ex for s, ex in current.usable.items() if ex or s not in taken}
        free = _usable_by(request, existing) - taken - set(usable)
        placed = _schedule_topology(request, usable, free, suspect, rules)
        used = set(placed.values())
        taken.difference_update(usable.keys() - used)
        taken.update(used)
        rules.add(request.placement, (s for s in used if not current.usable.get(s)))
        result[request.topology_id] = placed
    return result


@dataclass(frozen=True)
class _Pod:
    """A worker: the node of its slot and its topology's placement."""

    node: str
    placement: Placement


class _Rules:
    """Kubernetes' inter-pod affinity rules over the workers placed so far (one pod per slot)."""

    def __init__(self, node_labels: Mapping[str, Mapping[str, str]]) -> None:
        self.node_labels = node_labels
        self.pods: list[_Pod] = []

    def add(self, placement: Placement, slots: Iterable[WorkerSlot]) -> None:
        self.pods.extend(_Pod(slot.node, placement) for slot in sorted(slots))

    def _domain(self, node: str, key: str) -> str | None:
        return self.node_labels.get(node, {}).get(key)

    def _together(self, a: str, b: str, key: str) -> bool:
        domain = self._domain(a, key)
        return domain is not None and domain == self._domain(b, key)

    def constrains(self, placement: Placement) -> bool:
        """Whether any rule could refuse or rank a worker of `placement` (else: skip them)."""
        return bool(placement.ranks or placement.required_affinity
                    or placement.required_anti_affinity
                    or any(q.placement.required_anti_affinity for q in self.pods))

    def fits(self, placement: Placement, node: str, pods: Sequence[_Pod],
             affine: Sequence[_Pod] | None = None) -> bool:
        """A worker of `placement` may run on `node` next to `pods`: no required anti-affinity
        term, its own or theirs, puts them in one domain, and each required affinity term has a
        matching worker of `affine` (default: `pods`) in the node's domain. As in Kubernetes,
        the first of a group of workers with affinity to each other may go anywhere the terms'
        keys are: when no worker matches any term and the worker matches all of its own."""
        for term in placement.required_anti_affinity:
            if any(placement.selects(term, q.placement) and self._together(q.node, node, term.topology_key)
                   for q in pods):
                return False
        for q in pods:
            for term in q.placement.required_anti_affinity:
                if q.placement.selects(term, placement) and self._together(q.node, node, term.topology_key):
                    return False
        terms = placement.required_affinity
        if not terms:
            return True
        if any(self._domain(node, t.topology_key) is None for t in terms):
            return False
        affine = pods if affine is None else affine
        if all(any(placement.selects(t, q.placement) and self._together(q.node, node, t.topology_key)
                   for q in affine) for t in terms):
            return True
        return all(placement.selects(t, placement) for t in terms) and not any(
            placement.selects(t, q.placement) and self._domain(q.node, t.topology_key) is not None
            for t in terms for q in affine)

    def score(self, placement: Placement, node: str, pods: Sequence[_Pod]) -> int:
        """The node's preference: its preferred node-affinity weights, plus each preferred
        pod-affinity term's weight per matching worker in the node's domain, minus the same for
        preferred anti-affinity."""
        total = placement.node_weights.get(node, 0)
        for sign, terms in ((1, placement.preferred_affinity), (-1, placement.preferred_anti_affinity)):
            for term in terms:
                total += sign * term.weight * sum(
                    1 for q in pods
                    if placement.selects(term, q.placement) and self._together(q.node, node, term.topology_key))
        return total

    def keep_fitting(self, requests: Sequence[SchedulingRequest], currents: Sequence[_Current]) -> list[_Current]:
        """Give up the current slots that break a required term (rule 0): in request order, a
        slot is kept when it fits next to the slots kept so far (affinity is read against every
        current worker). The kept workers become `pods`."""
        held = [(slot, _Pod(slot.node, r.placement))
                for r, c in zip(requests, currents) for slot, ex in c.usable.items() if ex]
        kept: list[_Current] = []
        for request, current in zip(requests, currents):
            placement = request.placement
            usable = dict(current.usable)
            if self.constrains(placement):
                for slot in _fullest(current.usable, len(current.usable)):
                    affine = [q for s, q in held if s != slot]
                    if self.fits(placement, slot.node, self.pods, affine):
                        self.pods.append(_Pod(slot.node, placement))
                    else:
                        del usable[slot]
                        held = [(s, q) for s, q in held if s != slot]
            else:
                self.add(placement, (s for s, ex in usable.items() if ex))
            kept.append(_Current(usable=usable, suspect=current.suspect))
        return kept


def _usable_by(request: SchedulingRequest, existing: frozenset[WorkerSlot]) -> frozenset[WorkerSlot]:
    return existing if request.allowed is None else existing & request.allowed


def _sort_current(
    request: SchedulingRequest, existing: frozenset[WorkerSlot], claimed: set[WorkerSlot]
) -> _Current:
    needed = set(request.executors)
    on_slot: dict[WorkerSlot, list[ExecutorId]] = {}
    for executor, slot in request.current.items():
        executors = on_slot.setdefault(slot, [])
        if executor in needed:
            executors.append(executor)
    usable: dict[WorkerSlot, list[ExecutorId]] = {}
    suspect: set[WorkerSlot] = set()
    for slot, executors in sorted(on_slot.items()):
        if slot not in existing or slot in claimed:
            continue
        if all(e in request.alive for e in executors):
            usable[slot] = sorted(executors)
        else:
            suspect.add(slot)
    # a topology holding more slots than it may use (fewer workers now) gives up the surplus
    # before any slot is handed out, so that topologies earlier in the order can have it
    keep = _fullest(usable, min(request.num_workers, len(needed)))
    usable = {slot: ex for slot, ex in usable.items() if not ex or slot in keep}
    return _Current(usable=usable, suspect=frozenset(suspect))


def _fullest(usable: Mapping[WorkerSlot, Sequence[ExecutorId]], count: int) -> list[WorkerSlot]:
    """The usable slots holding needed executors, at most `count` of them: the fullest,
    spread across nodes."""
    held = [slot for slot, executors in usable.items() if executors]
    if len(held) <= count:
        return held
    return _spread(held, count, {}, lambda s: (-len(usable[s]), s.port))


def _schedule_topology(
    request: SchedulingRequest,
    usable: Mapping[WorkerSlot, Sequence[ExecutorId]],
    free: frozenset[WorkerSlot],
    suspect: frozenset[WorkerSlot],
    rules: _Rules | None = None,
) -> dict[ExecutorId, WorkerSlot]:
    """Rules 3 to 5 for one topology: `usable` maps its usable slots to the needed executors
    on them, `free` holds the slots no topology has; `rules` the inter-pod rules (rule 0)."""
    needed = sorted(set(request.executors))
    target = min(request.num_workers, len(needed), len(usable) + len(free))

    kept = {e: slot for slot, executors in usable.items() for e in executors}
    if len(kept) == len(needed) and len(set(kept.values())) == target:
        return kept
    if target == 0:
        return {}

    chosen = _fullest(usable, target)
    fits: Callable[[str, Sequence[str]], bool] | None = None
    score: Callable[[str, Sequence[str]], int] | None = None
    if rules is not None and rules.constrains(request.placement):
        placement, held, first_new = request.placement, rules, len(chosen)

        def pods(picked: Sequence[str]) -> list[_Pod]:
            new = [s.node for s in chosen[first_new:]] + list(picked)
            return held.pods + [_Pod(node, placement) for node in new]

        def fits(node: str, picked: Sequence[str]) -> bool:
            return held.fits(placement, node, pods(picked))

        def score(node: str, picked: Sequence[str]) -> int:
            return held.score(placement, node, pods(picked))

    # then slots that hold only executors no longer needed (a worker runs there already),
    # then free slots, suspect ones last
    empty = [slot for slot, executors in usable.items() if not executors]
    for pool in (empty, free - suspect, free & suspect):
        missing = target - len(chosen)
        chosen += _spread(sorted(pool), missing, _node_load(chosen), lambda s: (s.port,), fits, score)
    if not chosen:
        return {}
    return _distribute(needed, chosen, kept)


def _node_load(slots: Iterable[WorkerSlot]) -> dict[str, int]:
    load: dict[str, int] = {}
    for slot in slots:
        load[slot.node] = load.get(slot.node, 0) + 1
    return load


def _spread(
    candidates: Iterable[WorkerSlot],
    count: int,
    node_load: Mapping[str, int],
    rank: Callable[[WorkerSlot], tuple[int, ...]],
    fits: Callable[[str, Sequence[str]], bool] | None = None,
    score: Callable[[str, Sequence[str]], int] | None = None,
) -> list[WorkerSlot]:
    """Pick `count` slots across nodes: each pick from the node holding fewest picks so far
    (`node_load` counts slots already held), then the node with most candidates left, then by
    name; within a node by `rank`. With an empty `node_load` this is Storm's sort-slots.
    `fits(node, nodes picked)` leaves out nodes a pick may not go to now; `score(node, nodes
    picked)` ranks before the spreading (highest first)."""
    pools: dict[str, list[WorkerSlot]] = {}
    for slot in candidates:
        pools.setdefault(slot.node, []).append(slot)
    for pool in pools.values():
        pool.sort(key=rank)
    load = dict(node_load)
    picks: list[WorkerSlot] = []
    while len(picks) < count and pools:
        picked = [s.node for s in picks]
        nodes = [n for n in pools if fits is None or fits(n, picked)]
        if not nodes:
            break
        scores = {n: score(n, picked) if score is not None else 0 for n in nodes}
        node = min(nodes, key=lambda n: (-scores[n], load.get(n, 0), -len(pools[n]), n))
        picks.append(pools[node].pop(0))
        if not pools[node]:
            del pools[node]
        load[node] = load.get(node, 0) + 1
    return picks


def _distribute(
    executors: Sequence[ExecutorId],
    slots: Sequence[WorkerSlot],
    kept: Mapping[ExecutorId, WorkerSlot],
) -> dict[ExecutorId, WorkerSlot]:
    """Spread `executors` evenly over `slots`, leaving executors on their kept slot while the
    slot is below its share (rule 5)."""
    share, extra = divmod(len(executors), len(slots))
    order = {slot: i for i, slot in enumerate(slots)}
    load = dict.fromkeys(slots, 0)
    above = 0  # slots holding share + 1
    placed: dict[ExecutorId, WorkerSlot] = {}
    for executor in executors:
        slot = kept.get(executor)
        if slot is None or slot not in load:
            continue
        if load[slot] < share or (load[slot] == share and above < extra):
            placed[executor] = slot
            load[slot] += 1
            if load[slot] == share + 1:
                above += 1
    # least-loaded first keeps every load within one of the others: loads are at most
    # share + 1 here, and at most `extra` slots hold share + 1
    for executor in executors:
        if executor not in placed:
            slot = min(slots, key=lambda s: (load[s], order[s]))
            placed[executor] = slot
            load[slot] += 1
    return placed
