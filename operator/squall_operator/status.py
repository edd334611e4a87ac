"""A Topology resource's `status`, and the Events its changes call for, as pure functions.

`build(res, ...)` turns what one round read (the stored topology, its assignment, the workers'
heartbeats and errors, the worker pods) and what the operator keeps on the resource's record
(`resources.Resource`: its roll, the last good and rejected pod settings, a refused spec change,
the slots its pods may use) into the status the operator writes. `pods.build_status` makes the
part that comes from the cluster (phase, state, executors, workers, the Ready, Rebalancing,
WorkersHealthy and Degraded conditions); this module adds why workers cannot run (the blockers),
the roll, `status.autoscale`, `status.upgrade` and the conditions `RolledBack`,
`SpecChangeRefused` and `ZooKeeperReachable`.

`transitions(old, new)` says which Events a change of the status posts (a rebalance reassigned
or completed, a spec valid again, Degraded on or off, workers unhealthy or healthy again), and
`worth_writing` whether the new status is to be written at all.

Nothing here reads a clock, the API server or ZooKeeper: `KubeNimbus.write_status` reads, calls
these and writes (as kopf's `causes` and `processing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from squall.models.cluster import (
    Assignment,
    ErrorInfo,
    StormBase,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.models.v1alpha1 import WorkerSpec
from squall_operator import degraded, pods, stored
from squall_operator import roll as rolls
from squall_operator.reconcile import Event
from squall_operator.resources import Resource

__all__ = ["blockers", "build", "refused_condition", "roll_view", "transitions", "upgrade_condition",
           "worth_writing"]

# written at least this often even when nothing else changed (its uptime does)
_VOLATILE = ("uptimeSecs",)


def blockers(res: Resource, base: StormBase | None, assignment: Assignment | None,
             heartbeats: Mapping[WorkerSlot, WorkerHeartbeat], views: Iterable[pods.PodView],
             load_error: ErrorInfo | None, worker: WorkerSpec | None) -> list[pods.Problem]:
    """Why the topology's workers cannot run, the most telling first: the API server refused
    its pod, a worker cannot load its classes (before the pods' own reasons: such a worker
    crash-loops, and the import error says why), the pods' problems, too few slots for them."""
    found: list[pods.Problem] = []
    if res.pod_problem is not None:
        found.append(pods.Problem("InvalidPodTemplate", res.pod_problem))
    if base is not None:
        newest_beat = max((b.time_secs for b in heartbeats.values()), default=0.0)
        # a worker that started since the error loads the classes: the error is old
        if load_error is not None and newest_beat < load_error.time_secs:
            text = load_error.error.strip().splitlines()
            found.append(pods.Problem(
                "ComponentLoadFailed",
                f"worker {load_error.host or '?'}:{load_error.port} cannot load the topology's classes: "
                + "; ".join(text[-3:])[:600]))
    found += pods.pod_problems(views)
    if base is not None and res.allowed_count is not None and base.status is not TopologyStatus.KILLED:
        desired = min(base.num_workers, len(stored.plan(base).executors))
        placed = len(set((assignment or Assignment()).slots().values()))
        if placed < desired:
            refused = "".join(f"; {n}: {w}" for n, w in sorted(res.refused_nodes.items()))
            ruled = (" or ruled out by its pod (anti-)affinity" if worker and worker.affinity and (
                worker.affinity.pod_affinity or worker.affinity.pod_anti_affinity) else "")
            found.append(pods.Problem(
                "Unschedulable",
                f"{placed}/{desired} workers placed: {res.allowed_count} slots on the nodes this "
                f"topology's pods may use, the others taken{ruled}{refused}"))
    return found


def roll_view(roll: rolls.Roll | None) -> pods.RollView | None:
    """The roll in progress as condition `Rolling` says it (None: no roll)."""
    if roll is None:
        return None
    r = roll
    if r.step == rolls.DRAINING:
        msg = (f"spouts deactivated, in-flight tuples finishing; replacing the workers "
               f"({', '.join(r.from_images)} -> {r.image}) once nothing is pending, at "
               f"{pods.iso_time(r.due)} at the latest")
    elif r.step == rolls.CANARY:
        msg = (f"canary: slot(s) {', '.join(r.canary_slots)} run {r.image}, "
               + (f"analysed since {pods.iso_time(r.analysing)} against the old pods"
                  if r.analysing is not None else "starting") + "; the other slots keep the old settings")
    elif r.step == rolls.ROLLING_BACK:
        msg = (f"the canary failed: worker pods rolled back to the last good settings ({r.image}), "
               "one slot at a time, through the hand-over; spouts active")
    elif r.mode == rolls.HANDOVER:
        msg = (f"outdated worker pods replaced by pods running {r.image}, one slot at a time, "
               "each serving its slot until its new pod has registered; spouts active")
    else:
        msg = (f"outdated worker pods replaced by pods running {r.image}, one slot at a time (the next "
               "when the previous is ready); spouts activate when all are ready")
    return pods.RollView(r.step, msg)


