"""Stateful bolts end to end: the stateful word count example on a LocalCluster (real ZooKeeper,
real worker processes, zmq) with its state in a real redis-server on loopback. The totals in
Redis must equal a recount of the input exactly, after a kill -9 of a worker mid-run and after
a rebalance: the spout's position and the counters' totals roll back to the same checkpoint."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall.statebackend import namespace, open_provider
from squall.validation import parse_topology
from squall_operator.local import LocalCluster
from helpers import (  # the integration tests' helpers (same directory)
    assigned_slots,
    component_slots,
    logs_tail,
    stop_topology,
    totals as engine_totals,
    wait_for,
    wait_running,
)
from loadfile import load_file

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "stateful-wordcount"


def example_module() -> Any:
    return load_file(EXAMPLE / "stateful_wordcount.py", "_swc_example")


def stateful_wordcount(name: str, redis: Any, limit: int, rate: float, workers: int = 2) -> Topology:
    data = yaml.safe_load((EXAMPLE / "topology.yaml").read_text())
    data["metadata"]["name"] = name
    spec = data["spec"]
    spec["numWorkers"] = workers
    spec["messageTimeoutSecs"] = 10  # a checkpoint lost with a worker fails within 10 s
    spec["config"].update({
        "topology.state.provider.config": redis.provider_config(),
        "topology.state.checkpoint.interval.ms": 300,
        "wordcount.limit": limit,
        "wordcount.rate": rate,
    })
    return parse_topology(data, source=name)


class Committed:
    """What the topology committed to Redis, read with the provider the workers use."""

    def __init__(self, topo: Topology) -> None:
        self.conf = {"topology.name": topo.name, **topo.spec.config}
        self.tasks = build_plan(topo, {}).component_tasks

    def state(self, component: str, task: int) -> Any:
        return open_provider(self.conf).state(namespace(component, self.tasks[component].index(task)))

    def position(self) -> int:
        return min(int(self.state("sentences", t).get("position", 0)) for t in self.tasks["sentences"])

    def txids(self, component: str) -> list[int]:
        return [self.state(component, t).committed_txid() or -1 for t in self.tasks[component]]

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tasks["count"]:
            for word, n in self.state("count", t):
                assert word not in out, f"{word} in two count tasks"
                out[word] = n
        return out


def wait_exact_end(cluster: LocalCluster, committed: Committed, limit: int, timeout: float) -> dict[str, int]:
    """Waits for the checkpoint that holds the whole input, then for every counter to have
    committed it; returns the committed totals."""
    wait_for(lambda: committed.position() >= limit, timeout, f"the spout's committed position to reach {limit}",
             cluster, 0.5)
    final = min(committed.txids("sentences"))
    wait_for(lambda: min(committed.txids("count")) >= final, 60, f"every counter to commit txid {final}", cluster,
             0.5)
    return committed.totals()


def started(topo: Topology, make_cluster: Callable[..., LocalCluster], slots: int,
            position: int) -> tuple[Committed, LocalCluster]:
    """`topo` (a stateful word count) submitted to a new 2-node cluster with `slots` slots each,
    returned once its spout's committed position reached `position`: a few checkpoints in."""
    committed = Committed(topo)
    cluster = make_cluster(nodes=2, slots=slots, search_paths=[str(EXAMPLE)])
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: committed.position() >= position, 90, "a few committed checkpoints", cluster, 0.5)
    return committed, cluster


def test_totals_are_exact_after_kill_9_of_a_worker(make_cluster: Callable[..., LocalCluster], tmp_path: Path,
                                                   redis_server: Any) -> None:
    limit = 4000
    topo = stateful_wordcount("swc-kill", redis_server, limit, rate=150)
    committed, cluster = started(topo, make_cluster, 1, 800)
    assert committed.position() < limit - 1500, "the run ended before the kill; slow the spout down"
    slots = component_slots(cluster, topo)
    victims = assigned_slots(cluster, topo.name) - slots["sentences"]
    assert len(victims) == 1 and victims <= slots["count"], slots
    victim = victims.pop()
    pid = cluster.worker_pids(topo.name)[victim]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: cluster.worker_pids(topo.name).get(victim, pid) != pid, 30, "the worker's restart", cluster)
    assert any("exited with -9" in c for c in cluster.crashes), cluster.crashes
    totals = wait_exact_end(cluster, committed, limit, 180)
    expected = example_module().expected_counts(limit)
    # the trees complete too (acked after the commits), not only the state
    assert engine_totals(cluster, topo.name)["sentences"]["acked"] > limit // 2, logs_tail(cluster)
    assert totals == expected, f"differences: { {w: (totals.get(w), expected.get(w)) for w in set(totals) | set(expected) if totals.get(w) != expected.get(w)} }" + logs_tail(cluster)
    stop_topology(cluster, topo.name)


