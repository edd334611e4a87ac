"""`squall run`: a topology file on the local cluster, with live progress and a summary.

Stops after `--duration` or on Ctrl-C with Storm's kill semantics: spouts are deactivated, the
runner waits up to the kill wait for in-flight tuples to finish (ending the wait early once no
spout has a pending tuple), then removes the topology and shuts the cluster down.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from squall import stats
from squall.models.cluster import WorkerHeartbeat, WorkerSlot
from squall.plan import ACKER
from squall.validation import ResolvedTopology
from squall_operator.local import LocalCluster

log = logging.getLogger("squall.run")


@dataclass
class ComponentSummary:
    kind: str
    executors: int = 0
    emitted: int = 0
    transferred: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    dropped: int = 0
    pending: int = 0
    lat_sum: float = 0.0
    lat_n: int = 0
    hist: dict[int, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        latency_name = "complete_latency_ms" if self.kind == "spout" else "execute_latency_ms"
        return {
            "kind": self.kind,
            "executors": self.executors,
            "emitted": self.emitted,
            "transferred": self.transferred,
            "executed": self.executed,
            "acked": self.acked,
            "failed": self.failed,
            "dropped": self.dropped,
            latency_name: {
                "mean": (self.lat_sum / self.lat_n) if self.lat_n else 0.0,
                "p50": stats.percentile(self.hist, 0.50),
                "p99": stats.percentile(self.hist, 0.99),
                "samples": self.lat_n,
            },
        }


def summarize(resolved: ResolvedTopology, beats: dict[WorkerSlot, WorkerHeartbeat]) -> dict[str, ComponentSummary]:
    spouts = {s.name for s in resolved.topology.spec.spouts}
    out = {c.name: ComponentSummary("spout" if c.name in spouts else "bolt") for c in resolved.topology.spec.components}
    for beat in beats.values():
        for ex in beat.executors.values():
            if ex.component == ACKER or ex.component not in out:
                continue
            s = out[ex.component]
            s.executors += 1
            s.emitted += ex.emitted
            s.transferred += ex.transferred
            s.executed += ex.executed
            s.acked += ex.acked
            s.failed += ex.failed
            s.dropped += ex.dropped
            s.pending += ex.pending
            s.lat_sum += ex.latency_ms_mean * ex.latency_samples
            s.lat_n += ex.latency_samples
            s.hist = stats.merge([s.hist, ex.latency_hist])
    return out


def _table(name: str, status: str, elapsed: float, summary: dict[str, ComponentSummary], rates: dict[str, float]) -> Table:
    t = Table(title=f"{name} [{status}] {elapsed:5.1f}s", title_justify="left")
    for col in ("component", "executors", "emitted", "acked", "failed", "rate/s", "latency p50 ms", "p99 ms"):
        t.add_column(col, justify="left" if col == "component" else "right")
    for comp, s in summary.items():
        t.add_row(
            f"{comp} ({s.kind})", str(s.executors), f"{s.emitted:,}", f"{s.acked:,}", f"{s.failed:,}",
            f"{rates.get(comp, 0.0):,.0f}", f"{stats.percentile(s.hist, 0.5):.2f}", f"{stats.percentile(s.hist, 0.99):.2f}",
        )
    return t


def run_topology(
    resolved: ResolvedTopology,
    *,
    search_paths: list[str],
    nodes: int,
    slots: int,
    zookeeper: str | None,
    duration: float | None,
    kill_wait: float | None,
    summary_json: Path | None,
    console: Console,
    progress: bool,
) -> int:
    topology = resolved.topology
    name = topology.name
    spec = topology.spec
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def _interrupt(_sig: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    last: dict[str, ComponentSummary] = {}
    errors: dict[str, str] = {}
    code = 0
    cluster = LocalCluster(nodes=nodes, slots=slots, zookeeper=zookeeper, search_paths=search_paths)
    try:
        console.print(f"[bold]squall[/] starting ZooKeeper, nimbus and {nodes} node(s) x {slots} slot(s)" if zookeeper is None
                      else f"[bold]squall[/] using ZooKeeper at {zookeeper}")
        cluster.start()
        cluster.submit(topology)
        console.print(f"submitted [bold]{name}[/]: {len(spec.spouts)} spout(s), {len(spec.bolts)} bolt(s), {spec.num_workers} worker(s)")
        prev_counts: dict[str, int] = {}
        prev_t = time.monotonic()
        rates: dict[str, float] = {}
        live = Live(console=console, auto_refresh=False, transient=False) if progress and console.is_terminal else None
        if live:
            live.start()
        next_plain = time.monotonic() + 5
        try:
            while not stop.is_set():
                if duration is not None and time.monotonic() - started >= duration:
                    break
                stop.wait(1.0)
                last = summarize(resolved, cluster.state.get_worker_heartbeats(name))
                now = time.monotonic()
                for comp, s in last.items():
                    count = s.acked if s.kind == "spout" else s.executed
                    rates[comp] = (count - prev_counts.get(comp, 0)) / max(1e-6, now - prev_t)
                    prev_counts[comp] = count
                prev_t = now
                elapsed = now - started
                if live:
                    live.update(_table(name, "ACTIVE", elapsed, last, rates), refresh=True)
                elif progress and now >= next_plain:
                    next_plain = now + 5
                    console.print(f"{elapsed:6.1f}s " + "  ".join(
                        f"{c}: emitted={s.emitted} acked={s.acked} failed={s.failed}" for c, s in last.items()))
                if cluster.crashes:
                    for crash in cluster.crashes:
                        console.print(f"[red]{crash}[/]")
                    code = 1
                    cluster.crashes.clear()
        finally:
            if live:
                live.stop()
        # Storm's kill: deactivate, let in-flight tuples finish, then remove
        wait = spec.kill_wait if kill_wait is None else kill_wait
        console.print(f"killing {name}: spouts deactivated, waiting up to {wait:g}s for in-flight tuples")
        cluster.kill(name, wait)
        deadline = time.monotonic() + wait
        seen_deactivated = False
        while time.monotonic() < deadline:
            time.sleep(0.5)
            beats = cluster.state.get_worker_heartbeats(name)
            fresh = [b for b in beats.values() if b.time_secs > time.time() - 1.5]
            last = summarize(resolved, beats)
            pending = sum(s.pending for s in last.values() if s.kind == "spout")
            if pending == 0 and fresh and seen_deactivated:
                break
            seen_deactivated = True
        last = summarize(resolved, cluster.state.get_worker_heartbeats(name))
        errors = {c: e.error.strip().splitlines()[-1] for c in last if (e := cluster.state.last_error(name, c)) is not None}
        cluster.kill(name, 0)
        if not cluster.wait_removed(name, 30):
            console.print("[red]topology was not removed in time[/]")
            code = 1
        if cluster.crashes:
            for crash in cluster.crashes:
                console.print(f"[red]{crash}[/]")
            code = 1
    finally:
        cluster.shutdown()
        signal.signal(signal.SIGINT, previous)
    console.print(_table(name, "KILLED", time.monotonic() - started, last, {}))
    for comp, text in errors.items():
        console.print(f"[yellow]last error in {comp}:[/] {text}")
    if summary_json is not None:
        summary_json.write_text(json.dumps({
            "topology": name,
            "exit_code": code,
            "duration_secs": time.monotonic() - started,
            "components": {c: s.as_dict() for c, s in last.items()},
            "errors": errors,
        }, indent=2))
    return code
