"""The stored topology read once: `StormBase.topology` is the Topology resource as submitted, a
dict, and every round reads it again (nimbus's monitor, the reconcile, the pods, the status).
`topology(base)` parses it into the model once per submission, and `plan(base)` builds its plan
once per submission and executor count (a rebalance changes `component_executors`), instead of
validating and planning again at every read.

A submission is known by its name and launch time; the stored dict is compared with the cached
one (a plain dict comparison, far cheaper than validating it), so two clusters in one process
that submit different topologies under one name at one (fake) time still get their own. The
models are frozen and the plan a frozen dataclass: callers share them. Bounded (`MAX_ENTRIES`,
least recently used out first) and thread-safe: the reconcile loop, kopf's handlers and the UI
read from their own threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Generic, TypeVar

from squall.models.cluster import StormBase
from squall.models.v1alpha1 import Topology
from squall.plan import TopologyPlan, build_plan

# topologies one operator serves at once, with room for the plans of their recent rebalances
MAX_ENTRIES = 512

V = TypeVar("V")


class _Cache(Generic[V]):
    """key -> (the stored dict it was made from, value); a hit needs an equal dict."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], tuple[dict[str, Any], V]] = OrderedDict()

    def get(self, key: tuple[Any, ...], data: dict[str, Any]) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (entry[0] is not data and entry[0] != data):
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: tuple[Any, ...], data: dict[str, Any], value: V) -> None:
        with self._lock:
            self._entries[key] = (data, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)


_topologies: _Cache[Topology] = _Cache(MAX_ENTRIES)
_plans: _Cache[TopologyPlan] = _Cache(MAX_ENTRIES)


def topology(base: StormBase) -> Topology:
    """The stored topology as the model (parsed once per submission)."""
    key = (base.name, base.launch_time_secs)
    found = _topologies.get(key, base.topology)
    if found is None:
        found = Topology.model_validate(base.topology)
        _topologies.put(key, base.topology, found)
    return found


def plan(base: StormBase) -> TopologyPlan:
    """The stored topology's plan at its current executor counts (built once per change)."""
    key = (base.name, base.launch_time_secs, tuple(sorted(base.component_executors.items())))
    found = _plans.get(key, base.topology)
    if found is None:
        found = build_plan(topology(base), {}, base.component_executors)
        _plans.put(key, base.topology, found)
    return found


__all__ = ["MAX_ENTRIES", "plan", "topology"]
