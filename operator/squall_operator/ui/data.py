"""What the web UI shows, read from ZooKeeper and shaped after Storm UI's REST API.

`UiData` keeps, per topology, the executor totals over every worker incarnation (`totals.Totals`:
a replaced worker does not take its counts with it) and a bounded history of per-component
samples, from which the 10 min and 3 h windows are differences (Storm UI's windows; a window
longer than the UI has been watching covers what it saw). A sampler thread (`start`) takes a
sample every `interval` seconds; the views read the latest one. The clock is injected.

Views (dicts ready for JSON): `cluster_summary`, `topology_summary`, `topology(name)`.
Latencies are kept to the nanosecond (in ms, 6 decimals); `latency_text` is how every page
prints one (ui.js prints them the same way).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoAuthError

from squall.models import Topology
from squall.models.v1alpha1 import DNS_LABEL
from squall.models.cluster import (
    Assignment,
    ErrorInfo,
    StormBase,
    WorkerHeartbeat,
    WorkerSlot,
    parse_executor_key,
)
from squall.plan import ACKER
from squall.state import CONNECTION_ERRORS, StateError, TopologyKey, split_topology_key
from squall.stateviews import ForViewers
from squall_operator import stored
from squall_operator.totals import Totals

__all__ = ["WINDOWS", "UiData", "executor_of", "is_topology_id", "latency_text", "pretty_secs"]

log = logging.getLogger("squall.ui")

# (window key, seconds or None for all time, label): Storm UI's 10m / 3h / all-time
WINDOWS: tuple[tuple[str, float | None, str], ...] = (
    ("600", 600.0, "10m 0s"),
    ("10800", 10800.0, "3h 0m 0s"),
    (":all-time", None, "All time"),
)
_COUNTS = ("emitted", "transferred", "executed", "acked", "failed", "lat_sum", "lat_n")
# samples kept per topology: 3 h at the slowest interval plus one
_MAX_SAMPLES = 3 * 3600 + 2
MAX_ERRORS_SHOWN = 20
_TOPOLOGY_ID = re.compile(DNS_LABEL.removeprefix("^").removesuffix("$"))


def is_topology_id(name: str) -> bool:
    """Whether `name` can be a topology's key (squall.topology_keys): a name, or the
    operator's NAMESPACE~NAME, each metadata.name's rule (a DNS label, at most 63 characters).
    Anything else is no topology, answered without asking ZooKeeper: `.`, `..`, a slash, control
    characters, a long name."""
    namespace, bare = split_topology_key(TopologyKey(name))
    return all(len(part) <= 63 and _TOPOLOGY_ID.fullmatch(part) is not None
               for part in (bare, *([namespace] if namespace is not None else [])))


def latency_text(ms: float) -> str:
    """A latency in ms as every page prints it: three significant digits below 100 ms (0.00347,
    0.0347, 3.47, 34.7: a few microseconds still show), whole ms with thousands separators from
    100 ms (1,235), "0" for none. ui.js's `latency` gives the same text."""
    if not math.isfinite(ms) or ms <= 0:
        return "0"
    shown = float(f"{ms:.3g}")
    if shown >= 100:
        return f"{math.floor(ms + 0.5):,}"  # JavaScript's Math.round
    return f"{shown:.{min(6, 2 - math.floor(math.log10(shown)))}f}"


def pretty_secs(secs: float) -> str:
    """Storm UI's uptime: "1d 2h 3m 4s", leading zero units left out."""
    s = max(0, int(secs))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    parts = [f"{d}d"] if d else []
    if d or h:
        parts.append(f"{h}h")
    if d or h or m:
        parts.append(f"{m}m")
    parts.append(f"{s}s")
    return " ".join(parts)


def executor_of(task: int, executor_keys: Iterable[str]) -> str | None:
    """Storm's name of the executor running `task` ("[3-4]": its first and last task), from
    the assignment's executor keys ("3-4"); None when no executor has it."""
    for key in executor_keys:
        start, end = parse_executor_key(key)
        if start <= task <= end:
            return f"[{start}-{end}]"
    return None


Counts = dict[str, dict[str, float]]  # component -> counter -> value


