"""ZooKeeper sessions and outages under load (issue 9, defects 2 and 8): real ZooKeeper, real
worker processes, real zmq.

* A worker whose session expires (paused longer than its session timeout) registers its endpoint
  again in its new session; peers deliver to it again and every id is acked, with no worker
  replaced.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_engine import (  # the engine tests' helpers (same directory)
    component_slots,
    id_pipeline,
    logs_tail,
    make_cluster,  # noqa: F401  (fixture)
    stop_topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
)

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
