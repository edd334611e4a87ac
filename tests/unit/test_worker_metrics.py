"""A worker's Prometheus metrics (squall.worker.metrics) from plain counters, parsed back with
prometheus_client's own parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from squall.stats import Counters
from squall.worker.metrics import (
    ExecutorFigures,
    WorkerFigures,
    exposition,
    histogram_buckets,
    registry_for,
    task_label,
)

pytestmark = pytest.mark.unit


def counters(**kw: int) -> Counters:
    c = Counters()
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def scrape(fig: WorkerFigures) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    status, ctype, body = exposition(registry_for(lambda: fig), "")
    assert status == 200 and ctype.startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_per_task_counters_gauges_and_worker_counters() -> None:
    spout = counters(emitted=120, transferred=120, acked=100, failed=3)
    for ms in (2.0, 3.0, 40.0, 900.0):
        spout.latency(ms)
    bolt = counters(executed=118, acked=110, emitted=50, transferred=50, dropped=1)
    bolt.latency(0.3)
    fig = WorkerFigures(
        topology="wc", worker="node1-6700",
        executors=[
            ExecutorFigures("sentences", (1, 1), "spout", spout, inbox_batches=2, pending=17),
            ExecutorFigures("split", (3, 4), "bolt", bolt, inbox_batches=5, backpressure_secs=1.5),
        ],
        send_queue_batches={"node2-6700": 7},
        bad_frames=4, refused=6, dropped=2, unsendable=1, peer_reconnects=1, zk_reconnects=3, zk_sessions_expired=1,
        errors_not_logged=9,
    )
    m = scrape(fig)
    s = (("component", "sentences"), ("task", "1"), ("topology", "wc"))
    b = (("component", "split"), ("task", "3-4"), ("topology", "wc"))
    assert m["squall_emitted_total"] == {s: 120, b: 50}
    assert m["squall_transferred_total"] == {s: 120, b: 50}
    assert m["squall_executed_total"] == {s: 0, b: 118}
    assert m["squall_acked_total"] == {s: 100, b: 110}
    assert m["squall_failed_total"] == {s: 3, b: 0}
    assert m["squall_executor_dropped_total"] == {s: 0, b: 1}
    assert m["squall_receive_queue_batches"] == {s: 2, b: 5}
    assert m["squall_spout_pending"] == {s: 17}
    assert m["squall_backpressure_seconds_total"] == {s: 0, b: 1.5}
    # complete latency for spouts, execute latency for bolts, in seconds
    assert m["squall_complete_latency_seconds_count"] == {s: 4}
    assert m["squall_complete_latency_seconds_sum"][s] == pytest.approx(0.945)
    le = {dict(k)["le"]: v for k, v in m["squall_complete_latency_seconds_bucket"].items()}
    assert le["0.001"] == 0 and le["0.005"] == 2 and le["0.05"] == 3 and le["1.0"] == 4 and le["+Inf"] == 4
    assert m["squall_execute_latency_seconds_count"] == {b: 1}
    assert s not in m["squall_execute_latency_seconds_count"]
    w = (("topology", "wc"), ("worker", "node1-6700"))
    assert m["squall_send_queue_batches"] == {(("peer", "node2-6700"), *w): 7}
    assert m["squall_bad_frames_total"] == {w: 4}
    assert m["squall_refused_total"] == {w: 6}
    assert m["squall_worker_dropped_total"] == {w: 2}
    assert m["squall_unsendable_total"] == {w: 1}
    assert m["squall_peer_reconnects_total"] == {w: 1}
    assert m["squall_zookeeper_reconnects_total"] == {w: 3}
    assert m["squall_zookeeper_sessions_expired_total"] == {w: 1}
    assert m["squall_errors_not_logged_total"] == {w: 9}


def test_openmetrics_when_asked() -> None:
    fig = WorkerFigures(topology="wc", worker="n-1", executors=[ExecutorFigures("s", (1, 1), "spout", counters(acked=5))])
    status, ctype, body = exposition(registry_for(lambda: fig), "application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF") and b'squall_acked_total{component="s",task="1",topology="wc"} 5.0' in body


def test_histogram_buckets_are_cumulative_and_end_at_the_count() -> None:
    c = Counters()
    samples = [0.01, 0.4, 0.6, 7.0, 70.0, 700.0, 7000.0, 70000.0]
    for ms in samples:
        c.latency(ms)
    buckets = histogram_buckets(c.hist)
    values = [v for _, v in buckets]
    assert values == sorted(values) and buckets[-1] == ("+Inf", float(len(samples)))
    # 70 s is beyond the last bound (30 s): only in +Inf
    assert buckets[-2][1] == len(samples) - 1
    assert task_label((5, 5)) == "5" and task_label((5, 8)) == "5-8"