@dataclass
class _History:
    totals: Totals = field(default_factory=Totals)
    samples: deque[tuple[float, Counts]] = field(default_factory=lambda: deque(maxlen=_MAX_SAMPLES))
    running: dict[str, int] = field(default_factory=dict)  # component -> running executors
    pending: dict[str, int] = field(default_factory=dict)


def _component_counts(totals: Totals) -> tuple[Counts, dict[str, int], dict[str, int]]:
    counts: Counts = {}
    running: dict[str, int] = {}
    pending: dict[str, int] = {}
    for ex, is_running in totals.executor_stats():
        c = counts.setdefault(ex.component, dict.fromkeys(_COUNTS, 0.0))
        c["emitted"] += ex.emitted
        c["transferred"] += ex.transferred
        c["executed"] += ex.executed
        c["acked"] += ex.acked
        c["failed"] += ex.failed
        c["lat_sum"] += ex.latency_ms_mean * ex.latency_samples
        c["lat_n"] += ex.latency_samples
        if is_running:
            running[ex.component] = running.get(ex.component, 0) + 1
            pending[ex.component] = pending.get(ex.component, 0) + ex.pending
    return counts, running, pending


def _figures(now: Counts, then: Counts | None, comp: str) -> dict[str, Any]:
    cur = now.get(comp) or dict.fromkeys(_COUNTS, 0.0)
    old = (then or {}).get(comp) or dict.fromkeys(_COUNTS, 0.0)
    d = {k: cur[k] - old.get(k, 0.0) for k in _COUNTS}
    lat = d["lat_sum"] / d["lat_n"] if d["lat_n"] > 0 else 0.0
    return {
        "emitted": int(d["emitted"]),
        "transferred": int(d["transferred"]),
        "executed": int(d["executed"]),
        "acked": int(d["acked"]),
        "failed": int(d["failed"]),
        "latencyMs": round(lat, 6),
    }


