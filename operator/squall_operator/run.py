"""`squall run`: a topology file on the local cluster, with live progress and a summary.

Stops after `--duration` or on Ctrl-C with Storm's kill semantics: spouts are deactivated, the
runner waits up to the kill wait for in-flight tuples to finish (ending the wait early once no
spout has a pending tuple), then removes the topology and shuts the cluster down.

Totals are per executor over every worker that ran it (`Totals`): a worker replaced or an
executor moved does not take its counts with it. ZooKeeper going away is one warning line: the
workers keep processing, progress resumes when it is back, and nothing exits because a read
failed.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from squall import stats
from squall.models.cluster import ExecutorStats, TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall.plan import ACKER
from squall.state import CONNECTION_ERRORS, StateError, ZkCredentials
from squall.validation import ResolvedTopology
from squall_operator.local import LocalCluster
from squall_operator.nimbus import NimbusError

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


_COUNTERS = ("emitted", "transferred", "executed", "acked", "failed", "dropped", "latency_samples")


class Totals:
    """Per-executor counters summed over every worker incarnation that ran the executor.

    A heartbeat holds the counters of one worker process since it started. When a worker is
    replaced (same slot, counters start again) or an executor moves (its old slot stops
    reporting it), the last counts seen of the old incarnation are kept, so totals never go
    back. A new incarnation shows as a counter or the uptime going down.
    """

    def __init__(self) -> None:
        # (slot, executor) -> (worker uptime, latest stats) of the incarnation running now
        self.latest: dict[tuple[WorkerSlot, str], tuple[float, ExecutorStats]] = {}
        # final stats of incarnations that ended
        self.ended: list[ExecutorStats] = []
        self.current: set[tuple[WorkerSlot, str]] = set()

    def update(self, beats: dict[WorkerSlot, WorkerHeartbeat]) -> None:
        self.current = set()
        for slot, beat in beats.items():
            for key, ex in beat.executors.items():
                k = (slot, key)
                self.current.add(k)
                prev = self.latest.get(k)
                if prev is not None and (
                    beat.uptime_secs < prev[0]
                    or any(getattr(ex, c) < getattr(prev[1], c) for c in _COUNTERS)
                ):
                    self.ended.append(prev[1])
                self.latest[k] = (beat.uptime_secs, ex)

    def executor_stats(self) -> list[tuple[ExecutorStats, bool]]:
        """Every incarnation's stats, with whether it is running now (pending counts only then)."""
        out = [(ex, False) for ex in self.ended]
        out += [(ex, k in self.current) for k, (_, ex) in self.latest.items()]
        return out


def summarize(resolved: ResolvedTopology, beats: dict[WorkerSlot, WorkerHeartbeat] | Totals) -> dict[str, ComponentSummary]:
    spouts = {s.name for s in resolved.topology.spec.spouts}
    out = {c.name: ComponentSummary("spout" if c.name in spouts else "bolt") for c in resolved.topology.spec.components}
    if isinstance(beats, Totals):
        entries = beats.executor_stats()
    else:
        entries = [(ex, True) for beat in beats.values() for ex in beat.executors.values()]
    for ex, running in entries:
        if ex.component == ACKER or ex.component not in out:
            continue
        s = out[ex.component]
        if running:
            s.executors += 1
            s.pending += ex.pending
        s.emitted += ex.emitted
        s.transferred += ex.transferred
        s.executed += ex.executed
        s.acked += ex.acked
        s.failed += ex.failed
        s.dropped += ex.dropped
        s.lat_sum += ex.latency_ms_mean * ex.latency_samples
        s.lat_n += ex.latency_samples
        s.hist = stats.merge([s.hist, ex.latency_hist])
    return out


T = TypeVar("T")


