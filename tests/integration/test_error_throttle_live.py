"""A spout that raises on every call and a bolt that raises on every tuple, in a real worker
(real ZooKeeper, real processes): the worker's log grows by a bounded number of bytes
a second (the first errors of each interval with their tracebacks, then one line per interval),
the spout is called less and less often so it does not spin a core, and the errors still reach
ZooKeeper, where `squall run`'s table and the web UI's REST API read them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import COMPONENTS, logs_tail, stop_topology, topology, wait_running

from squall_operator.local import LocalCluster
from squall_operator.ui.data import UiData

pytestmark = pytest.mark.integration

FAILING = "failing_components"
MEASURE_SECS = 6.0
LOG_BYTES_PER_SEC = 3000  # before: about 500,000 (a traceback per call)
CPU_SHARE = 0.15  # of one core, the whole worker (before: about a fifth of a core on tracebacks alone)


def log_bytes(cluster: LocalCluster) -> int:
    return sum(len(text.encode()) for text in cluster.worker_logs().values())


def cpu_secs(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_errors_on_every_call_are_throttled_and_still_reported(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    spec = {
        "numWorkers": 1,
        "messageTimeoutSecs": 5,
        "spouts": [
            {"name": "broken", "class": f"{FAILING}:RaisingSpout", "parallelism": 1},
            {"name": "ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1},
        ],
        "bolts": [
            {"name": "refuse", "class": f"{FAILING}:RaisingBolt", "parallelism": 1,
             "inputs": [{"component": "ids", "grouping": "shuffle"}]},
        ],
    }
    # the bolt sees about 500 tuples a second, each raising
    # Storm's settings, shortened so that the test sees several intervals
    topo = topology("raising", spec, {"test.count": 0, "test.rate": 500, "test.out": str(tmp_path / "out"),
                                      "topology.error.throttle.interval.secs": 2,
                                      "topology.max.error.report.per.interval": 2})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    [pid] = cluster.worker_pids(topo.name).values()
    time.sleep(2)  # past the start and the first interval's full reports
    size0, cpu0, t0 = log_bytes(cluster), cpu_secs(pid), time.monotonic()
    time.sleep(MEASURE_SECS)
    size1, cpu1, t1 = log_bytes(cluster), cpu_secs(pid), time.monotonic()
    rate, cpu = (size1 - size0) / (t1 - t0), (cpu1 - cpu0) / (t1 - t0)
    print(f"worker log grew {rate:.0f} B/s; worker CPU {cpu:.0%} of a core")
    assert rate <= LOG_BYTES_PER_SEC, f"{rate:.0f} B/s of log" + logs_tail(cluster, 10)
    assert cpu <= CPU_SHARE, f"{cpu:.0%} of a core"

    # each interval's left-out errors are counted in one line
    text = "\n".join(cluster.worker_logs().values())
    assert "broken: " in text and "more errors in the last" in text, logs_tail(cluster)
    assert "refuse: " in text, logs_tail(cluster)

    # the errors reach ZooKeeper: what `squall run` and the REST API show
    for comp, words in (("broken", "the source is broken"), ("refuse", "RaisingBolt")):
        last = cluster.state.last_error(topo.name, comp)
        assert last is not None and words in last.error, (comp, last)
    page = UiData(cluster.state).topology(topo.name)
    assert page is not None
    shown = {e["component"] for e in page["errors"]}
    assert {"broken", "refuse"} <= shown, page["errors"]
    assert not cluster.crashes, logs_tail(cluster)
    stop_topology(cluster, topo.name)
