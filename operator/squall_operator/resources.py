"""The Topology resources nimbus serves, as the kopf handlers last saw them (`Resource`), and what
is read off them: the kill and rebalance waits the CLI asks for in annotations, the Topology as
nimbus stores it (`topology_resource`), and whether a stored topology is the resource's (`owns`).
Pure: no kopf, no Kubernetes client, no ZooKeeper.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.models.cluster import StormBase, WorkerSlot
from squall.models.v1alpha1 import API_VERSION, KIND, Topology
from squall.topology_keys import TopologyKey

from squall_operator import canary
from squall_operator import roll as rolls


@dataclass
class Resource:
    """One Topology resource, as the handlers last saw it."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    # outcome of validating `validated_generation`
    validated_generation: int | None = None
    topology: Topology | None = None
    problem: str | None = None
    observed_generation: int | None = None
    # generation whose rebalance was rejected / whose ignored changes were reported
    rejected_generation: int | None = None
    ignored_generation: int | None = None
    # why the spec's change cannot be applied to the running topology (the SpecChangeRefused
    # Event's message, condition SpecChangeRefused True); None once the spec is applied
    refused_change: str | None = None
    removed: bool = False
    last_status_write: float = 0.0
    # the topology's key in ZooKeeper once decided (KubeNimbus.key: NAMESPACE~NAME, or the bare
    # name an older operator stored it under)
    topo: TopologyKey | None = None
    # whether the topology stored in ZooKeeper under this name was submitted for this resource
    owned: bool = False
    # why this resource cannot run now although its spec is valid (its previous topology of the
    # same name is still being killed)
    conflict: str | None = None
    # the API server refused the worker pod the operator made (an invalid volume, a missing
    # service account): its message
    pod_problem: str | None = None
    # a roll of the worker pods to new settings; mirrored in status.roll so that a restarted
    # operator resumes it
    roll: rolls.Roll | None = None
    # message of a roll that just completed (shown once in the Rolling condition)
    rolled: str | None = None
    # the last good pod settings and the ones a failed canary rolled back from (status.upgrade)
    upgrade: canary.Upgrade = field(default_factory=canary.Upgrade)
    # slots whose pod the kubelet refused (OutOfcpu, NodeAffinity, ...) -> until when nimbus
    # keeps the topology off them
    rejected: dict[WorkerSlot, float] = field(default_factory=dict)
    # slots the topology's pods may use at the last scheduling, and why other nodes offer none
    allowed_count: int | None = None
    refused_nodes: dict[str, str] = field(default_factory=dict)
    # the Topology's CURVE Secret and NetworkPolicy exist (created before its first pod)
    sealed: bool = False
    # its worker pods' PodDisruptionBudget was made, updated or removed since the operator started
    budgeted: bool = False
    # the kill's wait asked for with the resource's deletion (`kubectl squall kill -w`), else
    # the running topology's killWaitSecs
    kill_wait: float | None = None
    # (generation, seconds): the wait of the rebalance that generation asks for
    # (`kubectl squall rebalance -w`), else the running topology's rebalanceWaitSecs
    rebalance_wait: tuple[int, float] | None = None
    # the dynamic log levels it asks for (`kubectl squall set-log-level`: LOG_LEVELS_ANNOTATION),
    # what the operator last wrote to ZooKeeper of them (None: nothing yet since it started),
    # and why the annotation could not be used
    log_levels: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_levels_written: dict[str, dict[str, Any]] | None = None
    log_levels_problem: str | None = None


# `kubectl squall kill NAME -w SECONDS` sets it on the Topology before deleting it
KILL_WAIT_ANNOTATION = "squall.io/kill-wait-secs"
# `kubectl squall rebalance NAME -w SECONDS` sets both in the patch that changes the spec: the
# wait holds for the generation that patch makes only, so a later edit of numWorkers or a
# parallelism without -w waits rebalanceWaitSecs again
REBALANCE_WAIT_ANNOTATION = "squall.io/rebalance-wait-secs"
REBALANCE_WAIT_GENERATION_ANNOTATION = "squall.io/rebalance-wait-generation"
# `kubectl squall set-log-level` keeps the topology's log config here as JSON (squall.loglevels).
# Not under squall.io/: kopf keeps its diff base and progress there and leaves every annotation
# of that prefix out of what it compares, so a change of one there reaches no handler (an
# older Squall's squall.io/log-levels was applied only when the operator next resumed)
LOG_LEVELS_ANNOTATION = "log.squall.io/levels"


def kill_wait_from_annotations(annotations: Mapping[str, str] | None) -> float | None:
    """The kill wait a deleted resource asks for (`KILL_WAIT_ANNOTATION`); None when absent or
    not a number of seconds >= 0."""
    return _secs((annotations or {}).get(KILL_WAIT_ANNOTATION))


def _secs(text: str | None) -> float | None:
    """`text` as a number of seconds >= 0, else None."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value


def rebalance_wait_from_annotations(annotations: Mapping[str, str] | None) -> tuple[int, float] | None:
    """(generation, seconds) of the rebalance wait a resource asks for
    (`REBALANCE_WAIT_ANNOTATION` for `REBALANCE_WAIT_GENERATION_ANNOTATION`); None when either
    is absent or malformed."""
    wait = _secs((annotations or {}).get(REBALANCE_WAIT_ANNOTATION))
    generation = (annotations or {}).get(REBALANCE_WAIT_GENERATION_ANNOTATION) or ""
    if wait is None or not generation.isdigit():
        return None
    return int(generation), wait


def log_levels_from_annotations(annotations: Mapping[str, str] | None) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The log config a resource asks for (`LOG_LEVELS_ANNOTATION`), and why it cannot be used
    (then the config is empty: every logger at its own level)."""
    import json

    from squall import loglevels

    raw = (annotations or {}).get(LOG_LEVELS_ANNOTATION)
    if not raw:
        return {}, None
    try:
        return loglevels.parse_config(json.loads(raw)), None
    except (ValueError, loglevels.LogLevelError) as exc:
        return {}, f"annotation {LOG_LEVELS_ANNOTATION}: {exc}"


def topology_resource(res: Resource) -> dict[str, Any]:
    """The Topology as nimbus stores it: only name, namespace and labels of the metadata."""
    meta: dict[str, Any] = {"name": res.name, "namespace": res.namespace, "uid": res.uid}
    if res.labels:
        meta["labels"] = dict(res.labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": res.spec}


def owns(res: Resource, base: StormBase | None) -> bool:
    """Whether `base` (the stored topology of res's name) was submitted for `res`."""
    return submitted_for(base, res.namespace, res.uid)


def submitted_for(base: StormBase | None, namespace: str, uid: str) -> bool:
    """Whether `base` was submitted for the resource with this namespace and uid (one stored
    without a uid, by an older operator, belongs to its namespace's resource of that name)."""
    if base is None:
        return False
    meta = base.topology.get("metadata") or {}
    if meta.get("uid") is not None:
        return bool(meta["uid"] == uid)
    return meta.get("namespace") in (None, namespace)


__all__ = [
    "KILL_WAIT_ANNOTATION",
    "REBALANCE_WAIT_ANNOTATION",
    "REBALANCE_WAIT_GENERATION_ANNOTATION",
    "Resource",
    "kill_wait_from_annotations",
    "log_levels_from_annotations",
    "owns",
    "submitted_for",
    "rebalance_wait_from_annotations",
    "topology_resource",
]