def test_totals_are_exact_after_a_rebalance(make_cluster: Callable[..., LocalCluster], tmp_path: Path,
                                            redis_server: Any) -> None:
    limit = 3000
    topo = stateful_wordcount("swc-rebalance", redis_server, limit, rate=150)
    committed, cluster = started(topo, make_cluster, 2, 600)
    cluster.nimbus.rebalance(topo.name, num_workers=3, wait_secs=1)
    wait_for(lambda: len(assigned_slots(cluster, topo.name)) == 3, 30, "an assignment on 3 slots", cluster)
    assert committed.position() < limit, "the run ended before the rebalance; slow the spout down"
    totals = wait_exact_end(cluster, committed, limit, 180)
    assert totals == example_module().expected_counts(limit), logs_tail(cluster)
    stop_topology(cluster, topo.name)


def test_a_state_kept_under_storm_s_task_names_is_read_by_this_version(
        make_cluster: Callable[..., LocalCluster], tmp_path: Path, redis_server: Any) -> None:
    """A Squall before the graph upgrades kept each task's state under `<component>-<task>`:
    the word count's committed state is moved to those names (as an older Squall left it) while
    the topology is stopped; submitted again, every task copies its old state to
    `<component>#<index>` (squall.checkpoint.task_state) and the totals stay exact."""
    limit = 3000
    topo = stateful_wordcount("swc-legacy", redis_server, limit, rate=150)
    committed, cluster = started(topo, make_cluster, 1, 600)
    stop_topology(cluster, topo.name)
    stopped = committed.position()
    assert stopped < limit - 1000, "the run ended before the stop; slow the spout down"
    client = redis_server.client()
    prefix = f"squall:{topo.name}:"
    moved: list[str] = []
    for component, tasks in committed.tasks.items():
        for index, task in enumerate(tasks):
            for suffix in ("", "$prepare", "$txid", "$preparetxid"):
                key = prefix + namespace(component, index) + suffix
                if client.exists(key):
                    client.rename(key, prefix + f"{component}-{task}" + suffix)
                    moved.append(component + suffix)
    # every state committed: the checkpoint spout's, the spout's and the 4 counters'
    assert sorted(c for c in moved if c.endswith("$txid")) == sorted(
        ["$checkpointspout$txid", "sentences$txid"] + ["count$txid"] * 4), moved
    cluster.submit(topo)
    wait_running(cluster, topo)
    # the state under the new names is the old one from the first: started afresh, the run's
    # first commits would hold a position near 0 (and come to the same totals in the end)
    wait_for(lambda: min(committed.txids("sentences")) >= 0, 60, "the spout's state under its new name",
             cluster, 0.05)
    assert committed.position() >= stopped, (committed.position(), stopped)
    totals = wait_exact_end(cluster, committed, limit, 180)
    assert totals == example_module().expected_counts(limit), logs_tail(cluster)
    # the old names are left as they were (an older Squall can still read them)
    assert int(open_provider(committed.conf).state(f"sentences-{committed.tasks['sentences'][0]}")
               .get("position", 0)) == stopped
    stop_topology(cluster, topo.name)


