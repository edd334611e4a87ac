"""A garbage assignment node in ZooKeeper: another client with the cluster's
credentials writes non-JSON into a running topology's assignment. Nimbus owns the node: one
line names it, nimbus rewrites it from its own state and carries on; a worker killed meanwhile
is restarted (and counted as a crash, which makes `squall run` exit 1); the topology keeps
processing; `squall list` prints one clear line instead of a traceback. Real ZooKeeper, real
worker processes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from childproc import die_with_this_process
from helpers import id_pipeline, logs_tail, stop_topology, totals, wait_for, wait_running

from squall.models.cluster import Assignment
from squall.state import ClusterState, ZkCredentials
from squall_operator.local import LocalCluster
from squall_operator.nimbus import initial_storm_base

pytestmark = pytest.mark.integration

GARBAGE = b"\x00not json {{{ \xff"


def node(state: ClusterState, topo: str) -> str:
    return f"{state.root}/assignments/{topo}"


def unreadable_lines(caplog: pytest.LogCaptureFixture, path: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if path in r.getMessage()]


def test_the_reader_reads_garbage_as_the_last_assignment_it_knew(
    cluster_state: ClusterState, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "squall.state")
    first = Assignment(executor_slots={"1-1": "n1-7000"}, node_host={"n1": "127.0.0.1"})
    assert cluster_state.set_assignment("t", first)
    path = node(cluster_state, "t")
    cluster_state.client.set(path, GARBAGE)
    for _ in range(5):
        assert cluster_state.read_assignment("t") == (first, False)
        assert cluster_state.get_assignment("t") == first
    [line] = unreadable_lines(caplog, path)
    assert line.startswith(f"{path}: not a JSON payload") and "nimbus rewrites it" in line
    # another client that never read it: nothing to fall back on
    other = ClusterState(cluster_state.client, cluster_state.root)
    assert other.read_assignment("t") == (None, False)
    # the writer overwrites it; the same garbage again is told again
    second = Assignment(executor_slots={"1-1": "n1-7001"}, node_host={"n1": "127.0.0.1"})
    assert cluster_state.set_assignment("t", second)
    assert other.read_assignment("t") == (second, True)
    cluster_state.client.set(path, GARBAGE)
    assert cluster_state.read_assignment("t") == (second, False)
    assert len(unreadable_lines(caplog, path)) == 2


def test_squall_list_prints_one_line_for_a_garbage_assignment(cluster_state: ClusterState,
                                                              zookeeper: object) -> None:
    topo = id_pipeline("listed", Path("/nonexistent"), 0, workers=1)
    cluster_state.set_storm(topo.name, initial_storm_base(topo, 0.0))
    cluster_state.client.create(node(cluster_state, topo.name), GARBAGE, makepath=True)
    where = f"{cluster_state.client.hosts[0][0]}:{cluster_state.client.hosts[0][1]}{cluster_state.root}"
    proc = subprocess.run([sys.executable, "-m", "squall_operator", "list", "--zookeeper", where],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert node(cluster_state, topo.name) in line and "not a JSON payload" in line, line
    assert proc.stdout.splitlines()[-1].split()[:2] == ["listed", "ACTIVE"], proc.stdout


def test_nimbus_rewrites_a_garbage_assignment_and_restarts_a_killed_worker(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    topo = id_pipeline("garbled", tmp_path / "out", 0, rate=200)  # endless, 2 workers
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 100, 60, "the first acks", cluster)
    before = cluster.state.get_assignment(topo.name)
    pids = cluster.worker_pids(topo.name)
    path = node(cluster.state, topo.name)

    # another client writes garbage into the node, and a worker dies at once
    with ClusterState.connect(cluster.zk_connect, root=cluster.root, credentials=cluster.zk_credentials) as other:
        other.client.set(path, GARBAGE)
    victim, pid = sorted(pids.items())[0]
    os.kill(pid, signal.SIGKILL)

    # nimbus rewrote the node from its own state: the same placement
    def rewritten() -> bool:
        data, _stat = cluster.state.client.get(path)
        return bool(data != GARBAGE)
    wait_for(rewritten, 30, f"nimbus to rewrite {path}", cluster)
    assert cluster.state.get_assignment(topo.name).executor_slots == before.executor_slots
    # the killed worker is restarted, and counted as a crash (`squall run` exits 1 on one)
    wait_for(lambda: cluster.worker_pids(topo.name).get(victim) not in (None, pid), 60,
             f"worker {victim.key()} to be restarted", cluster)
    wait_running(cluster, topo)
    assert any(victim.key() in c for c in cluster.crashes), cluster.crashes
    # the topology keeps processing
    acked = totals(cluster, topo.name)["ids"]["acked"]
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > acked + 200, 60, "acks after the garbage", cluster)
    # one line named the node, however many monitor rounds, supervisors and watches read it
    lines = unreadable_lines(caplog, path)
    assert len(lines) == 1, lines
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
    print(f"told once: {lines[0]}" + ("" if lines else logs_tail(cluster)))
    stop_topology(cluster, topo.name)


REPO = Path(__file__).resolve().parents[2]


def worker_children(parent: int) -> dict[int, list[str]]:
    """pid -> argv of the worker processes `parent` started (read from /proc)."""
    found: dict[int, list[str]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and "squall.worker" in argv:
            found[int(entry)] = argv
    return found


def arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_squall_run_says_it_once_restarts_the_worker_and_exits_1(zookeeper: Any) -> None:
    """The reported run: `squall run` while another client writes garbage into the assignment and
    a worker is killed. Before: 83 tracebacks, the worker never restarted, exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "squall_operator", "run", "examples/wordcount/topology.yaml", "--duration", "20",
         "--kill-wait", "1", "--no-progress", "--zookeeper", zookeeper.connect_string],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        preexec_fn=die_with_this_process(),
    )
    try:
        deadline = time.monotonic() + 60
        while not (workers := worker_children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert workers, "squall run started no worker"
        pid, argv = sorted(workers.items())[0]
        env = dict(line.split("=", 1) for line in
                   Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in line)
        auth = env.get("SQUALL_ZK_AUTH_FILE")
        credentials = ZkCredentials.from_file(auth) if auth else None
        name = arg(argv, "--topology")
        with ClusterState.connect(zookeeper.connect_string, root=arg(argv, "--root"),
                                  credentials=credentials) as other:
            path = node(other, name)
            wait_for(lambda: other.client.exists(path), 30, f"{path} to exist")
            time.sleep(1)
            other.client.set(path, GARBAGE)
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = out.decode(errors="replace")
    assert "Traceback" not in text, text
    told = [line for line in text.splitlines() if path in line]
    assert len(told) == 1 and "not a JSON payload" in told[0], text
    assert f"of {name} exited with -9" in text, text  # the crash line: the worker was seen dead, and restarted
    assert proc.returncode == 1, text
