"""ZooKeeper sessions and outages under load: real ZooKeeper, real
worker processes, real zmq.

* A worker whose session expires (paused longer than its session timeout) registers its endpoint
  again in its new session; peers deliver to it again and every id is acked, with no worker
  replaced.
* ZooKeeper stopped for longer than every session timeout under load and started again with its
  data: tuples keep flowing while it is away, no worker is replaced, acking is back to its rate
  within seconds and the totals go on from where they were.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from childproc import die_with_this_process
from helpers import (  # the integration tests' helpers (same directory)
    TOPOLOGIES,
    component_slots,
    id_pipeline,
    logs_tail,
    stop_topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
)

from squall.zkserver import EmbeddedZooKeeper, java_available
from squall_operator.local import LocalCluster
from squall_operator.monitor import MonitorTimeouts

pytestmark = pytest.mark.integration

# nimbus must not replace the paused worker: its task timeout is well above the pause
PATIENT = MonitorTimeouts(task_timeout=20.0, launch_timeout=40.0)


def test_worker_registers_its_endpoint_again_after_its_session_expired(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = make_cluster(nodes=2, slots=1, timeouts=PATIENT, worker_session_timeout=2.0)
    out = tmp_path / "out"
    topo = id_pipeline("expiry", out, 3000, workers=2, rate=300, timeout=5)
    cluster.submit(topo)
    wait_running(cluster, topo)
    pids = cluster.worker_pids(topo.name)
    assert len(pids) == 2
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > 200, 30, "acking to start", cluster)
    # pause the worker that does not run the spout: the spout's worker sends it half the ids
    spout_slots = component_slots(cluster, topo)["ids"]
    [slot] = [s for s in pids if s not in spout_slots]
    endpoint = cluster.state.get_endpoints(topo.name)[slot]
    os.kill(pids[slot], signal.SIGSTOP)
    try:
        wait_for(lambda: slot not in cluster.state.get_endpoints(topo.name), 15,
                 "the paused worker's session to expire", cluster)
    finally:
        os.kill(pids[slot], signal.SIGCONT)
    resumed = time.monotonic()
    wait_for(lambda: cluster.state.get_endpoints(topo.name).get(slot) == endpoint, 15,
             "the worker to register its endpoint again in its new session", cluster)
    print(f"endpoint back {time.monotonic() - resumed:.1f}s after the worker resumed")
    # peers deliver to it again: every id is acked (ids routed to it were replayed)
    wait_spout_done(out, cluster, 90)
    assert cluster.worker_pids(topo.name) == pids, "a worker was replaced" + logs_tail(cluster)
    stop_topology(cluster, topo.name)


def acked(cluster: LocalCluster, name: str) -> int:
    return int(totals(cluster, name)["ids"]["acked"])


def rate(cluster: LocalCluster, name: str, secs: float = 3.0) -> float:
    before, t0 = acked(cluster, name), time.monotonic()
    time.sleep(secs)
    return (acked(cluster, name) - before) / (time.monotonic() - t0)


@pytest.mark.skipif(not java_available(), reason="no java on PATH")
def test_zookeeper_outage_longer_than_the_session_timeout_costs_nothing(tmp_path: Path) -> None:
    # its own server: this test stops it. Sessions: 10 s for nimbus's client, 4 s for workers.
    zk = EmbeddedZooKeeper(tick_time_ms=500, min_session_timeout_ms=1000, max_session_timeout_ms=10_000)
    zk.start()
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    cluster = LocalCluster(nodes=2, slots=2, zookeeper=zk.connect_string, workdir=str(workdir),
                           search_paths=[str(TOPOLOGIES)], worker_session_timeout=4.0)
    try:
        cluster.start()
        topo = id_pipeline("outage", tmp_path / "out", 0, workers=2, rate=400, timeout=30)
        cluster.submit(topo)
        wait_running(cluster, topo)
        pids = cluster.worker_pids(topo.name)
        wait_for(lambda: acked(cluster, topo.name) > 1000, 30, "acking to start", cluster)
        before_rate = rate(cluster, topo.name)
        before = acked(cluster, topo.name)
        zk.stop(keep_data=True)
        outage = 12.0  # longer than every session timeout
        time.sleep(outage)
        zk.start()
        back = time.monotonic()
        assert cluster.state.wait_ready(30), "the local cluster did not get back to ZooKeeper"
        # tuples flowed while ZooKeeper was away: the first totals after it show them
        after = wait_for(lambda: max(0, acked(cluster, topo.name) - before) and acked(cluster, topo.name),
                         30, "a heartbeat written after the outage", cluster)
        print(f"acked {before} before, {after} right after a {outage:g}s outage; rate before {before_rate:.0f}/s")
        assert after >= before + 0.5 * before_rate * outage, "acking stopped while ZooKeeper was away"
        # back to its rate within seconds, with the same workers, totals continuous
        seen = [after]
        deadline = back + 20
        while True:
            got = rate(cluster, topo.name, 2.0)
            seen.append(acked(cluster, topo.name))
            if got >= 0.7 * before_rate:
                break
            assert time.monotonic() < deadline, f"acking did not get back to {before_rate:.0f}/s: {got:.0f}/s" + logs_tail(cluster)
        print(f"rate {got:.0f}/s {time.monotonic() - back:.1f}s after ZooKeeper came back")
        assert seen == sorted(seen), f"totals went backwards: {seen}"
        time.sleep(6)  # past nimbus's task timeout: nothing is declared dead late either
        assert cluster.worker_pids(topo.name) == pids, "a worker was replaced" + logs_tail(cluster)
        assert not cluster.crashes, cluster.crashes
        assert not [e for e in cluster.nimbus.events if "dead" in e], cluster.nimbus.events
        stop_topology(cluster, topo.name)
    finally:
        cluster.shutdown()
        zk.stop()


def _worker_pids(root: int) -> set[int]:
    from test_run_cli import descendants

    return {p for p, c in descendants(root).items() if "squall.worker" in c}


def _acked_lines(text: str) -> list[int]:
    """The spout's acked count from each plain progress line of `squall run`."""
    return [int(m) for m in re.findall(r"sentences: emitted=\d+ acked=(\d+)", text)]


