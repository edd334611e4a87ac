"""The operator through a ZooKeeper outage, end to end on the real control plane.

The chart's ZooKeeper pod is frozen (SIGSTOP) for longer than every session timeout, then killed;
the kubelet starts it again on the same data directory. Under load: no worker pod is replaced,
the operator does not crash, and the counts in the Topology's status go on from where they were.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .cluster import Cluster
from .conftest import container_pid, kget, wait_for
from .test_operator_e2e import (
    NS,
    _operator_pod,
    apply_doc,
    delete_and_wait_gone,
    id_pipeline,
    reasons,
    running,
    spout_emitted,
    worker_pods,
)

pytestmark = pytest.mark.k8s


def _zookeeper_pod(c: Cluster) -> dict[str, Any]:
    items = kget(c, "pods", "-n", NS, "-l", "app.kubernetes.io/component=zookeeper")["items"]
    assert len(items) == 1, [p["metadata"]["name"] for p in items]
    return items[0]


def _ready(pod: dict[str, Any]) -> bool:
    return any(x["type"] == "Ready" and x["status"] == "True" for x in pod["status"].get("conditions") or [])


def _workers(c: Cluster, name: str) -> dict[str, tuple[str, int]]:
    return {p["metadata"]["name"]: (p["metadata"]["uid"], container_pid(p)) for p in worker_pods(c, name)}


def test_zookeeper_outage_replaces_no_worker(squall: Cluster, tmp_path: Path) -> None:
    c = squall
    apply_doc(c, id_pipeline("zkout", tmp_path / "out", 0, workers=2, rate=150))
    wait_for(lambda: running(c, "zkout", 2), 120, what="zkout Running 2/2")
    wait_for(lambda: spout_emitted(c, "zkout", "ids") > 300, 60, what="ids emitted")
    workers = _workers(c, "zkout")
    operator_restarts = _operator_pod(c)["status"]["containerStatuses"][0]["restartCount"]
    zk = _zookeeper_pod(c)
    zk_restarts = zk["status"]["containerStatuses"][0]["restartCount"]
    group = os.getpgid(container_pid(zk))
    before = spout_emitted(c, "zkout", "ids")
    os.killpg(group, signal.SIGSTOP)
    try:
        time.sleep(15)  # longer than the operator's and the workers' 10 s sessions
    finally:
        os.killpg(group, signal.SIGKILL)  # ...and it stops: the kubelet starts it again, same data
    def restarted() -> dict[str, Any] | None:
        pod = _zookeeper_pod(c)
        return pod if _ready(pod) and pod["status"]["containerStatuses"][0]["restartCount"] > zk_restarts else None

    back = wait_for(restarted, 120, what="ZooKeeper to be restarted and ready")
    assert back["metadata"]["uid"] == zk["metadata"]["uid"]
    # the counts go on from where they were (the workers kept processing meanwhile)
    wait_for(lambda: spout_emitted(c, "zkout", "ids") > before + 300, 90, what="emitted to grow after the outage")
    time.sleep(12)  # past the operator's 8 s task timeout: nothing is declared dead late either
    assert running(c, "zkout", 2), kget(c, "topology", "zkout", "-n", NS).get("status")
    assert _workers(c, "zkout") == workers, "a worker pod was replaced"
    assert "WorkerReplaced" not in reasons(c, "zkout"), reasons(c, "zkout")
    assert _operator_pod(c)["status"]["containerStatuses"][0]["restartCount"] == operator_restarts
    delete_and_wait_gone(c, "zkout")