def build(res: Resource, *, base: StormBase | None, assignment: Assignment | None,
          heartbeats: Mapping[WorkerSlot, WorkerHeartbeat], views: list[pods.PodView],
          errors: Mapping[str, ErrorInfo | None], problems: list[pods.Problem],
          autoscale: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The status of `res` (see the module doc). `base` is the stored topology when `res` owns
    it (else None, and the rest is empty); `errors` each component's last error; `problems` what
    `blockers` found; `autoscale` the autoscaler's `status.autoscale` block."""
    status = pods.build_status(
        base=base, assignment=assignment, heartbeats=heartbeats, pods=views, errors=errors, now=now,
        generation=res.observed_generation, previous=res.status, deleting=res.deleting,
        problem=res.problem or res.conflict,
        blockers=problems,
        roll=roll_view(res.roll), rolled=res.rolled, topology=res.name,
        health_settings=degraded.Settings.of(
            res.topology.spec.health if res.topology is not None
            else stored.topology(base).spec.health if base is not None else None),
    )
    if res.roll is not None:
        status["roll"] = res.roll.to_status(pods.iso_time)
    if autoscale is not None:
        status["autoscale"] = autoscale
    upgrade = res.upgrade.to_status(pods.iso_time)
    if upgrade:
        status["upgrade"] = upgrade
    for condition in (upgrade_condition, refused_condition):
        cond = condition(res, status["conditions"], now)
        if cond is not None:
            status["conditions"] = pods.merge_conditions(status["conditions"], [cond])
    if any(c.get("type") == "ZooKeeperReachable" for c in status["conditions"]):
        # the round read ZooKeeper: a ZooKeeperUnreachable written during an outage is over
        status["conditions"] = pods.merge_conditions(status["conditions"], [pods.condition(
            "ZooKeeperReachable", True, "Connected", "connected to ZooKeeper", now, status["conditions"])])
    return status


def refused_condition(res: Resource, previous: list[dict[str, Any]], now: float) -> dict[str, Any] | None:
    """Condition `SpecChangeRefused`: True while the spec asks for a change the running
    topology cannot take (the Event's message), False once a later spec is applied; None: leave
    the conditions as they are."""
    if res.refused_change is not None:
        return pods.condition("SpecChangeRefused", True, "CannotBeCarried", res.refused_change, now, previous,
                              res.generation)
    if any(c.get("type") == "SpecChangeRefused" and c.get("status") == "True" for c in previous):
        return pods.condition("SpecChangeRefused", False, "SpecApplied",
                              "the spec's change is applied to the running topology", now, previous,
                              res.generation)
    return None


def upgrade_condition(res: Resource, previous: list[dict[str, Any]], now: float) -> dict[str, Any] | None:
    """Condition `RolledBack`: True while the workers run the last good settings instead of the
    spec's failed ones, False once spec.worker changed after a rollback; None: leave them."""
    rejected, good = res.upgrade.rejected, res.upgrade.last_good
    if rejected is not None:
        return pods.condition("RolledBack", True, rejected.reason, (
            f"the canary of {rejected.image} (generation {rejected.generation}) failed: {rejected.message}; "
            f"the workers run the last good settings ({good.image if good else '?'}), and spec.worker's "
            "settings are not tried again until it changes"), now, previous)
    if any(c.get("type") == "RolledBack" and c.get("status") == "True" for c in previous):
        return pods.condition("RolledBack", False, "SpecChanged",
                              "spec.worker changed since the rollback: its new settings are rolled out", now,
                              previous)
    return None


def worth_writing(old: Mapping[str, Any], new: Mapping[str, Any], last_write: float, now: float,
                  refresh_secs: float) -> bool:
    """Whether to write `new` over `old`: it says something else, or the last write (at
    `last_write`) is `refresh_secs` old (the uptime moves on)."""
    changed = ({k: v for k, v in old.items() if k not in _VOLATILE}
               != {k: v for k, v in new.items() if k not in _VOLATILE})
    return changed or now - last_write >= refresh_secs


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def transitions(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """The Events the change from status `old` to `new` posts, in order."""
    events: list[Event] = []
    before, after = _condition(old, "Rebalancing"), _condition(new, "Rebalancing")
    if after.get("reason") != before.get("reason") and after.get("reason") in ("Reassigned", "Completed"):
        events.append(Event("Normal", "Rebalance" + str(after["reason"]), str(after.get("message", ""))))
    if old.get("phase") == "Failed" and new.get("phase") != "Failed":
        events.append(Event("Normal", "SpecFixed", "the spec is valid again"))
    change = degraded.transition_event(old.get("conditions") or [], new.get("conditions") or [])
    if change is not None:
        events.append(Event(*change))
    before, after = _condition(old, "WorkersHealthy"), _condition(new, "WorkersHealthy")
    if after.get("status") == "False" and (before.get("status"), before.get("reason")) != ("False", after.get("reason")):
        # InvalidPodTemplate has its own Event when the pod is refused
        if after.get("reason") != "InvalidPodTemplate":
            events.append(Event("Warning", str(after["reason"]), str(after.get("message", ""))))
    elif after.get("status") == "True" and before.get("status") == "False":
        events.append(Event("Normal", "WorkersHealthy", "no worker reports a problem any more"))
    return events
