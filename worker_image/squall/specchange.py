"""What kind of change a new spec is for a running topology, decided on plain specs.

One decision for both paths that change a running topology, the operator's reconcile (a
`kubectl apply` or `patch` of the Topology) and `squall update topology.yaml` on the local
cluster, and the same table the worker applies a stored change with (`squall.worker.hotupdate`):
so the two paths cannot disagree on what is live and what is not.

    none     nothing the running topology is made from changed (or only what other paths
             carry: numWorkers and parallelism (rebalance), active, the worker pod settings
             (a roll), health, upgrade and autoscale (read by the operator))
    live     only what the engine reads while it runs: maxSpoutPending (the spouts' bound),
             messageTimeoutSecs (the spouts' and ackers' timers), tickTupleFreqSecs and a
             component's `topology.tick.tuple.freq.secs` (the bolts' tick), killWaitSecs and
             rebalanceWaitSecs (read when a kill or rebalance starts)
    restart  a config key a component gets in the `conf` of its `open` / `prepare` changed
             (`spec.config` or the component's `config`): that component's executors restart
             in place, the old ones retiring as in a rebalance (a bolt finishes its inbox, a
             spout its pending trees), so nothing is lost
    upgrade  the graph changed (a component added or removed, a class, an input, a grouping,
             fields, outputs, a window, numTasks, numAckers, stateful), a key each worker reads
             once at its start changed, or a component of a stateful topology would restart
             (its state moves only with a checkpoint): drain, checkpoint, resubmit
    refused  the change cannot be carried at all: a stateful component's task count changed (its
             state is kept per task: `<component>#<index>`), or a stateful component was
             removed or made stateless (its state would be dropped; kill the topology and
             submit the new one to start without it)

Pure: no I/O, no clock. `classify(old, new)` takes the running spec and the asked one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from squall.models.v1alpha1 import ComponentSpec, Topology, TopologySpec

TICK_KEY = "topology.tick.tuple.freq.secs"

# spec fields that other paths change on a running topology (not this decision's)
OTHER_PATHS = frozenset({"numWorkers", "active", "worker", "health", "upgrade", "autoscale"})
# spec fields the engine (or the operator) reads while the topology runs: changed live
LIVE_FIELDS = ("maxSpoutPending", "messageTimeoutSecs", "tickTupleFreqSecs", "killWaitSecs", "rebalanceWaitSecs")
# a component's config keys the engine reads while it runs (a bolt's tick)
LIVE_COMPONENT_KEYS = frozenset({TICK_KEY})
# config keys each worker process reads once, at its start, or that change what every worker
# must agree on (the wire's types, where state lives): only a resubmission changes them
WORKER_KEYS = frozenset({
    "worker.heartbeat.frequency.secs",
    "task.refresh.poll.secs",
    "worker.switch.interval.secs",
    "worker.loop.warn.secs",
    "worker.loop.isolate.secs",
    "worker.max.frame.bytes",
    "topology.error.throttle.interval.secs",
    "topology.max.error.report.per.interval",
    "topology.serializers",
    "topology.state.provider",
    "topology.state.provider.config",
    "topology.state.checkpoint.interval.ms",
})
# a component's own fields that make the graph (everything but parallelism and config)
_NOT_GRAPH = frozenset({"parallelism", "config"})


class Kind(str, enum.Enum):
    NONE = "none"
    LIVE = "live"
    RESTART = "restart"
    UPGRADE = "upgrade"
    REFUSED = "refused"


@dataclass(frozen=True)
class SpecChange:
    """What changed and how it is applied. `live`: what changes live ("maxSpoutPending 500 ->
    20"); `restart`: components whose executors restart, each with the keys that make it;
    `upgrade`: why a graph upgrade is needed; `refused`: why it cannot be done."""

    live: tuple[str, ...] = ()
    restart: tuple[tuple[str, tuple[str, ...]], ...] = ()
    upgrade: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind:
        if self.refused:
            return Kind.REFUSED
        if self.upgrade:
            return Kind.UPGRADE
        if self.restart:
            return Kind.RESTART
        return Kind.LIVE if self.live else Kind.NONE

    @property
    def applies_in_place(self) -> bool:
        """Live or restart: the stored topology may take the new spec as it is."""
        return self.kind in (Kind.LIVE, Kind.RESTART)

    @property
    def restarted(self) -> frozenset[str]:
        return frozenset(c for c, _keys in self.restart)

    def describe(self) -> str:
        """One line for an Event, a condition or the CLI."""
        parts: list[str] = []
        if self.refused:
            parts.append("refused: " + "; ".join(self.refused))
        if self.upgrade:
            parts.append("needs an upgrade (drain and resubmit): " + "; ".join(self.upgrade))
        if self.live:
            parts.append("live: " + ", ".join(self.live))
        if self.restart:
            parts.append("executors restarted: " + ", ".join(
                f"{c} ({', '.join(keys)})" for c, keys in self.restart))
        return "; ".join(parts) if parts else "no change"


def _fmt(value: Any) -> str:
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(k for k in old.keys() | new.keys() if old.get(k, _MISSING) != new.get(k, _MISSING))


_MISSING = object()


def component_conf(spec: TopologySpec, comp: ComponentSpec) -> dict[str, Any]:
    """The config keys a component's `open` / `prepare` gets from the spec: the topology's
    config with its own over it."""
    return {**spec.config, **comp.config}


def _graph(comp: ComponentSpec) -> dict[str, Any]:
    data = comp.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {k: v for k, v in data.items() if k not in _NOT_GRAPH}


def classify(old: TopologySpec, new: TopologySpec) -> SpecChange:
    """How `new` is applied to a topology running `old` (see the module doc)."""
    o = old.model_dump(mode="json", by_alias=True, exclude_none=True)
    n = new.model_dump(mode="json", by_alias=True, exclude_none=True)
    live: list[str] = []
    upgrade: list[str] = []
    refused: list[str] = []
    for f in LIVE_FIELDS:
        if o.get(f) != n.get(f):
            live.append(f"{f} {_fmt(o.get(f))} -> {_fmt(n.get(f))}")
    if o.get("numAckers") != n.get("numAckers"):
        upgrade.append(f"numAckers {_fmt(o.get('numAckers'))} -> {_fmt(n.get('numAckers'))}")
    handled = OTHER_PATHS | set(LIVE_FIELDS) | {"numAckers", "spouts", "bolts", "config"}
    for f in sorted((o.keys() | n.keys()) - handled):
        if o.get(f) != n.get(f):
            upgrade.append(f"spec.{f} changed")
    olds = {c.name: c for c in old.components}
    news = {c.name: c for c in new.components}
    kinds = {c.name: "spout" for c in old.spouts} | {c.name: "bolt" for c in old.bolts}
    new_kinds = {c.name: "spout" for c in new.spouts} | {c.name: "bolt" for c in new.bolts}
    if added := sorted(news.keys() - olds.keys()):
        upgrade.append("added " + ", ".join(added))
    if removed := sorted(olds.keys() - news.keys()):
        upgrade.append("removed " + ", ".join(removed))
        if dropped := [c for c in removed if olds[c].stateful]:
            refused.append(f"{', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} stateful and removed: "
                           "its committed state would be dropped (kill the topology and submit the new "
                           "graph to start without it)")
    stateful = any(c.stateful for c in old.components) or any(c.stateful for c in new.components)
    worker_keys = [k for k in _changed_keys(old.config, new.config) if k in WORKER_KEYS]
    if worker_keys:
        upgrade.append(f"spec.config {', '.join(worker_keys)} (read by each worker at its start)")
    restart: list[tuple[str, tuple[str, ...]]] = []
    for name in sorted(olds.keys() & news.keys()):
        oc, nc = olds[name], news[name]
        if kinds[name] != new_kinds[name]:
            upgrade.append(f"{name} changed from a {kinds[name]} to a {new_kinds[name]}")
            continue
        # a parallelism change is a rebalance: without numTasks the task count stays the running one
        tasks = nc.num_tasks if nc.num_tasks is not None else oc.parallelism
        if oc.tasks != tasks and (oc.stateful or nc.stateful):
            refused.append(f"{name} is stateful and its task count changed ({oc.tasks} -> {tasks}): "
                           "its state is kept per task and cannot be carried to another count")
        if oc.stateful and not nc.stateful:
            refused.append(f"{name} is no longer stateful: its committed state would be dropped (kill the "
                           "topology and submit the new graph to start without it)")
        og, ng = _graph(oc), _graph(nc)
        fields = _changed_keys(og, ng)
        if fields:
            upgrade.append(f"{name}: {', '.join(fields)} changed")
        keys = [k for k in _changed_keys(component_conf(old, oc), component_conf(new, nc)) if k not in WORKER_KEYS]
        own = [k for k in keys if k in LIVE_COMPONENT_KEYS and k in oc.config.keys() | nc.config.keys()]
        for k in own:
            live.append(f"{name} {k} {_fmt(oc.config.get(k))} -> {_fmt(nc.config.get(k))}")
        rest = tuple(k for k in keys if k not in own)
        if rest and not fields:
            if stateful:
                upgrade.append(f"{name}: config {', '.join(rest)} changed, and the executors of a stateful "
                               "topology restart only with a checkpoint")
            else:
                restart.append((name, rest))
    return SpecChange(tuple(live), tuple(restart), tuple(upgrade), tuple(refused))


def stored_after(running: Topology, new: Topology) -> dict[str, Any]:
    """The topology to store for a change applied in place: the running one (its metadata, and
    what other paths change: numWorkers, parallelism, active, the worker pod settings, health,
    upgrade, autoscale) with everything else of the new spec. Parallelism stays: without
    numTasks it is also the task count, which must not move under a running topology."""
    data = running.model_dump(mode="json", by_alias=True, exclude_none=True)
    old = data["spec"]
    spec = new.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    for f in OTHER_PATHS:
        spec.pop(f, None)
        if f in old:
            spec[f] = old[f]
    parallelism = {c.name: c.parallelism for c in running.spec.components}
    for kind in ("spouts", "bolts"):
        for comp in spec.get(kind, []):
            if comp["name"] in parallelism:
                comp["parallelism"] = parallelism[comp["name"]]
    data["spec"] = spec
    return data


__all__ = [
    "LIVE_COMPONENT_KEYS",
    "LIVE_FIELDS",
    "OTHER_PATHS",
    "WORKER_KEYS",
    "Kind",
    "SpecChange",
    "classify",
    "component_conf",
    "stored_after",
]
