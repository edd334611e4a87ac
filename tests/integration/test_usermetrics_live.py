"""A component's own metrics on a real worker: a bolt registers a counter, a
meter, a histogram, a timer and two gauges (one always raising) through its context, in a real
worker process on a real ZooKeeper; a real HTTP scrape of the worker's `/metrics` shows each one
per task, labelled topology, component, task and name, and their values follow the tuples the
bolt processed (the worker's own `squall_executed_total` for the same task). The raising gauge
is absent and the scrape still answers."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import id_pipeline, logs_tail, stop_topology, wait_for, wait_running, wait_spout_done
from prometheus_client.parser import text_string_to_metric_families

from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration

COUNT = 200
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(port: int) -> Samples:
    """GET the worker's /metrics over HTTP and parse it: sample name -> labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        body = resp.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_a_bolts_own_metrics_follow_its_tuples(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    t0 = time.monotonic()
    cluster = make_cluster(nodes=1, slots=1)
    middle = {"name": "metered", "class": "usermetrics_components:MeteredBolt", "parallelism": 2,
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    out = tmp_path / "out"
    topo = id_pipeline("usermetrics", out, COUNT, workers=1, timeout=10, middle=middle)
    cluster.submit(topo)
    wait_running(cluster, topo)
    [endpoint] = wait_for(lambda: list(cluster.state.get_endpoints(topo.name).values()), 30,
                          "the worker's endpoint", cluster)
    wait_spout_done(out, cluster, 60)
    got = scrape(endpoint.metrics_port)

    def per_task(family: str, name: str | None = None, **match: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, value in got.get(family, {}).items():
            lab = dict(labels)
            if lab["component"] == "metered" and (name is None or lab["name"] == name) and all(
                    lab.get(k) == v for k, v in match.items()):
                assert lab["topology"] == "usermetrics", lab
                out[lab["task"]] = value
        return out

    executed = per_task("squall_executed_total")
    assert len(executed) == 2 and sum(executed.values()) >= COUNT, executed
    tuples = per_task("squall_user_counter_total", "tuples")
    assert tuples == executed, f"the counter does not follow the tuples executed: {tuples} vs {executed}" + logs_tail(cluster)
    assert per_task("squall_user_meter_total", "ids") == {t: 2 * n for t, n in executed.items()}
    assert per_task("squall_user_histogram_count", "id_mod") == executed
    low = sum(per_task("squall_user_histogram_bucket", "id_mod", le="4.0").values())
    assert low >= COUNT // 2 and low <= sum(executed.values()) - COUNT // 2, low  # ids % 10 in 0..4: half of them
    assert sum(per_task("squall_user_histogram_sum", "id_mod").values()) >= sum(i % 10 for i in range(COUNT))
    assert per_task("squall_user_timer_seconds_count", "process") == executed
    assert all(v > 0 for v in per_task("squall_user_timer_seconds_sum", "process").values())
    last = per_task("squall_user_gauge", "last_id")
    assert set(last) == set(executed) and all(0 <= v < COUNT for v in last.values()), last
    assert per_task("squall_user_gauge", "broken") == {}, "a raising gauge must be left out"
    # the gauge's failure is reported once in the worker's log, naming the component and task
    wait_for(lambda: "gauge 'broken' raised" in logs_tail(cluster, 400), 10, "the broken gauge's report", cluster)
    # a later scrape still answers, the counters unchanged (nothing flows any more)
    assert scrape(endpoint.metrics_port)["squall_user_counter_total"] == got["squall_user_counter_total"]
    stop_topology(cluster, topo.name)
    print(f"usermetrics live test: {time.monotonic() - t0:.1f}s")
