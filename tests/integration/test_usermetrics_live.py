"""A component's own metrics on a real worker: a bolt registers a counter, a
meter, a histogram, a timer and two gauges (one always raising) through its context, in a real
worker process on a real ZooKeeper; a real HTTP scrape of the worker's `/metrics` shows each one
per task, labelled topology, component, task, name and worker, and their values follow the tuples the
bolt processed (the worker's own `squall_executed_total` for the same task). The raising gauge
is absent and the scrape still answers. The same figures reach Storm's reporters
(`topology.metrics.reporters`: console lines in the worker's log, one CSV file per metric) and
the UI's component page and its REST route (Storm UI's /api/v1/topology/{id}/component/{c}),
which ask the worker through ZooKeeper."""

from __future__ import annotations

import csv
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import (
    id_pipeline,
    logs_tail,
    stop_topology,
    wait_for,
    wait_running,
    wait_spout_done,
)
from prometheus_client.parser import text_string_to_metric_families
from squall_operator.local import LocalCluster
from squall_operator.ui import UiServer, create_app
from squall_operator.ui.data import UiData

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
    csv_dir = tmp_path / "csvmetrics"
    reporters = [{"class": "org.apache.storm.metrics2.reporters.ConsoleStormReporter", "report.period": 1,
                  "report.period.units": "SECONDS"},
                 {"class": "csv", "report.period": 1, "csv.log.dir": str(csv_dir)}]
    topo = id_pipeline("usermetrics", out, COUNT, workers=1, timeout=10, middle=middle,
                       extra={"topology.metrics.reporters": reporters})
    cluster.submit(topo)
    wait_running(cluster, topo)
    [endpoint] = wait_for(lambda: list(cluster.state.get_endpoints(topo.name).values()), 30,
                          "the worker's endpoint", cluster)
    wait_spout_done(out, cluster, 60)
    got = scrape(endpoint.metrics_port)
    (worker,) = [slot.key() for slot in cluster.state.get_worker_heartbeats(topo.name)]

    def per_task(family: str, name: str | None = None, **match: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, value in got.get(family, {}).items():
            lab = dict(labels)
            if lab["component"] == "metered" and (name is None or lab["name"] == name) and all(
                    lab.get(k) == v for k, v in match.items()):
                assert lab["topology"] == "usermetrics", lab
                assert family.startswith("squall_executed") or lab["worker"] == worker, lab
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

    # the reporters: a CSV file per metric whose last row has the count; console lines in the log
    def csv_count(task: str) -> float | None:
        path = csv_dir / f"usermetrics.metered.{task}.tuples.csv"
        rows = list(csv.reader(path.open())) if path.exists() else []
        assert not rows or rows[0] == ["t", "count"], rows[:2]
        return float(rows[-1][1]) if len(rows) > 1 else None
    for task, n in executed.items():
        wait_for(lambda task=task, n=n: csv_count(task) == n or None, 15,  # type: ignore[misc]
                 f"task {task}'s CSV report of {n:g} tuples", cluster)
    assert (csv_dir / f"usermetrics.metered.{next(iter(executed))}.process.csv").read_text().startswith(
        "t,count,sum,mean\n")
    task = next(iter(executed))
    wait_for(lambda: f"metered task {task} counter tuples: count={executed[task]:g}" in logs_tail(cluster, 400)
             or None, 15, "the console reporter's line", cluster)

    # the UI's component page and its REST route ask the worker for the same figures
    data = UiData(cluster.state, interval=0.5)
    data.start()
    ui = UiServer(create_app(data, None)).start()
    try:
        def component_page() -> dict[str, object]:
            with urllib.request.urlopen(ui.url + "api/v1/topology/usermetrics/component/metered", timeout=30) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]
        # the page's figures come from heartbeats, a second or so behind the scrape
        page = wait_for(lambda: (p := component_page())["executed"] >= COUNT and p, 30,  # type: ignore[operator]
                        "the component page's executed count", cluster)
        assert page["componentType"] == "bolt", page
        assert page["userMetricsMissing"] == [], page
        shown = {(str(m["task"]), m["name"]): m for m in page["userMetrics"]}
        for task, n in executed.items():
            assert shown[(task, "tuples")]["value"] == n and shown[(task, "tuples")]["kind"] == "counter"
            assert shown[(task, "ids")]["value"] == 2 * n
            assert shown[(task, "process")]["count"] == n and shown[(task, "process")]["kind"] == "timer"
        assert not any(name == "broken" for _, name in shown), "a raising gauge must be left out"
        with urllib.request.urlopen(ui.url + "topology/usermetrics/component/metered", timeout=30) as r:
            html = r.read().decode()
        assert 'id="user-metrics"' in html and "<td>tuples</td><td>counter</td>" in html, html[-3000:]
        try:
            urllib.request.urlopen(ui.url + "api/v1/topology/usermetrics/component/nosuch", timeout=30)
            raise AssertionError("an unknown component must be 404")
        except urllib.error.HTTPError as e:
            assert e.code == 404 and "has no component 'nosuch' (it has ids, metered, sink)" in e.read().decode()
    finally:
        ui.stop()
        data.stop()
    stop_topology(cluster, topo.name)
    print(f"usermetrics live test: {time.monotonic() - t0:.1f}s")


def test_a_bolt_registering_a_million_names_gets_a_clear_error(make_cluster: Callable[..., LocalCluster],
                                                               tmp_path: Path) -> None:
    """The bound: a bolt that registers 10^6 metric names is refused at its 1001st with a clear
    error, reported as the component's error (ZooKeeper, the UI); the worker neither dies nor
    grows (its RSS read from /proc), and the bolt's later tuples still flow and are counted."""
    cluster = make_cluster(nodes=1, slots=1)
    middle = {"name": "greedy", "class": "usermetrics_components:GreedyBolt",
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    out = tmp_path / "out"
    topo = id_pipeline("greedy", out, COUNT, workers=1, timeout=10, middle=middle)
    cluster.submit(topo)
    wait_running(cluster, topo)
    [endpoint] = wait_for(lambda: list(cluster.state.get_endpoints(topo.name).values()), 30,
                          "the worker's endpoint", cluster)
    wait_spout_done(out, cluster, 60)
    errors = [e.error for e in cluster.state.errors("greedy", "greedy")]
    assert any("component greedy task " in e and "cannot register counter 'user_999': a task may register at "
               "most 1000 metrics" in e for e in errors), errors
    got = scrape(endpoint.metrics_port)
    users = [lab for lab in got.get("squall_user_counter_total", {}) if dict(lab)["component"] == "greedy"]
    assert len(users) == 1000, len(users)  # `seen` and the 999 the bound let in
    seen = [v for lab, v in got["squall_user_counter_total"].items() if dict(lab)["name"] == "seen"]
    assert seen and seen[0] >= COUNT - 1, seen  # the tuple that hit the bound failed; the rest counted
    rss_kib = int(next(line.split()[1] for line in Path(f"/proc/{endpoint.pid}/status").read_text().splitlines()
                       if line.startswith("VmRSS:")))
    assert rss_kib < 400 * 1024, f"the worker holds {rss_kib} KiB"
    assert not cluster.crashes
    stop_topology(cluster, topo.name)
