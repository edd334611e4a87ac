"""`squall run`: a topology file on the local cluster, with live progress and a summary.

Stops after `--duration` or on Ctrl-C: spouts are deactivated, the runner waits up to the kill
wait for in-flight tuples to finish (ending the wait early once every worker reports no spout
tuple pending), then kills the topology with no wait left and shuts the cluster down. A `squall
kill NAME -w SECONDS` from another shell (or the UI's kill) is Storm's: the run waits for nimbus
to remove the topology when that kill's wait is over, and never shortens it.

Output: a terminal gets a live table at its width; a pipe or a file gets plain progress lines
and a final table at the width they need (COLUMNS, if set, folds long component names), never
cut (`output_console`, `print_table`).

Totals are per executor over every worker that ran it (`Totals`): a worker replaced or an
executor moved does not take its counts with it. ZooKeeper going away is one warning line: the
workers keep processing, progress resumes when it is back, and nothing exits because a read
failed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from rich import box
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from squall import stats
from squall.models.cluster import TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall.plan import ACKER
from squall.state import CONNECTION_ERRORS, StateError, ZkCredentials
from squall.stateviews import ForViewers
from squall.topology_keys import TopologyKey, topology_key
from squall.validation import ResolvedTopology
from squall_operator.cli_usage import one_line, print_error
from squall_operator.local import LocalCluster
from squall_operator.nimbus import NimbusError
from squall_operator.totals import Totals

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

    @property
    def state(self) -> ForViewers:
        """The cluster's state, as the runner may use it: read, as any viewer (started cluster)."""
        return self.cluster.state

    def _away(self, exc: BaseException | None) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic()
            why = f" ({type(exc).__name__})" if exc is not None else ""
            self.console.print(f"[yellow]ZooKeeper unreachable{why}: the workers keep processing; "
                               "progress resumes when it is back[/]")

    def read(self, fn: Callable[[], T]) -> T | None:
        """fn's result, or None (after warning once) while ZooKeeper is away."""
        if not self.state.ready:
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
            self.state.wait_ready(0.5)


def average_rates(summary: dict[str, ComponentSummary], seconds: float) -> dict[str, float]:
    """Per component, tuples per second over `seconds` of running: acked for spouts, executed
    for bolts (the live table's rates are per refresh)."""
    if seconds <= 0:
        return {}
    return {c: (s.acked if s.kind == "spout" else s.executed) / seconds for c, s in summary.items()}


def _table(name: str, status: str, elapsed: float, summary: dict[str, ComponentSummary], rates: dict[str, float]) -> Table:
    """The progress table: figures keep their width (no_wrap), long component names fold onto a
    second line; `print_table` prints it wider than a narrow terminal rather than cut it."""
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
# seconds past a kill's due time that nimbus gets to remove the topology before the runner says so
REMOVE_GRACE_SECS = 30.0


def _deactivate(cluster: LocalCluster, name: TopologyKey) -> bool:
    """Deactivate the spouts for the runner's own stop; False when the topology's state allows
    no deactivate (rebalancing, killed or removed already)."""
    try:
        cluster.nimbus.deactivate(name)
    except NimbusError:
        return False
    return True


def _kill(cluster: LocalCluster, name: TopologyKey, wait: float) -> None:
    """Storm's kill, unless the topology is gone already (a kill from another shell)."""
    try:
        cluster.kill(name, wait)
    except NimbusError:
        viewer: ForViewers = cluster.state
        if viewer.get_storm(name) is not None:
            raise


def _port_free(port: int) -> str | None:
    """Why 127.0.0.1:`port` cannot be listened on (None: it can), bound as the UI binds it."""
    if port == 0:
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        sock.close()
    return None


class _RunError(Exception):
    """Something the user asked for cannot be done: one line, exit 1."""


# the width of squall run's output when it is not a terminal and COLUMNS is not set: wide
# enough that nothing rich lays out (the table, progress lines) is ever folded or cut
UNBOUNDED_WIDTH = 10_000