class _ZooKeeperReads:
    """The runner's ZooKeeper calls: an outage is one warning line and one line when it ends,
    never a traceback or an exit; the workers keep running meanwhile."""

    def __init__(self, cluster: LocalCluster, console: Console) -> None:
        self.cluster = cluster
        self.console = console
        self.away_since: float | None = None

    def _away(self, exc: BaseException | None) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic()
            why = f" ({type(exc).__name__})" if exc is not None else ""
            self.console.print(f"[yellow]ZooKeeper unreachable{why}: the workers keep processing; "
                               "progress resumes when it is back[/]")

    def read(self, fn: Callable[[], T]) -> T | None:
        """fn's result, or None (after warning once) while ZooKeeper is away."""
        if not self.cluster.state.ready:
            self._away(None)
            return None
        try:
            value = fn()
        except CONNECTION_ERRORS as exc:
            self._away(exc)
            return None
        if self.away_since is not None:
            self.console.print(f"ZooKeeper is back after {time.monotonic() - self.away_since:.0f}s")
            self.away_since = None
        return value

    def call(self, fn: Callable[[], T], what: str, timeout: float) -> T:
        """Retry fn until ZooKeeper answers; StateError after `timeout` seconds without it."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.read(lambda: (fn(),))
            if got is not None:
                return got[0]
            if time.monotonic() >= deadline:
                raise StateError(f"cannot {what}: ZooKeeper unreachable for {timeout:g}s")
            self.cluster.state.wait_ready(0.5)


def average_rates(summary: dict[str, ComponentSummary], seconds: float) -> dict[str, float]:
    """Per component, tuples per second over `seconds` of running: acked for spouts, executed
    for bolts (the live table's rates are per refresh)."""
    if seconds <= 0:
        return {}
    return {c: (s.acked if s.kind == "spout" else s.executed) / seconds for c, s in summary.items()}


def _table(name: str, status: str, elapsed: float, summary: dict[str, ComponentSummary], rates: dict[str, float]) -> Table:
    """The progress table. In a narrow terminal nothing is cut: figures keep their width, long
    component names fold onto a second line and headers wrap."""
    rows = [
        [f"{comp} ({s.kind})", str(s.executors), f"{s.emitted:,}", f"{s.acked:,}", f"{s.failed:,}",
         f"{rates.get(comp, 0.0):,.0f}", f"{stats.percentile(s.hist, 0.5):.2f}", f"{stats.percentile(s.hist, 0.99):.2f}"]
        for comp, s in summary.items()
    ]
    t = Table(title=f"{name} [{status}] {elapsed:5.1f}s", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("component", overflow="fold", min_width=12)
    for i, col in enumerate(("execs", "emitted", "acked", "failed", "rate/s", "p50 ms", "p99 ms"), start=1):
        widest = max([len(col)] + [len(r[i]) for r in rows])
        t.add_column(col, justify="right", no_wrap=True, min_width=widest)
    for r in rows:
        t.add_row(*r)
    return t


class _RunUi:
    """The web UI of `squall run --ui`: on loopback, actions through the in-process nimbus."""

    def __init__(self, cluster: LocalCluster, port: int, actions: bool) -> None:
        from squall_operator.ui import NimbusActions, UiServer, create_app
        from squall_operator.ui.data import UiData

        self.data = UiData(cluster.state)
        app = create_app(self.data, NimbusActions(cluster.nimbus), actions_enabled=actions,
                         title="Squall (local)")
        self.server = UiServer(app, "127.0.0.1", port)

    def start(self) -> _RunUi:
        self.data.start()
        try:
            self.server.start()
        except OSError:
            self.data.stop()
            raise
        return self

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()
        self.data.stop()


def _start_ui(cluster: LocalCluster, port: int, actions: bool) -> _RunUi:
    try:
        return _RunUi(cluster, port, actions).start()
    except OSError as exc:
        raise StateError(f"cannot serve the UI on 127.0.0.1:{port}: {exc.strerror or exc}") from None


# seconds `squall run` waits for every worker of the topology to start before --duration counts
START_LIMIT_SECS = 60.0


def _remove_now(cluster: LocalCluster, name: str) -> None:
    """Remove a killed topology at once, unless its kill wait already removed it."""
    try:
        cluster.kill(name, 0)
    except NimbusError:
        if cluster.state.get_storm(name) is not None:
            raise


class _RunError(Exception):
    """Something the user asked for cannot be done: one line, exit 1."""


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
    curve: bool = False,
    metrics_port: int | None = None,
    ui_port: int | None = None,
    ui_actions: bool = False,
    zk_credentials: ZkCredentials | None = None,
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
    cluster = LocalCluster(nodes=nodes, slots=slots, zookeeper=zookeeper, search_paths=search_paths, curve=curve,
                           zk_credentials=zk_credentials)
    ui: _RunUi | None = None
    zk = _ZooKeeperReads(cluster, console)
    totals = Totals()
    running_since: float | None = None
    stopped_at: float | None = None
    metrics_server: Any = None
    try:
        if metrics_port is not None:
            # first: a port in use fails at once, before ZooKeeper and the workers start
            from squall_operator.local_metrics import LocalMetricsServer

            try:
                metrics_server = LocalMetricsServer(cluster, name, metrics_port)
            except OSError as exc:
                raise _RunError(f"--metrics-port {metrics_port}: cannot listen on 127.0.0.1: "
                                f"{exc.strerror or exc}") from None
            console.print(f"Prometheus metrics of every worker and nimbus: http://127.0.0.1:{metrics_server.port}/metrics",
                          markup=False, soft_wrap=True)
        console.print(f"[bold]squall[/] starting ZooKeeper, nimbus and {nodes} node(s) x {slots} slot(s)" if zookeeper is None
                      else f"[bold]squall[/] using ZooKeeper at {zookeeper}")
        cluster.start()
        if ui_port is not None:
            ui = _start_ui(cluster, ui_port, ui_actions)
            console.print(f"UI: {ui.url}" + (" (actions enabled)" if ui_actions else " (read-only)"),
                          markup=False, soft_wrap=True)
        cluster.nimbus.outage_log_level = logging.INFO  # the runner reports outages (zk)
        cluster.submit(topology)
        console.print(f"submitted [bold]{name}[/]: {len(spec.spouts)} spout(s), {len(spec.bolts)} bolt(s), {spec.num_workers} worker(s)")
        auth = f"SQUALL_ZK_AUTH_FILE={cluster.zk_auth_file} " if cluster.zk_auth_file else ""
        console.print(f"steer it from another shell: {auth}squall list|activate|deactivate|rebalance|kill"
                      f" --zookeeper {cluster.connect_string}", markup=False, soft_wrap=True)
        prev_counts: dict[str, int] = {}
        prev_t = time.monotonic()
        rates: dict[str, float] = {}
        live = Live(console=console, auto_refresh=False, transient=False) if progress and console.is_terminal else None
        if live:
            live.start()
        next_plain = time.monotonic() + 5
        # --duration counts from when every assigned worker runs, not from the start of
        # ZooKeeper and the JVMs: on a slow machine a short run would otherwise end before its
        # workers had started. A topology whose workers never all start still stops, after
        # START_LIMIT_SECS more.
        submitted = time.monotonic()
        killed_outside = False
        status_now = "ACTIVE"
        try:
            while not stop.is_set():
                now = time.monotonic()
                if duration is not None:
                    since = running_since if running_since is not None else submitted + START_LIMIT_SECS
                    if now - since >= duration:
                        break
                stop.wait(1.0)
                # a verb from another shell (`squall kill|deactivate ... --zookeeper`) changes it
                stored = zk.read(lambda: (cluster.state.get_storm(name),))
                if stored is not None:
                    if stored[0] is None or stored[0].status is TopologyStatus.KILLED:
                        console.print(f"{name} was killed (squall kill): stopping")
                        killed_outside = True
                        break
                    status_now = stored[0].status.value
                beats = zk.read(lambda: cluster.state.get_worker_heartbeats(name))
                if running_since is None and beats:
                    assignment = zk.read(lambda: cluster.state.get_assignment(name))
                    if assignment is not None and set(assignment.slots().values()) <= set(beats):
                        running_since = time.monotonic()
                if beats is not None:
                    totals.update(beats)
                    last = summarize(resolved, totals)
                    now = time.monotonic()
                    for comp, s in last.items():
                        count = s.acked if s.kind == "spout" else s.executed
                        rates[comp] = (count - prev_counts.get(comp, 0)) / max(1e-6, now - prev_t)
                        prev_counts[comp] = count
                    prev_t = now
                    elapsed = now - started
                    if live:
                        live.update(_table(name, status_now, elapsed, last, rates), refresh=True)
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
        if not killed_outside:
            console.print(f"killing {name}: spouts deactivated, waiting up to {wait:g}s for in-flight tuples")
            zk.call(lambda: cluster.kill(name, wait), f"kill {name}", 120)
        deadline = time.monotonic() + wait
        seen_deactivated = False
        while time.monotonic() < deadline:
            time.sleep(0.5)
            beats = zk.read(lambda: cluster.state.get_worker_heartbeats(name))
            if beats is None:
                continue
            if not beats and zk.read(lambda: (cluster.state.get_storm(name),)) == (None,):
                break  # removed already (a `squall kill` with a short wait)
            fresh = [b for b in beats.values() if b.time_secs > time.time() - 1.5]
            totals.update(beats)
            last = summarize(resolved, totals)
            pending = sum(s.pending for s in last.values() if s.kind == "spout")
            if pending == 0 and fresh and seen_deactivated:
                break
            seen_deactivated = True
        totals.update(zk.call(lambda: cluster.state.get_worker_heartbeats(name), "read the heartbeats", 120))
        last = summarize(resolved, totals)
        stopped_at = time.monotonic()
        errors = zk.call(lambda: {c: e.error.strip().splitlines()[-1] for c in last
                                  if (e := cluster.state.last_error(name, c)) is not None}, "read the errors", 120)
        # the kill wait may have run out and removed the topology already: nothing to remove
        zk.call(lambda: _remove_now(cluster, name), f"remove {name}", 120)
        if not zk.call(lambda: cluster.wait_removed(name, 30), f"remove {name}", 120):
            console.print("[red]topology was not removed in time[/]")
            code = 1
        if cluster.crashes:
            for crash in cluster.crashes:
                console.print(f"[red]{crash}[/]")
            code = 1
    except (StateError, _RunError) as exc:
        console.print(f"[red]{exc}[/]")
        code = 1
    finally:
        if metrics_server is not None:
            metrics_server.stop()
        if ui is not None:
            ui.stop()
        cluster.shutdown()
        signal.signal(signal.SIGINT, previous)
    # the final table's rate is the average over the time the topology ran, not the last second
    ran = (stopped_at - running_since) if running_since is not None and stopped_at is not None else 0.0
    console.print(_table(name, "KILLED", time.monotonic() - started, last, average_rates(last, ran)))
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
