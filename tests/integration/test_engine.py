"""The engine end to end: a LocalCluster on the session's real ZooKeeper, real worker processes
talking zmq, nimbus scheduling, and the failure cases Storm's guarantees are about.

Every test runs a short topology from tests/integration/topologies/engine_components.py (or the
word count example) and checks what the components wrote to files after the topology was killed:
files written in a spout's close or a bolt's cleanup hold the truth, heartbeats only tell when to
stop. Waits poll with deadlines; the deadlines are generous because the machine is shared.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
import yaml
from helpers import (
    COMPONENTS,
    WORDCOUNT,
    assigned_slots,
    component_slots,
    id_pipeline,
    latest_beat_time,
    logs_tail,
    read_spout,
    stop_topology,
    topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
)

from squall.models.cluster import TopologyStatus, WorkerSlot
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall.validation import parse_topology
from squall_operator.local import LocalCluster
from loadfile import load_file

pytestmark = pytest.mark.integration


def _load_module(path: Path) -> Any:
    return load_file(path, f"_squall_test_{path.stem}")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


# -- 1. word count, exact --------------------------------------------------------------------
def test_wordcount_counts_exactly(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    limit = 3000
    out = tmp_path / "out"
    data = yaml.safe_load((WORDCOUNT / "topology.yaml").read_text())
    data["spec"]["config"] = {"wordcount.limit": limit, "wordcount.out": str(out)}
    topo = parse_topology(data, source="wordcount")
    cluster = make_cluster(search_paths=[str(WORDCOUNT)])
    cluster.submit(topo)

    def acked() -> bool:
        return totals(cluster, topo.name)["sentences"]["acked"] >= limit

    wait_for(acked, 90, f"the spout to ack {limit} sentences", cluster, 0.25)
    stop_topology(cluster, topo.name)

    SENTENCES = _load_module(WORDCOUNT / "wordcount.py").SENTENCES
    expected: collections.Counter[str] = collections.Counter()
    for n in range(limit):
        expected.update(SENTENCES[n % len(SENTENCES)].split())
    spout = json.loads((out / f"spout-{_only_task(out, 'spout')}.json").read_text())
    assert spout["acked"] == limit and spout["failed"] == 0 and spout["unacked"] == []
    counted: collections.Counter[str] = collections.Counter()
    files = sorted(out.glob("count-*.json"))
    assert len(files) == 4, files  # count: numTasks 4
    for f in files:
        counted.update(json.loads(f.read_text()))
    assert counted == expected
    assert not cluster.crashes


def _only_task(out: Path, prefix: str) -> str:
    files = sorted(out.glob(f"{prefix}-*.json"))
    assert len(files) == 1, files
    return files[0].stem.split("-", 1)[1]


# -- 2. a bolt that fails some tuples: replays until every id is acked ------------------------
def test_failed_tuples_are_replayed_until_all_acked(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    n = 1000
    out = tmp_path / "out"
    flaky = {"name": "flaky", "class": f"{COMPONENTS}:FlakyBolt", "parallelism": 2,
             "inputs": [{"component": "ids", "grouping": "fields", "fields": ["id"]}]}
    topo = id_pipeline("flaky-fail", out, n, middle=flaky, extra={"test.mod": 10, "test.mode": "fail"})
    cluster = make_cluster()
    cluster.submit(topo)
    wait_spout_done(out, cluster, 60)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    rejected = sorted(i for f in out.glob("flaky-*.json") for i in json.loads(f.read_text())["rejected"])
    assert rejected == list(range(0, n, 10))  # each rejected exactly once: replays came back
    assert spout["failed"] >= len(rejected) > 0
    assert not cluster.crashes


# -- 3. kill -9 of a worker -------------------------------------------------------------------
def test_worker_killed_with_sigkill_recovers(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    n = 1500
    out = tmp_path / "out"
    topo = id_pipeline("sigkill", out, n, rate=250)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 200, 60, "the first acks", cluster)
    slots = component_slots(cluster, topo)
    victims = assigned_slots(cluster, topo.name) - slots["ids"]
    assert len(victims) == 1, slots
    victim = victims.pop()
    pid = cluster.worker_pids(topo.name)[victim]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: cluster.worker_pids(topo.name).get(victim, pid) != pid, 30, "the worker's restart", cluster)
    assert any("exited with -9" in c for c in cluster.crashes), cluster.crashes
    wait_spout_done(out, cluster, 90)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert spout["opens"] == 1  # the spout's worker was not touched


# -- 4. a node fails: nimbus moves its executors to a free node ---------------------------------
def test_node_failure_reassigns_to_free_node(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    n = 1500
    out = tmp_path / "out"
    topo = id_pipeline("nodefail", out, n, rate=250)
    cluster = make_cluster(nodes=3, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 200, 60, "the first acks", cluster)
    spout_nodes = {s.node for s in component_slots(cluster, topo)["ids"]}
    before = assigned_slots(cluster, topo.name)
    assert len(before) == 2
    (failed_node,) = {s.node for s in before} - spout_nodes
    (free_node,) = set(cluster.supervisors) - {s.node for s in before}
    cluster.fail_node(failed_node)

    def moved() -> set[WorkerSlot] | None:
        now = assigned_slots(cluster, topo.name)
        return now if len(now) == 2 and {s.node for s in now} == spout_nodes | {free_node} else None

    after = wait_for(moved, 30, f"the executors of {failed_node} to move to {free_node}", cluster)
    assert failed_node not in {s.node for s in after}
    wait_running(cluster, topo)
    wait_spout_done(out, cluster, 90)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert spout["opens"] == 1


# -- 5. hot rebalance ---------------------------------------------------------------------------
def test_rebalance_to_more_workers_loses_nothing(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    n = 2000
    out = tmp_path / "out"
    topo = id_pipeline("rebalance", out, n, rate=250)
    cluster = make_cluster(nodes=2, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    assert len(assigned_slots(cluster, topo.name)) == 2
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 200, 60, "the first acks", cluster)
    cluster.nimbus.rebalance(topo.name, num_workers=3, wait_secs=1)
    wait_for(lambda: len(assigned_slots(cluster, topo.name)) == 3, 30, "an assignment on 3 slots", cluster)
    wait_for(lambda: cluster.nimbus.status(topo.name) is TopologyStatus.ACTIVE, 30, "ACTIVE again", cluster)
    base = cluster.state.get_storm(topo.name)
    assert base is not None and base.num_workers == 3
    wait_running(cluster, topo)
    wait_spout_done(out, cluster, 90)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert not cluster.crashes


# -- 6. deactivate / activate -----------------------------------------------------------------
def test_deactivate_stops_spout_and_activate_resumes(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    topo = id_pipeline("lifecycle", tmp_path / "out", 0, rate=200, workers=1)
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["emitted"] > 0, 60, "the spout to emit", cluster)

    def emitted_after(t: float) -> int | None:
        """The spout's emitted count from a heartbeat taken after time `t`."""
        if latest_beat_time(cluster, topo.name) <= t:
            return None
        return totals(cluster, topo.name)["ids"]["emitted"]

    cluster.nimbus.deactivate(topo.name)
    assert cluster.nimbus.status(topo.name) is TopologyStatus.INACTIVE
    # the worker sees the change through its ZooKeeper watch; give it a heartbeat to settle
    settled = time.time() + 1.0
    e1 = wait_for(lambda: emitted_after(settled), 30, "a heartbeat after deactivate", cluster)
    later = time.time() + 2.0
    e2 = wait_for(lambda: emitted_after(later), 30, "a later heartbeat", cluster)
    assert e2 == e1, f"the spout kept emitting while inactive: {e1} -> {e2}"

    cluster.nimbus.activate(topo.name)
    assert cluster.nimbus.status(topo.name) is TopologyStatus.ACTIVE
    wait_for(lambda: totals(cluster, topo.name)["ids"]["emitted"] > e2 + 100, 30, "the spout to emit again", cluster)
    stop_topology(cluster, topo.name)
    assert not cluster.crashes


