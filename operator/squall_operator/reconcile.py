"""What a Topology resource's spec asks nimbus to do, decided without doing it.

`decide(resource, snapshot)` is purely computational, as kopf's `causes`: it reads the resource
(as the handlers last saw it, its spec validated) and a `Snapshot` of what the cluster holds for
its name, and returns intents, plain frozen dataclasses, in the order they are to be carried
out. `KubeNimbus.carry_out` does the I/O (nimbus's transitions, Events, the resource's record)
and stops at the first intent that fails; a rebalance nimbus rejects is recorded there, since
only carrying it out can tell.

    submit     the spec is valid and nothing of that name is stored
    conflict   the key is stored for another resource (its previous topology, still being killed)
    update     the spec changed in a way the running topology takes in place (squall.specchange:
               maxSpoutPending, messageTimeoutSecs, ticks live; a component's config by
               restarting its executors), or its graph changed: an upgrade (squall_operator.upgrade:
               drained, with a stateful topology's final checkpoint, the new graph launched;
               nimbus's Upgrading and Upgraded Events); a change that cannot be carried (a
               stateful component's task count, a stateful component dropped, state in the memory
               provider) is refused with a Warning, once per generation, and the topology keeps
               its stored spec
    rebalance  numWorkers or a parallelism changed (waiting the asked or the topology's wait)
    activate / deactivate   spec.active changed (activation waits for a roll to finish)
    kill       the resource is being deleted: Storm's kill, then, once nimbus removed it and no
               worker pod is left, the resource's finalizer may go (`removed`)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from squall import specchange
from squall.models.cluster import StormBase, TopologyStatus
from squall.models.v1alpha1 import Topology
from squall.topology_keys import TopologyKey, topology_key
from squall_operator import stored, upgrade
from squall_operator.resources import KILL_WAIT_ANNOTATION, REBALANCE_WAIT_ANNOTATION, Resource, owns


@dataclass(frozen=True)
class Snapshot:
    """What one round read of the cluster for a resource's name: the stored topology (None:
    nothing stored) and, for a resource being deleted whose topology is gone, whether any of its
    worker pods is left (`needs_pods` says when that is read)."""

    base: StormBase | None
    pods_left: bool = False


@dataclass(frozen=True)
class Record:
    """Fields of the resource's record in the registry to set (`Resource` attribute -> value)."""

    fields: dict[str, Any]


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Submit:
    topology: Topology


@dataclass(frozen=True)
class Rebalance:
    """Storm's rebalance; `workers` None: unchanged; `executors`: only the components changed."""

    workers: int | None
    executors: dict[str, int] | None
    wait: float


@dataclass(frozen=True)
class Update:
    """A new spec (`Nimbus.update`): of the running graph, applied in place (live settings, and
    restarted executors of the components whose config changed; squall.specchange), or of
    another graph, an upgrade (squall_operator.upgrade)."""

    topology: Topology


@dataclass(frozen=True)
class Activate:
    pass


@dataclass(frozen=True)
class Deactivate:
    pass


@dataclass(frozen=True)
class Kill:
    wait: float


@dataclass(frozen=True)
class Teardown:
    """Remove what workers still wrote under the name after nimbus removed the topology."""


Intent = Record | Event | Submit | Update | Rebalance | Activate | Deactivate | Kill | Teardown


@dataclass(frozen=True)
class Decision:
    intents: tuple[Intent, ...] = field(default_factory=tuple)


def storm_key(res: Resource, bare: StormBase | None) -> TopologyKey:
    """The key of res's topology in ZooKeeper: NAMESPACE~NAME (squall.topology_keys), or
    its bare name when `bare`, what is stored under the bare name (by an operator older than
    namespaced keys), was submitted for res: that topology keeps its key, its workers untouched."""
    return topology_key(res.name) if owns(res, bare) else topology_key(res.name, res.namespace)


def needs_pods(res: Resource, base: StormBase | None) -> bool:
    """Whether `decide` reads `Snapshot.pods_left`: a deleted resource whose topology is gone."""
    return res.deleting and not (base is not None and owns(res, base))


