"""The trending example end to end on real workers: event-time sliding windows with watermarks,
out-of-order input within the lag, late tuples and tuples without a usable timestamp on the late
stream, and every window's top words equal to a Spark batch recomputation over the same events
(less the tuples the stream reported late)."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.validation import parse_topology

from helpers import import_example  # the integration tests' helpers (same directory)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TRENDING = REPO / "examples" / "trending"

if importlib.util.find_spec("pyspark") is None:  # pragma: no cover
    pytest.skip("pyspark is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from squall.zkserver import java_available

    if not java_available():
        pytest.skip("no java on PATH")
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()  # test_spark.py's, when it ran first
    session = existing or (SparkSession.builder.master("local[1]").appName("squall-trending")
                           .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                           .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    yield session
    if existing is None:
        session.stop()


def _wait_for(cond: Callable[[], Any], timeout: float, what: str, cluster: Any) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {n}\n" + "\n".join(t.splitlines()[-40:]) for n, t in cluster.worker_logs().items())
            pytest.fail(f"timed out after {timeout}s waiting for {what}; crashes {cluster.crashes}{logs}")
        time.sleep(0.2)
    return got


@pytest.mark.timeout(600)  # a SparkSession and two workers: minutes on a loaded 2-core machine
def test_trending_windows_equal_a_batch_recomputation(zookeeper: Any, spark: Any, tmp_path: Path) -> None:
    from squall_operator.local import LocalCluster

    batch_job, trending = import_example(TRENDING, "batch_job", "trending")
    events_path, out = tmp_path / "events.jsonl", tmp_path / "out"
    n = 1500  # 75 s of event time, replayed in about 2.5 s
    events = trending.generate(events_path, n)
    data = yaml.safe_load((TRENDING / "topology.yaml").read_text())
    data["spec"]["config"].update({"trending.events": str(events_path), "trending.out": str(out),
                                   "trending.rate": 600})
    bolts = {b["name"]: b for b in data["spec"]["bolts"]}
    # one split task: the only disorder is the file's (within the lag), so no tuple of it is late
    # however the threads run; the watermark every 200 ms makes the very late ones late early on
    bolts["split"]["parallelism"] = 1
    bolts["top"]["window"]["watermarkInterval"] = "200ms"
    topo = parse_topology(data, source="trending")
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    cluster = LocalCluster(nodes=2, slots=1, zookeeper=zookeeper.connect_string, workdir=str(workdir),
                           search_paths=[str(TRENDING)])
    cluster.start()
    try:
        cluster.submit(topo)
        done = _wait_for(lambda: list(out.glob("spout-*.done")), 240, "every event to be acked", cluster)
        spout = json.loads(done[0].read_text())
        cluster.kill(topo.name, 1.0)
        assert cluster.wait_removed(topo.name, 60)
        _wait_for(lambda: not cluster.worker_pids(topo.name), 60, "the workers to exit", cluster)
        assert not cluster.crashes
    finally:
        cluster.shutdown()

    # every event acked once it left its last window, none replayed (no timeout, no failure)
    assert spout == {"acked": n, "failed": 0}
    late = batch_job.read_late(out)
    reasons = {r["reason"] for r in late}
    assert {"no timestamp", "timestamp not a number"} <= reasons <= {"late", "no timestamp", "timestamp not a number"}
    very_late = {float(e["ts"]) for i, e in enumerate(events) if i >= 300 and i % 97 == 0}
    late_ts = {float(r["values"][1]) for r in late if r["reason"] == "late"}
    assert late_ts and late_ts <= very_late, late_ts - very_late

    batch, stream = batch_job.compare(spark, events_path, out, length=20, slide=5, top=5)
    assert len(batch) >= 15  # 75 s of events, a window every 5 s
    assert stream == batch
