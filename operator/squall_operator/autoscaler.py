"""`spec.autoscale` carried out: the operator's thin shell around `autoscale.decide`.

At each status write `Autoscaler.status_block` reads what the decision needs (the bolts'
samples in the heartbeats, whether the topology is settled, the slots the nodes offer it),
asks `autoscale.decide`, and acts on it the way an HPA does: the new `numWorkers` and
parallelism go into the Topology's spec (one JSON patch, guarded by `test` operations on what it
decided on, so a user's edit in between wins), where `kubectl get` shows them and the next
reconcile round turns them into Storm's rebalance (`reconcile.decide`); one Event per decision
says why. A `numWorkers` outside [minWorkers, maxWorkers] (a `kubectl scale`, an edit) is
written back clamped, with a Warning Event; `reconcile.decide` rebalances to the clamped value
meanwhile. It returns `status.autoscale`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from squall.models.cluster import StormBase, TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall.topology_keys import TopologyKey
from squall_operator import autoscale, stored
from squall_operator.resources import Resource

log = logging.getLogger("squall.operator")

__all__ = ["Autoscaler", "Host"]


class Host(Protocol):
    """What the autoscaler uses of the operator (KubeNimbus)."""

    def post(self, res: Resource, type_: str, reason: str, message: str) -> None: ...
    def patch_spec(self, res: Resource, ops: list[dict[str, Any]]) -> None: ...
    def key(self, res: Resource) -> TopologyKey: ...
    def allowed_slots(self, topo: TopologyKey, base: StormBase) -> frozenset[WorkerSlot] | None: ...
    def slots_taken_by_others(self, topo: TopologyKey) -> set[WorkerSlot]: ...


class Autoscaler:
    """Keeps each topology's meter (in memory: a restarted operator measures afresh; the
    decision's own state is in `status.autoscale`)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.meters: dict[str, autoscale.Meter] = {}
        # uid -> the generation whose numWorkers was written back clamped
        self.clamped: dict[str, int] = {}

    def forget(self, uid: str, clamped: bool = False) -> None:
        self.meters.pop(uid, None)
        if clamped:
            self.clamped.pop(uid, None)

    def status_block(self, res: Resource, base: StormBase | None,
                     beats: Mapping[WorkerSlot, WorkerHeartbeat], now: float) -> dict[str, Any] | None:
        spec = res.topology.spec if res.topology is not None else None
        if spec is None or spec.autoscale is None or base is None or res.deleting:
            self.forget(res.uid, clamped=True)
            return None
        settings = autoscale.Settings.of(spec.autoscale)
        if not self._clamped(res, spec.num_workers, settings):
            self.forget(res.uid)
            return dict(res.status.get("autoscale") or {})
        running = stored.topology(base).spec
        # the bolts both running and in the spec (the parallelism the autoscaler may write)
        asked = {b.name for b in spec.bolts}
        bolts = {b.name: b for b in running.bolts if b.name in asked}
        settled = (base.status is TopologyStatus.ACTIVE and res.roll is None
                   and res.observed_generation == res.generation
                   and base.num_workers == spec.num_workers
                   and all(base.component_executors.get(c.name) == c.parallelism for c in spec.components))
        load: Mapping[str, float] | None = None
        busy: Mapping[str, float] | None = None
        if settled:
            meter = autoscale.measure(self.meters.get(res.uid), autoscale.samples(beats.values(), bolts), now)
            self.meters[res.uid] = meter
            busy = meter.busy
            load = (autoscale.lags(beats.values(), (s.name for s in running.spouts)) if settings.signal == "lag"
                    else meter.of(settings.signal))
        else:
            # a rebalance or roll: the figures after it start afresh
            self.forget(res.uid)
        slots = None
        if load and max(load.values()) > settings.target:
            slots = self._offered(res, base)
        figures = autoscale.Figures(
            active=settled, workers=base.num_workers, load=load,
            parallelism={c: base.component_executors.get(c, b.parallelism) for c, b in bolts.items()},
            tasks={c: b.tasks for c, b in bolts.items()}, slots=slots, busy=busy)
        decision = autoscale.decide(res.status.get("autoscale"), figures, now, settings)
        if decision.reason is None:
            return decision.state
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/spec/numWorkers", "value": spec.num_workers},
                                     {"op": "replace", "path": "/spec/numWorkers", "value": decision.workers}]
        where = {b.get("name"): i for i, b in enumerate(res.spec.get("bolts") or []) if isinstance(b, dict)}
        for comp, parallelism in sorted(decision.parallelism.items()):
            if comp in where:
                i = where[comp]
                ops += [{"op": "test", "path": f"/spec/bolts/{i}/name", "value": comp},
                        {"op": "add", "path": f"/spec/bolts/{i}/parallelism", "value": parallelism}]
        try:
            self.host.patch_spec(res, ops)
        except Exception as exc:
            # the spec changed meanwhile (a test failed) or the API server is away: decide again
            log.warning("topology %s/%s: cannot write the autoscaler's decision (%s): %s",
                        res.namespace, res.name, decision.message, exc)
            return dict(res.status.get("autoscale") or {})
        log.info("topology %s/%s: %s: %s", res.namespace, res.name, decision.reason, decision.message)
        self.host.post(res, "Normal", decision.reason, decision.message)
        self.forget(res.uid)
        return decision.state

    def _clamped(self, res: Resource, workers: int, settings: autoscale.Settings) -> bool:
        """Whether numWorkers is within the bounds; if not, write it back clamped (once per
        generation, with a Warning Event)."""
        bounded = autoscale.clamp(workers, settings)
        if bounded == workers:
            return True
        if self.clamped.get(res.uid) == res.generation:
            return False
        try:
            self.host.patch_spec(res, [{"op": "test", "path": "/spec/numWorkers", "value": workers},
                                       {"op": "replace", "path": "/spec/numWorkers", "value": bounded}])
        except Exception as exc:
            log.warning("topology %s/%s: cannot clamp numWorkers to %d: %s", res.namespace, res.name, bounded, exc)
            return False
        self.clamped[res.uid] = res.generation
        self.host.post(res, "Warning", "AutoscaleClamped",
                       f"numWorkers {workers} -> {bounded}: spec.autoscale keeps it within "
                       f"[{settings.min_workers}, {settings.max_workers}] (minWorkers, maxWorkers)")
        return False

    def _offered(self, res: Resource, base: StormBase) -> int | None:
        """The most workers the nodes can give the topology: the slots its pods may use that no
        other topology holds (None: the nodes are not known yet)."""
        allowed = self.host.allowed_slots(self.host.key(res), base)
        if allowed is None:
            return None
        return len(allowed - self.host.slots_taken_by_others(self.host.key(res)))
