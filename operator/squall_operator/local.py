"""The local cluster: nimbus, simulated supervisor nodes and real worker processes on one machine.

`squall run` uses it, and so do the integration tests. ZooKeeper is real: an embedded server
started from the jars PySpark ships, unless a connect string is given. Each simulated node
registers its slots in ZooKeeper like a Storm supervisor and runs a sync loop that starts a worker
process for every slot assigned to it, restarts a worker that died, stops workers whose slot
is no longer assigned, and replaces the workers of an earlier launch of a topology (a graph
upgrade stores the new graph with a new launch time): every outdated worker on every node is
stopped, its spouts closed, before a worker of the new launch starts. Every child process dies with its parent (PR_SET_PDEATHSIG).

ZooKeeper ACLs: with credentials (``zk_credentials``; generated when the cluster starts its own
ZooKeeper) every node under the cluster's root carries a digest ACL for that user alone; the
workers get the credentials in a 0600 file in the cluster's work directory, named by
``$SQUALL_ZK_AUTH_FILE``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from squall.models.cluster import SupervisorInfo, WorkerSlot
from squall.models.v1alpha1 import Topology
from squall.ports import free_ports
from squall.state import CONNECTION_ERRORS, ZK_AUTH_ENV, ZK_AUTH_FILE_ENV, ClusterState, ZkCredentials
from squall.topology_keys import TopologyKey
from squall.worker.security import CurveKeys, write_keys
from squall.zkserver import EmbeddedZooKeeper
from squall_operator.monitor import LOCAL_TIMEOUTS, MonitorTimeouts
from squall_operator.nimbus import Nimbus
from squall_operator.requests import serve_pending

log = logging.getLogger("squall.local")


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setpgrp()


@dataclass
class WorkerProcess:
    topology: TopologyKey
    slot: WorkerSlot
    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float
    restarts: int = 0
    # the launch of the topology it runs (StormBase.launch_time_secs when it was started)
    launch: float = 0.0


def default_slots(cores: int, nodes: int, num_workers: int) -> int:
    """Slots per simulated node when `squall run` is not told: one worker per core across the
    nodes (a worker is one engine loop, one core's worth of work), never fewer than 2 per node
    (room to rebalance onto) nor than the topology's numWorkers need."""
    per_node = -(-max(cores, num_workers) // nodes)  # ceiling
    return max(2, per_node)


@dataclass
class Supervisor:
    """One simulated node: its slots and the worker processes it runs."""

    node: str
    ports: list[int]
    workers: dict[tuple[TopologyKey, WorkerSlot], WorkerProcess] = field(default_factory=dict)
    failed: bool = False


class LocalCluster:
    def __init__(
        self,
        nodes: int = 2,
        slots: int = 2,
        zookeeper: str | None = None,
        search_paths: Sequence[str] = (),
        workdir: str | None = None,
        timeouts: MonitorTimeouts = LOCAL_TIMEOUTS,
        monitor_freq_secs: float = 1.0,
        host: str = "127.0.0.1",
        worker_session_timeout: float | None = None,
        worker_zookeeper: str | None = None,
        curve: bool = False,
        zk_credentials: ZkCredentials | None = None,
    ) -> None:
        if nodes < 1 or slots < 1:
            raise ValueError("a local cluster needs at least one node with one slot")
        self.n_nodes = nodes
        self.n_slots = slots
        self.zk_connect = zookeeper
        self.search_paths = [str(Path(p).resolve()) for p in search_paths]
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="squall-local-"))
        if worker_session_timeout is not None:  # workers reconnect within their session timeout
            grace = max(timeouts.reconnect_grace, worker_session_timeout + 2.0)
            timeouts = dataclasses.replace(timeouts, reconnect_grace=grace)
        self.timeouts = timeouts
        self.monitor_freq_secs = monitor_freq_secs
        self.host = host
        # the ZooKeeper session timeout workers ask for (None: the worker's default)
        self.worker_session_timeout = worker_session_timeout
        # the ZooKeeper connect string workers use (None: the cluster's; tests put a proxy here)
        self.worker_zookeeper = worker_zookeeper
        # seal the workers' transport with CURVE: a key pair per submission, in keys/<topology>/
        self.curve = curve
        self.zk: EmbeddedZooKeeper | None = None
        # digest credentials of the cluster's ZooKeeper nodes (None: nodes open to every client)
        self.zk_credentials = zk_credentials
        self.zk_auth_file: Path | None = None
        self.root = f"/squall-local-{os.getpid()}-{int(time.time() * 1000)}"
        self.supervisors: dict[str, Supervisor] = {}
        self.stop_event = threading.Event()
        self.sync_wake = threading.Event()
        self.lock = threading.RLock()
        self.crashes: list[str] = []
        self._thread: threading.Thread | None = None
        # answers the CLI verbs' requests in ZooKeeper (`squall_operator.requests`)
        self._requests_thread: threading.Thread | None = None
        self.requests_wake = threading.Event()
        # what the nodes should run, as last read from ZooKeeper: kept while it is away, so
        # workers that die meanwhile are still restarted
        self._wanted: dict[str, dict[tuple[TopologyKey, WorkerSlot], float]] = {}
        self._zk_away = False

    # -- start and stop ----------------------------------------------------------------------
    def start(self) -> LocalCluster:
        if self.zk_connect is None:
            self.zk = EmbeddedZooKeeper()
            self.zk.start()
            self.zk_connect = self.zk.connect_string
            if self.zk_credentials is None:
                self.zk_credentials = ZkCredentials.generate()
        if self.zk_credentials is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.zk_auth_file = self.zk_credentials.write(self.workdir / f"zk-auth-{os.getpid()}-{id(self)}")
        self.state = ClusterState.connect(self.zk_connect, root=self.root, credentials=self.zk_credentials)
        ports = free_ports(self.n_nodes * self.n_slots, self.host)
        for i in range(self.n_nodes):
            node = f"node{i + 1}"
            sup = Supervisor(node, ports[i * self.n_slots : (i + 1) * self.n_slots])
            self.supervisors[node] = sup
            self._register(sup)
        self.nimbus = Nimbus(self.state, timeouts=self.timeouts, monitor_freq_secs=self.monitor_freq_secs)
        self.nimbus.graph_check = self._check_classes
        self.nimbus.start()
        self._thread = threading.Thread(target=self._sync_loop, name="supervisors", daemon=True)
        self._thread.start()
        self._requests_thread = threading.Thread(target=self._requests_loop, name="requests", daemon=True)
        self._requests_thread.start()
        return self

    @property
    def connect_string(self) -> str:
        """Where the CLI verbs reach this cluster: ZooKeeper's HOST:PORT and the root,
        `squall list --zookeeper <this>`."""
        return f"{self.zk_connect}{self.root}"

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _register(self, sup: Supervisor) -> None:
        self.state.register_supervisor(
            sup.node, SupervisorInfo(host=self.host, ports=sup.ports, time_secs=time.time())
        )

    def shutdown(self) -> None:
        # Workers get PR_SET_PDEATHSIG from the supervisors' thread that spawned them, so they
        # are stopped gracefully while that thread still lives, and only then is it joined.
        self.stop_event.set()
        if hasattr(self, "nimbus"):
            self.nimbus.stop()
        with self.lock:
            for sup in self.supervisors.values():
                for wp in list(sup.workers.values()):
                    self._stop_worker(sup, wp, grace=10.0)
        self.sync_wake.set()
        self.requests_wake.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._requests_thread is not None:
            self._requests_thread.join(10)
        if hasattr(self, "state"):
            try:
                if self.state.ready:  # else the call would wait for ZooKeeper to come back
                    self.state.client.delete(self.root, recursive=True)
                else:
                    log.warning("ZooKeeper unreachable: %s is left there", self.root)
            except Exception:
                pass
            self.state.close()
        if self.zk is not None:
            self.zk.stop()
        if self.zk_auth_file is not None:
            self.zk_auth_file.unlink(missing_ok=True)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- topology operations -------------------------------------------------------------------
    def submit(self, topology: Topology) -> None:
        if self.curve:
            # a new pair at every submission: workers of a previous one cannot reach these
            write_keys(self.curve_keys_dir(topology.name), CurveKeys.generate())
        self.nimbus.submit(topology)
        self.sync_wake.set()

    def _check_classes(self, topology: Topology) -> None:
        """An upgrade's new graph checked with its classes, imported from the workers' search
        paths in a child process (a class missing or a stream it does not declare is refused
        before the running topology is touched, not found by crash-looping workers)."""
        from squall.classcheck import check_topology_isolated

        check_topology_isolated(topology, search_paths=self.search_paths, source=topology.name)

    def curve_keys_dir(self, topology: str) -> Path:
        """Where a topology's CURVE pair is (files 0600 in a 0700 directory) when `curve` is on."""
        return self.workdir / "keys" / topology

    def kill(self, name: TopologyKey, wait_secs: float | None = None) -> None:
        self.nimbus.kill(name, wait_secs)

    def wait_removed(self, name: TopologyKey, timeout: float) -> bool:
        """Whether the topology's nodes are gone within `timeout`; a moment without ZooKeeper
        (the client reconnecting) is waited through, as nimbus waits, not raised."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                gone = self.state.get_storm(name) is None
            except CONNECTION_ERRORS:
                gone = False
            if gone:
                self.sync_wake.set()
                return True
            self.nimbus.wake.set()
            time.sleep(0.1)
        return False

    def fail_node(self, node: str) -> None:
        """A node dies: its workers are killed and its supervisor stops heartbeating."""
        with self.lock:
            sup = self.supervisors[node]
            sup.failed = True
            for wp in list(sup.workers.values()):
                wp.proc.kill()
                wp.proc.wait()
            sup.workers.clear()
            self.state.remove_supervisor(node)
        self.nimbus.wake.set()

    def worker_pids(self, topology: str | None = None) -> dict[WorkerSlot, int]:
        with self.lock:
            return {
                wp.slot: wp.proc.pid
                for sup in self.supervisors.values()
                for (topo, _), wp in sup.workers.items()
                if topology is None or topo == topology
            }

    # -- the supervisors' sync loop -----------------------------------------------------------
    def _sync_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.sync()
            except Exception:
                if not self.stop_event.is_set():
                    log.exception("supervisor sync failed; retrying")
            self.sync_wake.wait(0.5)
            self.sync_wake.clear()

    # -- the CLI verbs' requests -------------------------------------------------------------
    def _requests_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.state.ready and serve_pending(self.state, self.nimbus, time.time(),
                                                      watch=self.requests_wake.set):
                    self.sync_wake.set()
            except CONNECTION_ERRORS:
                pass  # nimbus and the runner report outages; requests wait for ZooKeeper
            except Exception:
                if not self.stop_event.is_set():
                    log.exception("answering CLI requests failed; retrying")
            self.requests_wake.wait(1.0)
            self.requests_wake.clear()

    def _read_wanted(self) -> dict[str, dict[tuple[TopologyKey, WorkerSlot], float]] | None:
        """Node -> (topology, slot) it should run -> the topology's launch time, from ZooKeeper;
        None while it is away."""
        wanted: dict[str, dict[tuple[TopologyKey, WorkerSlot], float]] = {n: {} for n in self.supervisors}
        watch = lambda *_: self.sync_wake.set()  # noqa: E731
        try:
            if not self.state.ready:
                return None
            for topo in self.state.assignment_ids(watch=watch):
                # the StormBase first: nimbus writes an upgrade's new launch before its assignment
                base = self.state.get_storm(topo)
                assignment = self.state.get_assignment(topo, watch=watch)
                if assignment is None or base is None:
                    continue
                for slot in set(assignment.slots().values()):
                    if slot.node in wanted:
                        wanted[slot.node][(topo, slot)] = base.launch_time_secs
        except CONNECTION_ERRORS as exc:
            if not self._zk_away:
                # nimbus (or `squall run`) says it louder: one warning per outage
                log.info("ZooKeeper unreachable (%s): the nodes keep their workers running", exc)
            self._zk_away = True
            return None
        self._zk_away = False
        return wanted

    def sync(self) -> None:
        """Storm's sync-processes for every node: make running workers match the assignments
        (the last ones read while ZooKeeper is away)."""
        got = self._read_wanted()
        if got is not None:
            self._wanted = got
        elif not self._wanted:
            return
        wanted = self._wanted
        with self.lock:
            if self.stop_event.is_set():
                return
            live = [sup for sup in self.supervisors.values() if not sup.failed]
            # every node's outdated workers go first: a worker of a new launch opens its spouts
            # only after the old ones have closed theirs (a source's state is handed over there)
            outdated = [(sup, wp) for sup in live for key, wp in sup.workers.items()
                        if key not in wanted.get(sup.node, {}) or wanted[sup.node][key] != wp.launch]
            for sup, wp in outdated:
                if wp.proc.poll() is None and (wp.topology, wp.slot) in wanted.get(sup.node, {}):
                    log.info("worker %s of %s runs an earlier launch; replacing it", wp.slot.key(), wp.topology)
                self._stop_worker(sup, wp, grace=5.0)
            for sup in live:
                for key, wp in list(sup.workers.items()):
                    if wp.proc.poll() is not None:
                        code = wp.proc.returncode
                        self.crashes.append(f"worker {key[1].key()} of {key[0]} exited with {code}")
                        log.warning("worker %s of %s exited with %s; restarting", key[1].key(), key[0], code)
                        sup.workers[key] = self._spawn(key[0], key[1], wp.restarts + 1, wp.launch)
                for key, launch in wanted.get(sup.node, {}).items():
                    if key not in sup.workers:
                        sup.workers[key] = self._spawn(key[0], key[1], launch=launch)

    def _spawn(self, topo: TopologyKey, slot: WorkerSlot, restarts: int = 0, launch: float | None = None) -> WorkerProcess:
        if launch is None:  # the launch stored now (a test starting a slot's next worker itself)
            base = self.state.get_storm(topo)
            launch = 0.0 if base is None else base.launch_time_secs
        log_path = self.workdir / f"worker-{topo}-{slot.key()}.log"
        cmd = [
            sys.executable, "-m", "squall.worker",
            "--zookeeper", str(self.worker_zookeeper or self.zk_connect), "--root", self.root,
            "--topology", topo, "--node", slot.node, "--port", str(slot.port),
            "--host", self.host,
            # /readyz, /healthz, /metrics on a free port, published in the worker's endpoint
            "--metrics-port", "0",
        ]
        for p in self.search_paths:
            cmd += ["--search-path", p]
        if self.worker_session_timeout is not None:
            cmd += ["--zk-session-timeout", str(self.worker_session_timeout)]
        if self.curve:
            cmd += ["--curve-keys", str(self.curve_keys_dir(topo))]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*self.search_paths, *filter(None, [env.get("PYTHONPATH")])])
        env.pop(ZK_AUTH_FILE_ENV, None)
        env.pop(ZK_AUTH_ENV, None)
        if self.zk_auth_file is not None:
            env[ZK_AUTH_FILE_ENV] = str(self.zk_auth_file)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, preexec_fn=_die_with_parent,
            )
        log.info("started worker %s of %s (pid %d)", slot.key(), topo, proc.pid)
        return WorkerProcess(topo, slot, proc, log_path, time.time(), restarts, launch)

    def _stop_worker(self, sup: Supervisor, wp: WorkerProcess, grace: float) -> None:
        if wp.proc.poll() is None:
            wp.proc.terminate()
            try:
                wp.proc.wait(grace)
            except subprocess.TimeoutExpired:
                wp.proc.kill()
                wp.proc.wait()
        sup.workers.pop((wp.topology, wp.slot), None)

    def worker_logs(self) -> dict[str, str]:
        return {p.name: p.read_text(errors="replace") for p in sorted(self.workdir.glob("worker-*.log"))}