# -- 7. backpressure ----------------------------------------------------------------------------
def test_backpressure_bounds_memory_without_deadlock(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    slow = {"name": "slow", "class": f"{COMPONENTS}:SlowBolt", "parallelism": 1,
            "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    data = {
        "numWorkers": 2,
        "messageTimeoutSecs": 60,
        "spouts": [{"name": "ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1}],
        "bolts": [slow],
    }
    topo = topology("backpressure", data, {"test.count": 0, "test.sleep_ms": 1})
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    # Without maxSpoutPending the spout emits until every buffer between it and the slow bolt
    # is full; then backpressure holds it to the bolt's pace. Measure once that happened.
    filled = _wait_backpressured(cluster, topo.name, max_rate=5000, timeout=90)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > 0, 60, "the first acks", cluster)
    pids = cluster.worker_pids(topo.name)
    assert len(pids) == 2
    rss1 = {slot: rss_kb(pid) for slot, pid in pids.items()}
    acked1 = totals(cluster, topo.name)["ids"]["acked"]
    executed1 = totals(cluster, topo.name)["slow"]["executed"]
    t1 = time.time()
    wait_for(lambda: latest_beat_time(cluster, topo.name) > t1 + 5, 30, "heartbeats 5 s later", cluster)
    rss2 = {slot: rss_kb(pid) for slot, pid in pids.items()}
    t = totals(cluster, topo.name)
    assert t["slow"]["executed"] > executed1, "the slow bolt stopped executing (deadlock?)"
    assert t["ids"]["acked"] > acked1, "acks stopped arriving"
    assert cluster.worker_pids(topo.name) == pids, "a worker was restarted"
    growth = {slot.key(): (rss2[slot] - rss1[slot]) / 1024 for slot in pids}
    assert all(g < 60 for g in growth.values()), f"RSS grew by {growth} MB in 5 s"
    absolute = {slot.key(): rss2[slot] // 1024 for slot in pids}
    assert all(mb < 600 for mb in absolute.values()), f"RSS {absolute} MB ({filled} tuples in flight)"
    stop_topology(cluster, topo.name)
    assert not cluster.crashes


def _wait_backpressured(cluster: LocalCluster, topo: str, max_rate: float, timeout: float) -> int:
    """Wait until the spout's emit rate stayed below `max_rate` over two consecutive heartbeat
    intervals (the buffers are full); returns the spout's pending count then."""
    deadline = time.monotonic() + timeout
    prev: tuple[float, int] | None = None
    slow_intervals = 0
    while time.monotonic() < deadline:
        beat_t = latest_beat_time(cluster, topo)
        emitted = totals(cluster, topo)["ids"]["emitted"]
        if prev is None:
            prev = (beat_t, emitted)
        elif beat_t > prev[0] + 0.9:
            slow = emitted > 0 and (emitted - prev[1]) / (beat_t - prev[0]) < max_rate
            slow_intervals = slow_intervals + 1 if slow else 0
            if slow_intervals >= 2:
                return totals(cluster, topo)["ids"]["pending"]
            prev = (beat_t, emitted)
        time.sleep(0.2)
    pytest.fail(f"the spout never slowed below {max_rate}/s" + logs_tail(cluster))


# -- 8. garbage on a worker's ports -------------------------------------------------------------
def _send_frames(cluster: LocalCluster, topo: str, frames: list[bytes], *, data: bool, control: bool) -> None:
    """PUSH `frames` to every worker's data and/or control port, as registered in ZooKeeper."""
    ctx = zmq.Context()
    try:
        for ep in cluster.state.get_endpoints(topo).values():
            ports = ([ep.port] if data else []) + ([ep.control_port] if control else [])
            for port in ports:
                sock = ctx.socket(zmq.PUSH)
                sock.setsockopt(zmq.LINGER, 5000)
                sock.connect(f"tcp://{ep.host}:{port}")
                for frame in frames:
                    sock.send(frame)
                sock.send_multipart([b"two", b"parts"])
                sock.close()
    finally:
        ctx.term()


def _run_with_garbage(make_cluster: Callable[..., LocalCluster], tmp_path: Path, name: str,
                      frames: Callable[[Topology], tuple[list[bytes], list[bytes]]]) -> None:
    n = 1500
    out = tmp_path / "out"
    topo = id_pipeline(name, out, n, rate=250)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 100, 60, "the first acks", cluster)
    pids = cluster.worker_pids(topo.name)
    data_frames, control_frames = frames(topo)
    _send_frames(cluster, topo.name, data_frames, data=True, control=False)
    _send_frames(cluster, topo.name, control_frames, data=False, control=True)
    wait_spout_done(out, cluster, 90)
    assert cluster.worker_pids(topo.name) == pids, "a worker died: " + logs_tail(cluster)
    assert not cluster.crashes, logs_tail(cluster)
    assert "bad frame" in "".join(cluster.worker_logs().values())
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert not cluster.crashes


def test_garbage_on_worker_ports_is_dropped(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    """Undecodable frames, frames of the wrong shape, and well-formed frames for tasks, roots
    and acker kinds that do not exist: all dropped, nothing dies, every id is acked."""

    def frames(topo: Topology) -> tuple[list[bytes], list[bytes]]:
        plan = build_plan(topo, {})
        sink = plan.component_tasks["sink"][0]
        passer = plan.component_tasks["pass"][0]
        spout_task = plan.component_tasks["ids"][0]
        acker = plan.acker_tasks[0]
        rng = random.Random(7)
        common = [
            b"",
            bytes(rng.getrandbits(8) for _ in range(64)),
            b"\xc1\xc1\xc1",  # a byte msgpack never uses
            msgpack.packb({"not": "a list"}),
            msgpack.packb([1, 2, 3]),
            msgpack.packb([[1, 2, 3]]),
            msgpack.packb([["a", "b", "c", "d", "e"]]),
        ]
        data = common + [
            msgpack.packb([["x", 1, "default", [1], None]]),
            msgpack.packb([[sink, 1, "default", "not a list", None]]),
            msgpack.packb([[sink, 1, 7, [1], None]]),
            msgpack.packb([[999_999, 1, "default", [1], None]]),  # no such task
            msgpack.packb([[passer, 1, "default", [], None]]),  # PassBolt raises IndexError
            msgpack.packb([[sink, 1, "no-such-stream", [5], None]]),
            msgpack.packb([[sink, spout_task, "default", [5], {12345: 678}]]),  # unknown root
        ]
        control = common + [
            msgpack.packb([[3, spout_task, 12345, 1, 0]]),  # DONE for a root nobody has
            msgpack.packb([[1, acker, 12345, 678, 0]]),  # ACK of an unknown root
            msgpack.packb([[0, acker, 12345, 678, 999_999]]),  # INIT for a task that does not exist
            msgpack.packb([[2, 999_999, 1, 2, 3]]),
            msgpack.packb([[9, acker, 1, 2, 3]]),  # no such kind
            msgpack.packb([[1, acker, "root", 1, 0]]),
        ]
        return data, control

    _run_with_garbage(make_cluster, tmp_path, "garbage", frames)


def test_malformed_tuple_fields_are_dropped(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    """Data frames of the right length whose source task or anchors have the wrong type."""

    def frames(topo: Topology) -> tuple[list[bytes], list[bytes]]:
        sink = build_plan(topo, {}).component_tasks["sink"][0]
        data = [
            msgpack.packb([[sink, 1, "default", [7], "not anchors"]]),
            msgpack.packb([[sink, [1], "default", [7], None]]),
            msgpack.packb([[sink, 1, "default", [7], {"root": "edge"}]]),
            msgpack.packb([[sink, 1, "default", [7], {1: "edge"}]]),
        ]
        return data, []

    _run_with_garbage(make_cluster, tmp_path, "garbage-fields", frames)


# -- 9. a bolt that raises ----------------------------------------------------------------------
def test_bolt_exception_is_reported_and_tuple_replayed(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    n = 600
    out = tmp_path / "out"
    flaky = {"name": "flaky", "class": f"{COMPONENTS}:FlakyBolt", "parallelism": 2,
             "inputs": [{"component": "ids", "grouping": "fields", "fields": ["id"]}]}
    topo = id_pipeline("flaky-raise", out, n, middle=flaky, extra={"test.mod": 7, "test.mode": "raise"})
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    pids = cluster.worker_pids(topo.name)
    error = wait_for(lambda: cluster.state.last_error(topo.name, "flaky"), 60, "an error in ZooKeeper", cluster)
    assert "ValueError: flaky bolt rejects id" in error.error
    assert error.component == "flaky"
    assert error.task in build_plan(topo, {}).component_tasks["flaky"]
    wait_spout_done(out, cluster, 60)
    assert cluster.worker_pids(topo.name) == pids, "a worker was restarted"
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    rejected = sorted(i for f in out.glob("flaky-*.json") for i in json.loads(f.read_text())["rejected"])
    assert rejected == list(range(0, n, 7))
    assert spout["failed"] >= len(rejected)
    assert not cluster.crashes