def test_squall_run_runs_the_example(tmp_path: Path, redis_server: Any) -> None:
    """`squall run` on the example (its Redis address pointed at the test's redis-server)."""
    import shutil
    import subprocess
    import sys

    limit = 500
    shutil.copy(EXAMPLE / "stateful_wordcount.py", tmp_path)
    data = yaml.safe_load((EXAMPLE / "topology.yaml").read_text())
    data["spec"]["config"].update({"topology.state.provider.config": redis_server.provider_config(),
                                   "topology.state.checkpoint.interval.ms": 200, "wordcount.limit": limit})
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(data))
    proc = subprocess.run([sys.executable, "-m", "squall_operator", "run", "topology.yaml", "--duration", "8",
                           "--kill-wait", "3", "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    committed = Committed(parse_topology(data, source="run"))
    assert committed.position() == limit
    assert committed.totals() == example_module().expected_counts(limit)


def test_window_contents_survive_kill_9(make_cluster: Callable[..., LocalCluster], tmp_path: Path,
                                        redis_server: Any) -> None:
    """Storm's persistent windowing: a tumbling window of 10 ids whose tuples span a kill -9 of
    its worker still holds exactly those 10 ids (the window contents are checkpointed)."""
    n = 3000
    data = {
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "swin"},
        "spec": {
            "numWorkers": 2, "messageTimeoutSecs": 10, "maxSpoutPending": 1000,
            "config": {"topology.state.provider": "redis",
                       "topology.state.provider.config": redis_server.provider_config(),
                       "topology.state.checkpoint.interval.ms": 300, "test.count": n, "test.rate": 150},
            "spouts": [{"name": "ids", "class": "stateful_components:IdSpout", "stateful": True}],
            "bolts": [{"name": "win", "class": "stateful_components:WindowSums", "stateful": True,
                       "window": {"windowLength": 10},
                       "inputs": [{"component": "ids", "grouping": "global"}]}],
        },
    }
    topo = parse_topology(data, source="swin")
    committed = Committed(topo)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)

    def position() -> int:
        return int(committed.state("ids", committed.tasks["ids"][0]).get("position", 0))

    wait_for(lambda: position() >= 600, 90, "a few committed checkpoints", cluster, 0.5)
    assert position() < n - 1000, "the run ended before the kill; slow the spout down"
    (victim,) = component_slots(cluster, topo)["win"]
    pid = cluster.worker_pids(topo.name)[victim]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: cluster.worker_pids(topo.name).get(victim, pid) != pid, 30, "the worker's restart", cluster)
    wait_for(lambda: position() >= n, 180, "the whole input committed", cluster, 0.5)
    final = committed.state("ids", committed.tasks["ids"][0]).committed_txid()
    (win_task,) = committed.tasks["win"]
    wait_for(lambda: (committed.state("win", win_task).committed_txid() or -1) >= (final or 0), 60,
             "the window bolt to commit the last checkpoint", cluster, 0.5)
    got = dict(committed.state("win", win_task))
    assert got == {k: [10, sum(range(k, k + 10))] for k in range(0, n, 10)}, logs_tail(cluster)
    stop_topology(cluster, topo.name)


def test_totals_are_exact_after_redis_stalls_mid_run(make_cluster: Callable[..., LocalCluster], tmp_path: Path,
                                                     redis_server: Any) -> None:
    """Redis stops answering for a while (SIGSTOP, longer than the client's timeout): the
    checkpoints fail and roll back until it answers again, and nothing is counted twice or lost."""
    import time

    limit = 3000
    topo = stateful_wordcount("swc-stall", redis_server, limit, rate=150)
    data = topo.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["config"]["topology.state.provider.config"]["timeoutSecs"] = 2
    topo = parse_topology(data, source="swc-stall")
    committed, cluster = started(topo, make_cluster, 1, 600)
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(8)
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    assert committed.position() < limit, "the run ended before the stall; slow the spout down"
    totals = wait_exact_end(cluster, committed, limit, 180)
    assert totals == example_module().expected_counts(limit), logs_tail(cluster)
    stop_topology(cluster, topo.name)


def test_squall_run_names_an_unreachable_redis_before_starting(tmp_path: Path, redis_server: Any) -> None:
    import shutil
    import subprocess
    import sys

    port = redis_server.port
    redis_server.proc.kill()
    redis_server.proc.wait()
    shutil.copy(EXAMPLE / "stateful_wordcount.py", tmp_path)
    data = yaml.safe_load((EXAMPLE / "topology.yaml").read_text())
    data["spec"]["config"]["topology.state.provider.config"] = {"host": "127.0.0.1", "port": port, "timeoutSecs": 2}
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(data))
    try:
        proc = subprocess.run([sys.executable, "-m", "squall_operator", "run", "topology.yaml", "--duration", "5",
                               "--no-progress"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"squall run did not refuse the topology within 60 s: {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode != 0, proc.stdout
    assert f"127.0.0.1:{port}" in proc.stderr and "topology.state.provider.config" in proc.stderr, proc.stderr
    assert "submitted" not in proc.stdout  # nothing started