def decide(res: Resource, snap: Snapshot) -> list[Intent]:
    """The intents that bring the stored topology to what `res` asks (see the module doc)."""
    if res.deleting:
        return [Record({"conflict": None}), *decide_kill(res, snap)]
    base = snap.base
    mine = owns(res, base)
    observed = Record({"observed_generation": res.generation})
    first = Record({"conflict": None, "owned": mine})
    if res.problem is not None or res.topology is None:
        return [first, observed]
    topology = res.topology
    spec = topology.spec
    topo = res.name
    if base is None:
        return [first, Submit(topology), Record({"owned": True, "observed_generation": res.generation}),
                Event("Normal", "Submitted",
                      f"submitted: {len(spec.components)} components, {spec.num_workers} workers"
                      + ("" if spec.active else ", spouts inactive"))]
    if not mine:
        if base.status is TopologyStatus.KILLED:
            conflict = f"waiting for the previous topology named {topo!r} to be removed (it is being killed)"
        else:
            owner = (base.topology.get("metadata") or {}).get("uid")
            conflict = (f"a topology named {topo!r} of another resource (uid {owner}) still runs in "
                        f"namespace {res.namespace!r}: it is killed once the operator sees it has no resource")
        return [Record({"conflict": conflict, "owned": False})]
    if base.status in (TopologyStatus.KILLED, TopologyStatus.REBALANCING):
        return [first]
    out: list[Intent] = [first]
    running = stored.topology(base)
    change = specchange.classify(running.spec, spec)
    refused = upgrade.refusal(running, topology, change) if change.kind is specchange.Kind.UPGRADE else None
    why = None if change.kind is specchange.Kind.NONE or change.applies_in_place else (
        f"{change.describe()}; refused: {refused or 'it cannot be carried'}: the topology keeps running its "
        "stored graph and config, while numWorkers, parallelism and active still apply (delete the resource "
        "and apply it again to run the new graph)")
    if change.kind is specchange.Kind.UPGRADE and refused is None:
        why = None
    if why != res.refused_change:  # condition SpecChangeRefused (KubeNimbus.write_status)
        out.append(Record({"refused_change": why}))
    if change.applies_in_place:
        out += [Update(topology), Event("Normal", "ConfigUpdated", change.describe())]
    elif change.kind is specchange.Kind.UPGRADE and refused is None:
        # the rest of the spec (a rebalance, the activation) is decided once the upgrade is done
        return [*out, Update(topology), observed]
    elif why is not None and res.ignored_generation != res.generation:
        out += [Record({"ignored_generation": res.generation}), Event("Warning", "SpecChangeRefused", why)]
    executors = {c.name: c.parallelism for c in spec.components}
    changed = {c: n for c, n in executors.items() if base.component_executors.get(c) != n}
    # spec.autoscale owns numWorkers within its bounds: one outside them (a `kubectl scale`) is
    # rebalanced to clamped, and squall_operator.autoscaler writes it back so
    want = spec.num_workers if spec.autoscale is None else min(
        max(spec.num_workers, spec.autoscale.min_workers), spec.autoscale.max_workers)
    workers = want if want != base.num_workers else None
    if changed or workers is not None:
        if res.rejected_generation == res.generation:
            return out
        asked = res.rebalance_wait[1] if res.rebalance_wait and res.rebalance_wait[0] == res.generation else None
        wait = running.spec.rebalance_wait if asked is None else asked
        parts = [f"numWorkers {base.num_workers} -> {workers}"] if workers is not None else []
        parts += [f"{c} parallelism {base.component_executors.get(c)} -> {n}" for c, n in sorted(changed.items())]
        return [*out, Rebalance(workers, changed or None, wait),
                Event("Normal", "RebalanceRequested",
                      f"rebalance ({', '.join(parts)}): spouts deactivated, reassigning in "
                      f"{wait:g}s ({'rebalanceWaitSecs' if asked is None else REBALANCE_WAIT_ANNOTATION})"),
                observed]
    if spec.active and base.status is TopologyStatus.INACTIVE and res.roll is None:
        out += [Activate(), Event("Normal", "Activated", "spouts activated")]
    elif not spec.active and base.status is TopologyStatus.ACTIVE:
        out += [Deactivate(), Event("Normal", "Deactivated", "spouts deactivated; workers stay up")]
    return [*out, observed]


def decide_kill(res: Resource, snap: Snapshot) -> list[Intent]:
    """A resource being deleted: Storm's kill of its topology, then its removal once nimbus
    removed the topology and no worker pod is left."""
    base = snap.base
    mine = owns(res, base)
    out: list[Intent] = [Record({"owned": mine})]
    if base is not None and mine:
        if base.status is not TopologyStatus.KILLED:
            asked = res.kill_wait
            wait = stored.topology(base).spec.kill_wait if asked is None else asked
            out += [Kill(wait), Event("Normal", "Killing",
                                      f"spouts deactivated; removing the workers in {wait:g}s "
                                      f"({'killWaitSecs' if asked is None else KILL_WAIT_ANNOTATION})")]
        return out
    # nothing of ours in ZooKeeper: done once the worker pods are gone too
    if snap.pods_left or res.removed:
        return out
    if base is None:
        # a worker that was still stopping may have written a last heartbeat or error after the
        # topology was torn down; no pod is left to write more
        out.append(Teardown())
    return [*out, Event("Normal", "Killed", "worker pods and ZooKeeper state removed"), Record({"removed": True})]


__all__ = [
    "Activate",
    "Deactivate",
    "Event",
    "Intent",
    "Kill",
    "Rebalance",
    "Record",
    "Snapshot",
    "Submit",
    "Teardown",
    "Update",
    "decide",
    "decide_kill",
    "needs_pods",
    "storm_key",
]
