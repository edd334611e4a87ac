"""A worker's HTTP endpoint (readiness and metrics): real ZooKeeper, a real
worker process, real zmq, a real network partition between the worker and ZooKeeper.

* `/readyz` tells the truth: a worker cut off from ZooKeeper long enough for its session to
  expire (its endpoint node is gone, peers cannot find it) answers 503 saying why, while
  `/healthz` (liveness) stays 200; once the partition heals and the worker has registered its
  endpoint again in a new session, `/readyz` is 200 again, and the worker was never replaced.
* `/metrics` of every worker parses as Prometheus exposition, carries every component and task
  of the topology, and its counters move between two scrapes.
* `squall run --metrics-port` serves every local worker's metrics and nimbus's on one loopback
  port; a port already in use is one clear line and exit 1, before anything starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from childproc import die_with_this_process
from prometheus_client.parser import text_string_to_metric_families
from netproxy import PartitionProxy
from helpers import (  # the integration tests' helpers (same directory)
    id_pipeline,
    logs_tail,
    stop_topology,
    totals,
    wait_for,
    wait_running,
)

from squall.ports import free_ports
from squall.zkserver import EmbeddedZooKeeper
from squall_operator.local import LocalCluster
from squall_operator.monitor import MonitorTimeouts

pytestmark = pytest.mark.integration

# nimbus must not replace the cut-off worker while the test looks at it
PATIENT = MonitorTimeouts(task_timeout=60.0, launch_timeout=60.0)


def get(port: int, path: str) -> tuple[int, str]:
    """GET http://127.0.0.1:port/path -> (status, body); (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, repr(exc)


@pytest.fixture
def zk_proxy(zookeeper: EmbeddedZooKeeper) -> Iterator[PartitionProxy]:
    proxy = PartitionProxy.to(zookeeper.connect_string)
    try:
        yield proxy
    finally:
        proxy.close()