def output_console(file: IO[str] | None = None) -> Console:
    """squall run's console on `file` (stdout): a terminal's own width; otherwise COLUMNS if set,
    else unbounded, so that a log file or a pipe gets every column and whole lines. Lines are
    never wrapped by rich (soft wrap): a terminal wraps them itself."""
    console = Console(file=file, soft_wrap=True, highlight=False, emoji=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console.width = UNBOUNDED_WIDTH
    return console


def print_table(console: Console, table: Table) -> None:
    """Print `table` whole: at the console's width, or wider when its figures need it (a narrow
    terminal or COLUMNS): long names fold, figures and headers are never cut."""
    need = console.measure(table, options=console.options.update_width(UNBOUNDED_WIDTH)).minimum
    if need <= console.width:
        console.print(table, crop=False)
        return
    saved = console.width
    console.width = need
    try:
        console.print(table, crop=False)
    finally:
        console.width = saved


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
    name = topology_key(topology.name)  # the local cluster keys a topology by its name
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
    submitted_at: float | None = None

    def refresh(*, with_errors: bool) -> None:
        """Totals (and the components' last errors) from ZooKeeper, if it answers."""
        nonlocal last, errors
        beats = zk.read(lambda: zk.state.get_worker_heartbeats(name))
        if beats:
            totals.update(beats)
            last = summarize(resolved, totals)
        if with_errors:
            got = zk.read(lambda: {c: e.error.strip().splitlines()[-1] for c in last
                                   if (e := zk.state.last_error(name, c)) is not None
                                   and e.error.strip()})
            if got:
                errors = got

    def drain(wait: float) -> bool:
        """After the runner's deactivate: up to `wait` seconds for the spouts' in-flight tuples
        (ends once every worker reported none pending after the deactivate, or on Ctrl-C).
        True when a kill from another shell came meanwhile (its wait is then nimbus's)."""
        since = time.time()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not stop.is_set():
            stop.wait(0.5)
            stored = zk.read(lambda: (zk.state.get_storm(name),))
            if stored is not None and (stored[0] is None or stored[0].status is TopologyStatus.KILLED):
                console.print(f"{name} was killed (squall kill) while stopping")
                return True
            beats = zk.read(lambda: zk.state.get_worker_heartbeats(name))
            if not beats:
                continue
            totals.update(beats)
            last_now = summarize(resolved, totals)
            pending = sum(s.pending for s in last_now.values() if s.kind == "spout")
            if pending == 0 and min(b.time_secs for b in beats.values()) > since + 0.5:
                break
        return False

    def wait_removed() -> bool:
        """Until nimbus removed the killed topology: the kill's wait is its, whoever asked it
        (never cut short here). False when it is still there REMOVE_GRACE_SECS after its due
        time, or on Ctrl-C (the run then stops its cluster, workers and all)."""
        due = time.time()
        while True:
            stored = zk.read(lambda: (zk.state.get_storm(name),))
            if stored is not None:
                if stored[0] is None:
                    cluster.sync_wake.set()
                    return True
                if stored[0].delayed_due_secs is not None:
                    due = stored[0].delayed_due_secs
            if time.time() > due + REMOVE_GRACE_SECS:
                console.print(f"[red]{name} was not removed within {REMOVE_GRACE_SECS:g}s of its kill wait[/]")
                return False
            if stop.is_set():
                console.print(f"interrupted during the kill wait: stopping {name}'s workers now")
                return True
            refresh(with_errors=True)
            if time.time() >= due:
                cluster.nimbus.wake.set()
            stop.wait(0.25)

    try:
        if metrics_port is not None:
            # first: a port in use fails at once, before ZooKeeper and the workers start
            from squall_operator.local_metrics import LocalMetricsServer

            try:
                metrics_server = LocalMetricsServer(cluster, name, metrics_port)
            except OSError as exc:
                raise _RunError(f"--metrics-port {metrics_port}: cannot listen on 127.0.0.1: "
                                f"{exc.strerror or exc}") from None
        if ui_port is not None and (busy := _port_free(ui_port)) is not None:
            raise _RunError(f"--ui-port {ui_port}: cannot listen on 127.0.0.1: {busy}")
        if metrics_server is not None:
            console.print(f"Prometheus metrics of every worker and nimbus: http://127.0.0.1:{metrics_server.port}/metrics",
                          markup=False)
        console.print(f"[bold]squall[/] starting ZooKeeper, nimbus and {nodes} node(s) x {slots} slot(s)" if zookeeper is None
                      else f"[bold]squall[/] using ZooKeeper at {zookeeper}")
        cluster.start()
        if ui_port is not None:
            ui = _start_ui(cluster, ui_port, ui_actions)
            console.print(f"UI: {ui.url}" + (" (actions enabled)" if ui_actions else " (read-only)"), markup=False)
        cluster.nimbus.outage_log_level = logging.INFO  # the runner reports outages (zk)
        cluster.submit(topology)
        submitted_at = time.monotonic()
        console.print(f"submitted [bold]{name}[/]: {len(spec.spouts)} spout(s), {len(spec.bolts)} bolt(s), {spec.num_workers} worker(s)")
        auth = f"SQUALL_ZK_AUTH_FILE={cluster.zk_auth_file} " if cluster.zk_auth_file else ""
        console.print(f"steer it from another shell: {auth}squall list|activate|deactivate|rebalance|kill"
                      f" --zookeeper {cluster.connect_string}", markup=False)
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
        killed_outside = False
        status_now = "ACTIVE"
        try:
            while not stop.is_set():
                now = time.monotonic()
                if duration is not None:
                    since = running_since if running_since is not None else submitted_at + START_LIMIT_SECS
                    if now - since >= duration:
                        break
                stop.wait(1.0)
                # a verb from another shell (`squall kill|deactivate ... --zookeeper`) changes it
                stored = zk.read(lambda: (zk.state.get_storm(name),))
                if stored is not None:
                    if stored[0] is None or stored[0].status is TopologyStatus.KILLED:
                        console.print(f"{name} was killed (squall kill): waiting for nimbus to remove it")
                        killed_outside = True
                        break
                    status_now = stored[0].status.value
                beats = zk.read(lambda: zk.state.get_worker_heartbeats(name))
                if running_since is None and beats:
                    assignment = zk.read(lambda: zk.state.get_assignment(name))
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
                            f"{c}: emitted={s.emitted} acked={s.acked} failed={s.failed}" for c, s in last.items()),
                            markup=False)
                if cluster.crashes:
                    for crash in cluster.crashes:
                        console.print(f"[red]{crash}[/]")
                    code = 1
                    cluster.crashes.clear()
        finally:
            if live:
                live.stop()
        stop.clear()  # a Ctrl-C from now on cuts the waits below short
        # Storm's kill: deactivate, let in-flight tuples finish, then remove. The runner's own
        # stop deactivates and drains for up to the kill wait, ending early once nothing is in
        # flight, then kills with no wait left; a kill from another shell keeps its own wait.
        wait = spec.kill_wait if kill_wait is None else kill_wait
        if not killed_outside:
            console.print(f"stopping {name}: spouts deactivated, waiting up to {wait:g}s for in-flight tuples")
            deactivated = zk.call(lambda: _deactivate(cluster, name), f"deactivate {name}", 120)
            killed_outside = deactivated and drain(wait)
            if not killed_outside:
                zk.call(lambda: _kill(cluster, name, 0.0 if deactivated else wait), f"kill {name}", 120)
        refresh(with_errors=True)
        if not wait_removed():
            code = 1
        stopped_at = time.monotonic()
        last = summarize(resolved, totals)
        if cluster.crashes:
            for crash in cluster.crashes:
                console.print(f"[red]{crash}[/]")
            code = 1
    except (StateError, _RunError) as exc:
        print_error(f"squall run: {exc}")
        code = 1
    finally:
        if metrics_server is not None:
            metrics_server.stop()
        if ui is not None:
            ui.stop()
        cluster.shutdown()
        signal.signal(signal.SIGINT, previous)
    if submitted_at is None:
        return code  # nothing ran: the one line above says why; no empty table
    # the final table's rate is the average over the time the topology ran, not the last second
    ran = (stopped_at - running_since) if running_since is not None and stopped_at is not None else 0.0
    print_table(console, _table(name, "KILLED", time.monotonic() - started, last, average_rates(last, ran)))
    for comp, text in errors.items():  # a component's own text: no markup, nothing raw
        console.print(f"[yellow]last error in {escape(comp)}:[/] {escape(one_line(text))}")
    if summary_json is not None:
        try:
            summary_json.write_text(json.dumps({
                "topology": name,
                "exit_code": code,
                "duration_secs": time.monotonic() - started,
                "components": {c: s.as_dict() for c, s in last.items()},
                "errors": errors,
            }, indent=2))
        except OSError as exc:
            console.print(f"[red]cannot write --summary-json {summary_json}: {exc.strerror or exc}[/]")
            code = 1
    return code