class UiData:
    """The UI's figures from one ClusterState (see the module doc)."""

    def __init__(self, state: ForViewers, *, clock: Callable[[], float] = time.time,
                 interval: float = 2.0) -> None:
        self.state = state
        self.clock = clock
        self.interval = interval
        self.lock = threading.Lock()
        self.history: dict[str, _History] = {}
        self.started = clock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.zookeeper_ok = True

    # -- sampling ------------------------------------------------------------------------------
    def sample(self) -> None:
        """Read every topology's heartbeats once and record a sample."""
        now = self.clock()
        names = self.state.storm_ids()
        beats = {n: self.state.get_worker_heartbeats(n) for n in names}
        with self.lock:
            for gone in set(self.history) - set(names):
                del self.history[gone]
            for name in names:
                h = self.history.setdefault(name, _History())
                h.totals.update(beats[name])
                counts, h.running, h.pending = _component_counts(h.totals)
                h.samples.append((now, counts))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.state.ready:
                    self.sample()
                    self.zookeeper_ok = True
                else:
                    self.zookeeper_ok = False
            except CONNECTION_ERRORS:
                self.zookeeper_ok = False
            except NoAuthError:  # the views answer 503 saying so (create_app)
                if self.zookeeper_ok:
                    log.error("UI: ZooKeeper refused access to %s: the UI needs the operator's "
                              "ZooKeeper credentials", self.state.root)
                self.zookeeper_ok = False
            except Exception:
                log.exception("UI sampling failed; retrying")
            self._wake.wait(self.interval)
            self._wake.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ui-sampler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Sample now (after an action)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    # -- views ---------------------------------------------------------------------------------
    def _windowed(self, name: TopologyKey, comp: str, launched: float) -> dict[str, dict[str, Any]]:
        """The component's figures per window: all time, or the latest sample less the oldest
        one inside the window (none: the topology is younger than the window, all of it)."""
        h = self.history.get(name)
        if h is None or not h.samples:
            return {key: _figures({}, None, comp) for key, _, _ in WINDOWS}
        t_now, now = h.samples[-1]
        out = {}
        for key, secs, _ in WINDOWS:
            then: Counts | None = None
            if secs is not None and launched < t_now - secs:
                then = next((c for t, c in h.samples if t >= t_now - secs), None)
            out[key] = _figures(now, then, comp)
        return out

    def _basics(self, name: TopologyKey, base: StormBase, assignment: Assignment | None) -> dict[str, Any]:
        slots = assignment.executor_slots if assignment is not None else {}
        tasks = sum(e - s + 1 for s, e in map(parse_executor_key, slots))
        uptime = max(0.0, self.clock() - base.launch_time_secs)
        namespace = split_topology_key(name)[0]
        return {
            "id": name,
            # the operator's topologies as kubectl names them
            "name": name if namespace is None else f"{namespace}/{base.name}",
            "status": base.status.value,
            "uptime": pretty_secs(uptime),
            "uptimeSeconds": int(uptime),
            "tasksTotal": tasks,
            "workersTotal": len(set(slots.values())),
            "executorsTotal": len(slots),
        }

    def topology_summary(self) -> dict[str, Any]:
        """GET /api/v1/topology/summary."""
        out = []
        for name in self.state.storm_ids():
            base = self.state.get_storm(name)
            if base is None:
                continue
            row = self._basics(name, base, self.state.get_assignment(name))
            spouts = {s.name for s in stored.topology(base).spec.spouts}
            with self.lock:
                acked = failed = 0
                lat_sum = lat_n = 0.0
                for comp in spouts:
                    f = self._windowed(name, comp, base.launch_time_secs)[":all-time"]
                    acked += f["acked"]
                    failed += f["failed"]
                    lat_sum += f["latencyMs"] * f["acked"]
                    lat_n += f["acked"]
            row.update(acked=acked, failed=failed,
                       completeLatency=round(lat_sum / lat_n, 6) if lat_n else 0.0)
            out.append(row)
        return {"topologies": out}

    def cluster_summary(self) -> dict[str, Any]:
        """GET /api/v1/cluster/summary."""
        supervisors = self.state.supervisors()
        total = sum(len(info.ports) for info in supervisors.values())
        used: set[WorkerSlot] = set()
        executors = tasks = 0
        names = self.state.storm_ids()
        for name in names:
            assignment = self.state.get_assignment(name)
            if assignment is None:
                continue
            used |= set(assignment.slots().values())
            executors += len(assignment.executor_slots)
            tasks += sum(e - s + 1 for s, e in map(parse_executor_key, assignment.executor_slots))
        return {
            "supervisors": len(supervisors),
            "slotsTotal": total,
            "slotsUsed": len(used),
            "slotsFree": max(0, total - len(used)),
            "topologies": len(names),
            "executorsTotal": executors,
            "tasksTotal": tasks,
            "zookeeper": "connected" if self.state.ready else "unreachable",
            "uiUptimeSeconds": int(self.clock() - self.started),
        }

    def topology(self, name: TopologyKey, window: str = ":all-time") -> dict[str, Any] | None:
        """GET /api/v1/topology/{id}; None when there is no such topology."""
        if not is_topology_id(name):
            return None
        base = self.state.get_storm(name)
        if base is None:
            return None
        assignment = self.state.get_assignment(name)
        beats = self.state.get_worker_heartbeats(name)
        topology = stored.topology(base)
        spec = topology.spec
        out = self._basics(name, base, assignment)
        errors = self._errors(name, [c.name for c in spec.components],
                              assignment.executor_slots if assignment is not None else {})
        last_error: dict[str, dict[str, Any]] = {}
        for e in errors:  # newest first
            last_error.setdefault(e["component"], e)
        if window not in {k for k, _, _ in WINDOWS}:
            window = ":all-time"
        with self.lock:
            h = self.history.get(name)
            running = dict(h.running) if h else {}
            pending = dict(h.pending) if h else {}
            spouts: list[dict[str, Any]] = []
            bolts: list[dict[str, Any]] = []
            totals_by_window: dict[str, dict[str, Any]] = {
                k: {"emitted": 0, "transferred": 0, "acked": 0, "failed": 0, "lat": 0.0, "n": 0}
                for k, _, _ in WINDOWS}
            spout_names = {s.name for s in spec.spouts}
            for comp in spec.components:
                stats = self._windowed(name, comp.name, base.launch_time_secs)
                is_spout = comp.name in spout_names
                err = last_error.get(comp.name)
                row: dict[str, Any] = {
                    ("spoutId" if is_spout else "boltId"): comp.name,
                    "executors": base.component_executors.get(comp.name, comp.parallelism),
                    "executorsRunning": running.get(comp.name, 0),
                    "tasks": comp.tasks,
                    "lastError": err["error"] if err else "",
                    "errorTime": err["time"] if err else None,
                    "stats": {},
                }
                for key, _, label in WINDOWS:
                    f = stats[key]
                    shown = {"window": key, "windowPretty": label, "emitted": f["emitted"],
                             "transferred": f["transferred"], "acked": f["acked"], "failed": f["failed"]}
                    if is_spout:
                        shown["completeLatency"] = f["latencyMs"]
                        t = totals_by_window[key]
                        for k in ("emitted", "transferred", "acked", "failed"):
                            t[k] += f[k]
                        t["lat"] += f["latencyMs"] * f["acked"]
                        t["n"] += f["acked"]
                    else:
                        shown["executed"] = f["executed"]
                        shown["executeLatency"] = f["latencyMs"]
                    row["stats"][key] = shown
                row.update({k: v for k, v in row["stats"][window].items() if k not in ("window", "windowPretty")})
                if is_spout:
                    row["pending"] = pending.get(comp.name, 0)
                (spouts if is_spout else bolts).append(row)
        out["window"] = window
        out["topologyStats"] = [
            {"window": key, "windowPretty": label, "emitted": t["emitted"], "transferred": t["transferred"],
             "acked": t["acked"], "failed": t["failed"],
             "completeLatency": round(t["lat"] / t["n"], 6) if t["n"] else 0.0}
            for (key, _, label), t in ((w, totals_by_window[w[0]]) for w in WINDOWS)]
        out["spouts"] = spouts
        out["bolts"] = bolts
        out["workers"] = self._workers(assignment, beats, topology)
        out["errors"] = errors
        out["configuration"] = self._configuration(topology, base)
        out["namespace"] = (base.topology.get("metadata") or {}).get("namespace")
        return out

    def _workers(self, assignment: Assignment | None, beats: dict[WorkerSlot, WorkerHeartbeat],
                 topology: Topology) -> list[dict[str, Any]]:
        if assignment is None:
            return []
        by_slot: dict[WorkerSlot, list[str]] = {}
        for key, slot_key in assignment.executor_slots.items():
            by_slot.setdefault(WorkerSlot.from_key(slot_key), []).append(key)
        now = self.clock()
        out = []
        for slot in sorted(by_slot):
            beat = beats.get(slot)
            comps = sorted({ex.component for ex in beat.executors.values()} - {ACKER}) if beat else []
            out.append({
                "node": slot.node,
                "host": assignment.node_host.get(slot.node, slot.node),
                "port": slot.port,
                "executors": sorted(by_slot[slot], key=lambda k: parse_executor_key(k)),
                "components": comps,
                "uptime": pretty_secs(beat.uptime_secs) if beat else "",
                "uptimeSeconds": int(beat.uptime_secs) if beat else None,
                "heartbeatAgeSecs": round(now - beat.time_secs, 1) if beat else None,
            })
        return out

    def _errors(self, name: TopologyKey, components: list[str], executors: Iterable[str]) -> list[dict[str, Any]]:
        found: list[ErrorInfo] = []
        for comp in components:
            try:
                found += self.state.errors(name, comp)
            except StateError:
                continue
        found.sort(key=lambda e: e.time_secs, reverse=True)
        keys = list(executors)
        return [{
            "component": e.component,
            "task": e.task,
            "executor": executor_of(e.task, keys),
            "time": e.time_secs,
            "timePretty": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time_secs)),
            "host": e.host,
            "port": e.port,
            "error": (e.error.strip().splitlines() or [""])[-1],
            "errorFull": e.error,
        } for e in found[:MAX_ERRORS_SHOWN]]

    @staticmethod
    def _configuration(topology: Topology, base: StormBase) -> dict[str, Any]:
        spec = topology.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        config = spec.pop("config", {}) or {}
        spec.pop("spouts", None)
        spec.pop("bolts", None)
        out: dict[str, Any] = {f"spec.{k}": v for k, v in sorted(spec.items())}
        out["spec.numWorkers"] = base.num_workers  # after rebalances
        out.update({k: v for k, v in sorted(config.items())})
        return out