def test_readyz_follows_the_zookeeper_session(
    make_cluster: Callable[..., LocalCluster], zk_proxy: PartitionProxy, tmp_path: Path
) -> None:
    # workers reach ZooKeeper through the proxy; nimbus and the test do not
    cluster = make_cluster(nodes=1, slots=1, timeouts=PATIENT, worker_session_timeout=2.0,
                           worker_zookeeper=zk_proxy.address)
    topo = id_pipeline("health", tmp_path / "out", 0, workers=1, rate=200, timeout=5)
    cluster.submit(topo)
    wait_running(cluster, topo)
    [(slot, pid)] = cluster.worker_pids(topo.name).items()
    endpoint = wait_for(lambda: cluster.state.get_endpoints(topo.name).get(slot), 30,
                        "the worker's endpoint", cluster)
    port = endpoint.metrics_port
    assert port > 0, f"the worker published no metrics port: {endpoint}"
    wait_for(lambda: get(port, "/readyz")[0] == 200, 30, "/readyz to say ready", cluster)
    assert get(port, "/healthz")[0] == 200
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > 100, 30, "acking to start", cluster)

    zk_proxy.cut()
    cut = time.monotonic()
    status, body = wait_for(lambda: (r := get(port, "/readyz"))[0] == 503 and r, 15,
                            "/readyz to turn 503 once ZooKeeper is cut off", cluster)
    print(f"/readyz 503 {time.monotonic() - cut:.1f}s after the cut: {body!r}")
    assert "zookeeper" in body.lower(), body
    # the server expires the worker's session: its endpoint is gone, peers could not find it
    wait_for(lambda: slot not in cluster.state.get_endpoints(topo.name), 20,
             "the cut-off worker's session to expire", cluster)
    status, body = get(port, "/readyz")
    assert status == 503 and "zookeeper" in body.lower(), (status, body)
    # liveness is not readiness: a worker that lost ZooKeeper must not be restarted for it
    assert get(port, "/healthz")[0] == 200

    zk_proxy.heal()
    healed = time.monotonic()
    wait_for(lambda: get(port, "/readyz")[0] == 200, 30, "/readyz to say ready after the heal", cluster)
    print(f"/readyz 200 {time.monotonic() - healed:.1f}s after the heal")
    # ready means registered in the new session
    back = cluster.state.get_endpoints(topo.name).get(slot)
    assert back is not None and back.metrics_port == port, back
    assert cluster.worker_pids(topo.name) == {slot: pid}, "the worker was replaced" + logs_tail(cluster)
    assert os.path.exists(f"/proc/{pid}")
    stop_topology(cluster, topo.name)


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    status, body = get(port, "/metrics")
    assert status == 200, body
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by_component(samples: dict[tuple[tuple[str, str], ...], float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in samples.items():
        comp = dict(labels)["component"]
        out[comp] = out.get(comp, 0.0) + value
    return out


def test_every_worker_serves_metrics_that_move(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    cluster = make_cluster(nodes=2, slots=1)
    topo = id_pipeline("metrics", tmp_path / "out", 0, workers=2, rate=300, timeout=5)
    cluster.submit(topo)
    wait_running(cluster, topo)
    endpoints = wait_for(lambda: (e := cluster.state.get_endpoints(topo.name)) and len(e) == 2 and e, 30,
                         "both workers' endpoints", cluster)
    ports = [e.metrics_port for e in endpoints.values()]
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > 100, 30, "acking to start", cluster)

    def merged() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for port in ports:
            for name, samples in scrape(port).items():
                out.setdefault(name, {}).update(samples)
        return out

    first = merged()
    time.sleep(2.0)  # between two scrapes, at 300 ids/s
    second = merged()
    # every task of the topology, once, across the two workers
    tasks = {(dict(k)["component"], dict(k)["task"]) for k in second["squall_emitted_total"]}
    assert {c for c, _ in tasks} == {"ids", "pass", "sink"}
    assert all(dict(k)["topology"] == "metrics" for k in second["squall_emitted_total"])
    for name, comp in (("squall_emitted_total", "ids"), ("squall_acked_total", "ids"),
                       ("squall_executed_total", "pass"), ("squall_executed_total", "sink"),
                       ("squall_complete_latency_seconds_count", "ids"),
                       ("squall_execute_latency_seconds_count", "sink")):
        before, after = by_component(first[name]).get(comp, 0.0), by_component(second[name])[comp]
        assert after > before, f"{name}{{component={comp}}} did not move: {before} -> {after}"
    acked_scraped = by_component(second["squall_acked_total"])["ids"]
    assert acked_scraped > 300
    assert set(second) >= {"squall_receive_queue_batches", "squall_spout_pending", "squall_bad_frames_total",
                           "squall_backpressure_seconds_total", "squall_zookeeper_reconnects_total"}
    stop_topology(cluster, topo.name)


REPO = Path(__file__).resolve().parents[2]


def test_squall_run_serves_the_local_clusters_metrics_on_one_port() -> None:
    (port,) = free_ports(1)
    cmd = [sys.executable, "-m", "squall_operator", "run", "examples/wordcount/topology.yaml",
           "--duration", "25", "--kill-wait", "3", "--no-progress", "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_this_process())
    try:
        def merged() -> dict[str, dict[tuple[tuple[str, str], ...], float]] | None:
            status, _ = get(port, "/metrics")
            if status != 200:
                return None
            m = scrape(port)
            return m if by_component(m.get("squall_acked_total", {})).get("sentences", 0) > 0 else None

        first = wait_for(merged, 120, "squall run's /metrics to show acked sentences")
        time.sleep(2.0)
        second = scrape(port)
        # both workers of the word count, every component, and nimbus's own
        workers = {dict(k)["worker"] for k in second["squall_bad_frames_total"]}
        assert len(workers) == 2, workers
        assert {"sentences", "split", "count", "report"} <= set(by_component(second["squall_emitted_total"]))
        for name, comp in (("squall_acked_total", "sentences"), ("squall_executed_total", "count")):
            assert by_component(second[name])[comp] > by_component(first[name])[comp], name
        assert second["squall_nimbus_assignment_changes_total"][(("topology", "wordcount"),)] >= 1

        # the same port again: refused at once, one line, no traceback
        other = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert other.returncode == 1, other.stdout + other.stderr
        text = other.stdout + other.stderr
        assert f"--metrics-port {port}: cannot listen on 127.0.0.1" in text and "Traceback" not in text, text
        assert "starting ZooKeeper" not in text, text
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out.decode(errors="replace")
    assert f"http://127.0.0.1:{port}/metrics" in out.decode()