@pytest.mark.skipif(not java_available(), reason="no java on PATH")
def test_squall_run_rides_out_a_zookeeper_outage(tmp_path: Path) -> None:
    """`squall run --zookeeper` on the word count; ZooKeeper stopped for 14 s (longer than every
    session timeout) and started again with its data: exit 0, no traceback, one warning about
    the outage, the same workers, totals continuous."""
    from test_run_cli import REPO, squall

    zk = EmbeddedZooKeeper(tick_time_ms=500, min_session_timeout_ms=1000, max_session_timeout_ms=10_000)
    zk.start()
    summary = tmp_path / "summary.json"
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            squall("run", "examples/wordcount/topology.yaml", "--zookeeper", zk.connect_string,
                   "--duration", "45", "--kill-wait", "5", "--summary-json", str(summary)),
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_this_process(),
        )
    try:
        wait_for(lambda: proc.poll() is not None or [a for a in _acked_lines(log.read_text()) if a > 0],
                 60, "squall run to show acked sentences")
        assert proc.poll() is None, log.read_text()
        pids = _worker_pids(proc.pid)
        assert len(pids) == 2, pids
        before = _acked_lines(log.read_text())[-1]
        zk.stop(keep_data=True)
        time.sleep(14)
        zk.start()
        time.sleep(8)
        assert proc.poll() is None, "squall run exited during the outage:\n" + log.read_text()
        assert _worker_pids(proc.pid) == pids, "a worker was replaced:\n" + log.read_text()
        proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        zk.stop()
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "Traceback" not in text, text
    warnings = [line for line in text.splitlines() if "unreachable" in line or "WARNING" in line]
    assert len(warnings) == 1 and "ZooKeeper unreachable" in warnings[0], text
    acked = _acked_lines(text)
    assert acked == sorted(acked), f"the live totals went backwards: {acked}\n{text}"
    data = json.loads(summary.read_text())
    final = data["components"]["sentences"]["acked"]
    assert final >= acked[-1] >= before, (final, acked)
    print(f"acked {before} before the outage, {acked[-1]} last shown, {final} in the summary")


def test_squall_run_totals_survive_a_replaced_worker(make_cluster: Callable[..., LocalCluster],
                                                     tmp_path: Path) -> None:
    """A worker killed with SIGKILL is started again on its slot with fresh counters: the
    runner's totals (totals.Totals) keep the dead process's counts; the plain sum of the latest
    heartbeats (what `squall run` showed before) falls."""
    from squall_operator.totals import Totals

    cluster = make_cluster(nodes=2, slots=1)
    topo = id_pipeline("replaced", tmp_path / "out", 0, workers=2, rate=300, timeout=5)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: acked(cluster, topo.name) > 1000, 30, "acking to start", cluster)
    totals = Totals()

    def sample() -> tuple[int, int]:
        beats = cluster.state.get_worker_heartbeats(topo.name)
        totals.update(beats)
        plain = sum(ex.acked for b in beats.values() for ex in b.executors.values() if ex.component == "ids")
        kept = sum(ex.acked for ex, _ in totals.executor_stats() if ex.component == "ids")
        return plain, kept

    spout_slot = next(iter(component_slots(cluster, topo)["ids"]))
    pid = cluster.worker_pids(topo.name)[spout_slot]
    samples = [sample()]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        samples.append(sample())
        new_pid = cluster.worker_pids(topo.name).get(spout_slot)
        if new_pid not in (None, pid) and samples[-1][1] > samples[0][1] + 1000:
            break
    plain = [p for p, _ in samples]
    kept = [k for _, k in samples]
    print(f"plain sums {plain[0]} -> min {min(plain[1:])}; kept totals {kept[0]} -> {kept[-1]}")
    assert kept == sorted(kept), f"totals went backwards: {kept}"
    assert kept[-1] > kept[0] + 1000, (kept, logs_tail(cluster))
    assert min(plain[1:]) < plain[0], "the replacement did not reset the heartbeat counters"
    stop_topology(cluster, topo.name)
