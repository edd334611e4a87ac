"""A graph upgrade of a running topology, as pure decisions (issue 30 item 3; JStorm's
update_topology, seed 003; Storm's rebalance transitions in `squall_operator.lifecycle`).

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

A stateful topology's graph is not upgraded: its state would need a final checkpoint carried by
component name (`refusal` says so). Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall import specchange
from squall.models.cluster import Assignment, WorkerHeartbeat, executor_key
from squall.models.v1alpha1 import Topology
from squall.plan import ACKER, TopologyPlan

from squall_operator import roll

__all__ = ["Decision", "decide", "launch", "refusal", "spout_beats"]


def refusal(running: Topology, new: Topology, change: specchange.SpecChange) -> str | None:
    """Why `change` (an `upgrade`) cannot run as a graph upgrade; None: it can."""
    stateful = sorted({c.name for c in running.spec.components if c.stateful}
                      | {c.name for c in new.spec.components if c.stateful})
    if stateful:
        return (f"{', '.join(stateful)} {'is' if len(stateful) == 1 else 'are'} stateful: a graph upgrade "
                "would need a final checkpoint carried over by component name, which Squall does not do yet")
    return None


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
    there); None where no heartbeat of its slot reports it (roll.drained's input)."""
    out: dict[str, tuple[float, int] | None] = {}
    for executor, slot in assignment.slots().items():
        if plan.executor_component(executor) not in plan.spouts:
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
