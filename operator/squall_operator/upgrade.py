"""A graph upgrade of a running topology, as pure decisions (JStorm's
update_topology; Storm's rebalance transitions in `squall_operator.lifecycle`).

A new spec whose graph differs from the running one (`squall.specchange` says `upgrade`: a
component added or removed, a grouping, fields or a class changed) is applied as a rebalance
with another end:

1. Upgrading: lifecycle action UPGRADE deactivates the spouts (status REBALANCING, the status to
   restore kept) and stores the new topology beside the running one (StormBase
   `upgrade_topology`, `upgrade_since_secs`); the workers keep running the old graph and finish
   what they hold.
2. Draining: each round, `decide` looks at the spouts' heartbeats: once every assigned spout
   executor reports nothing pending in a heartbeat taken after the deactivation
   (`squall_operator.roll.drained`), or `rebalanceWaitSecs` after it at the most, it is time.
3. Upgraded: lifecycle DO_UPGRADE stores the new topology with a new launch time and the
   executor counts of `launch`, a new assignment is written, the workers of the old launch are
   replaced by workers of the new graph, and the spouts get their activation back. What was
   still pending at the wait's end is replayed by the spouts from their source, as after Storm's
   rebalance.

A stateful topology (squall.checkpoint) is upgraded the same way, its state carried over by
component name and task index, as a Flink savepoint carries state by operator:

- the final checkpoint: the checkpoint spout stays active while the other spouts are deactivated,
  so the stateful bolts' acks, held until the commit that holds their effects, complete with the
  next commit; "nothing pending" (the drain's end) then means every tuple the spouts emitted is
  in a committed checkpoint, and a stateful spout's committed position is the last it emitted.
  The checkpoint spout's own pending round is not waited for (`spout_beats` leaves it out).
- the new launch: each task's state lives under `<component>#<index>` (squall.statebackend
  .namespace), which a graph change does not move although it renumbers task ids; the new
  launch's checkpoint spout recovers from the last commit as after any restart (ROLLBACK,
  INITSTATE) and nothing is replayed. `state_tasks` keeps the old launch's task ids in the
  StormBase, where a state an older Squall kept under `<component>-<task>` is found.
- `squall.specchange` refuses what cannot be carried: a stateful component's task count, a
  stateful component removed or no longer stateful (its state would be dropped); `refusal` adds
  the memory provider (its state lives in the workers the upgrade replaces).

Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall import specchange
from squall.models.cluster import Assignment, WorkerHeartbeat, executor_key
from squall.models.v1alpha1 import Topology
from squall.plan import ACKER, CHECKPOINT_COMPONENT, TopologyPlan
from squall.statebackend import provider_name

from squall_operator import roll

__all__ = ["Decision", "decide", "launch", "refusal", "spout_beats", "state_tasks"]


def refusal(running: Topology, new: Topology, change: specchange.SpecChange) -> str | None:
    """Why `change` (an `upgrade`) cannot run as a graph upgrade; None: it can. What
    `squall.specchange` refuses on the specs alone is refused there; here: a stateful topology
    whose state provider is `memory` (its state lives in the worker processes, which the upgrade
    replaces)."""
    stateful = sorted(c.name for c in running.spec.components if c.stateful)
    if stateful and provider_name(running.spec.config) == "memory":
        return (f"{', '.join(stateful)} {'keeps its' if len(stateful) == 1 else 'keep their'} state in the memory "
                "state provider, inside the worker processes that the upgrade replaces: it would be lost "
                "(set topology.state.provider to redis to carry it over)")
    return None


def state_tasks(running: Topology, component_tasks: Mapping[str, tuple[int, ...]]) -> dict[str, list[int]] | None:
    """The StormBase's `state_tasks` for the launch after an upgrade of `running`, whose plan
    gave its components `component_tasks`: the task ids of its stateful and windowed components
    (a windowed bolt of a stateful topology checkpoints its windows) and of the checkpoint spout
    (a state kept under `<component>-<task>` by an older Squall is found under them); None for a
    topology without state."""
    if not any(c.stateful for c in running.spec.components):
        return None
    names = {c.name for c in running.spec.components if c.stateful or getattr(c, "window", None) is not None}
    names.add(CHECKPOINT_COMPONENT)
    return {c: list(ts) for c, ts in sorted(component_tasks.items()) if c in names}


def launch(running: Topology, executors: Mapping[str, int], new: Topology) -> tuple[dict[str, Any], dict[str, int]]:
    """What the upgrade stores: the new topology (with what other paths change on a running one
    kept from `running`: numWorkers, active, the worker pod settings, health, upgrade, autoscale),
    and each component's executor count: a rebalanced count is kept where the component's task
    count is unchanged, else the new spec's parallelism; the acker keeps its count unless the
    new spec names numAckers."""
    data = new.model_dump(mode="json", by_alias=True, exclude_none=True)
    old = running.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec = data["spec"]
    for f in specchange.OTHER_PATHS:
        spec.pop(f, None)
        if f in old:
            spec[f] = old[f]
    data["metadata"] = running.model_dump(mode="json", by_alias=True, exclude_none=True)["metadata"]
    stored = Topology.model_validate(data)
    tasks = {c.name: c.tasks for c in running.spec.components}
    counts: dict[str, int] = {}
    for c in stored.spec.components:
        kept = executors.get(c.name)
        counts[c.name] = kept if kept is not None and tasks.get(c.name) == c.tasks else c.parallelism
    if stored.spec.ackers:
        same = stored.spec.num_ackers == running.spec.num_ackers and ACKER in executors
        counts[ACKER] = executors[ACKER] if same else stored.spec.ackers
    return data, counts


def spout_beats(plan: TopologyPlan, assignment: Assignment, beats: Mapping[Any, WorkerHeartbeat],
                ) -> dict[str, tuple[float, int] | None]:
    """Every assigned spout executor -> (the time of its slot's heartbeat, its pending count
    there); None where no heartbeat of its slot reports it (roll.drained's input). The
    checkpoint spout is left out: it stays active through the drain, its rounds carry no data,
    and the data spouts' trees complete only with the commit that holds their effects."""
    out: dict[str, tuple[float, int] | None] = {}
    for executor, slot in assignment.slots().items():
        component = plan.executor_component(executor)
        if component not in plan.spouts or component == CHECKPOINT_COMPONENT:
            continue
        key = executor_key(executor)
        beat = beats.get(slot)
        stats = beat.executors.get(key) if beat is not None else None
        out[key] = (beat.time_secs, stats.pending) if beat is not None and stats is not None else None
    return out


@dataclass(frozen=True)
class Decision:
    """`go`: launch the new graph now; `why`: for the Event (empty while it waits)."""

    go: bool
    why: str = ""


def decide(since: float, due: float, spouts: Mapping[str, tuple[float, int] | None], now: float) -> Decision:
    """One round of the drain of an upgrade whose spouts were deactivated at `since` and whose
    wait ends at `due`: go once nothing is pending, or at `due` whatever is."""
    if roll.drained(since, spouts):
        return Decision(True, f"nothing pending {max(0.0, now - since):.1f}s after the deactivation")
    if now >= due:
        pending = sum(beat[1] for beat in spouts.values() if beat is not None)
        return Decision(True, f"the drain's wait ({round(due - since, 1):g}s) passed with {pending} tuple trees pending "
                              "(the spouts replay them)")
    return Decision(False)
