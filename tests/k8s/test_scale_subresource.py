"""`kubectl scale topology/NAME --replicas=N` on the real API server (issue 30, items 4 and 6).

The Topology CRD's scale subresource maps replicas to `spec.numWorkers`, the status replicas to
`status.replicas` (the workers running) and the selector to `status.selector` (the worker pods'
labels), so `kubectl scale`, the HorizontalPodAutoscaler and KEDA drive a topology like a
Deployment; the operator turns the numWorkers change into a hot rebalance. `kubectl get
topologies` shows acked/s and failed/s, `-o wide` the nimbus status, the tasks and the image.

The chart, the operator, ZooKeeper and the process kubelet come from test_operator_e2e.py's
module fixture (release `squall` in namespace squall-e2e).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from .cluster import Cluster
from .conftest import kget, wait_for
from .test_operator_e2e import NS, WORDCOUNT, cond, delete_and_wait_gone, running, squall, status, worker_pods

pytestmark = pytest.mark.k8s

__all__ = ["squall"]  # the module fixture, shared

NAME = "scaled"
SELECTOR = f"app.kubernetes.io/name=squall-worker,squall.io/topology={NAME}"


def _scale(c: Cluster) -> dict[str, Any]:
    out = c.kubectl("get", f"topology/{NAME}", "-n", NS, "--subresource=scale", "-o", "json").stdout
    return dict(json.loads(out))


def _acking(c: Cluster) -> dict[str, Any] | None:
    st = status(c, NAME)
    return st if (st.get("ackedPerSec") or 0) > 0 else None


def test_kubectl_scale_rebalances_hot_and_get_shows_health(squall: Cluster) -> None:
    c = squall
    doc = yaml.safe_load(WORDCOUNT.read_text())
    doc["metadata"]["name"] = NAME
    # the rebalance waits this, not the message timeout
    doc["spec"]["rebalanceWaitSecs"] = 2
    c.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(doc))
    try:
        wait_for(lambda: running(c, NAME, 2), 120, what=f"{NAME} Running 2/2")
        st = wait_for(lambda: _acking(c), 60, what="a positive ackedPerSec in the status")
        assert st["replicas"] == 2 and st["selector"] == SELECTOR
        assert st["failedPerSec"] >= 0 and st["rateSample"]["acked"] > 0

        # the columns: acked/s and failed/s on the default line (under 120 columns), -o wide
        # adds nimbus's status, the tasks and the image
        lines = c.kubectl("get", "topologies", "-n", NS).stdout.splitlines()
        assert lines[0].split() == ["NAME", "STATUS", "WORKERS", "EXECUTORS", "ACKED/S", "FAILED/S",
                                    "UPTIME", "AGE"], lines
        (line,) = [x for x in lines[1:] if x.startswith(f"{NAME} ")]
        row = line.split()
        assert row[1:4] == ["Running", "2/2", "8"], row
        assert float(row[4]) > 0 and float(row[5]) >= 0, row
        assert max(len(x) for x in lines) < 120, lines
        wide = c.kubectl("get", "topologies", "-n", NS, "-o", "wide").stdout.splitlines()
        assert wide[0].split()[-3:] == ["STORM", "TASKS", "IMAGE"], wide
        (wrow,) = [x.split() for x in wide[1:] if x.startswith(f"{NAME} ")]
        assert wrow[8] == "ACTIVE" and int(wrow[9]) > 8 and wrow[10] == st["image"] != "", wrow

        # the scale subresource answers (today's CRD: NotFound)
        scale = _scale(c)
        assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2, scale
        assert scale["status"] == {"replicas": 2, "selector": SELECTOR}, scale

        # replicas 0 is refused by the CRD's schema (numWorkers >= 1), nothing changes
        refused = c.kubectl("scale", f"topology/{NAME}", "-n", NS, "--replicas=0", check=False)
        assert refused.returncode != 0 and "numWorkers" in refused.stderr, refused.stderr
        assert kget(c, "topology", NAME, "-n", NS)["spec"]["numWorkers"] == 2

        out = c.kubectl("scale", f"topology/{NAME}", "-n", NS, "--replicas=3").stdout
        assert f"topology.squall.io/{NAME} scaled" in out, out
        assert kget(c, "topology", NAME, "-n", NS)["spec"]["numWorkers"] == 3
        # the operator rebalances to 3 workers
        st = wait_for(lambda: (s := running(c, NAME, 3)) and cond(s, "Rebalancing").get("reason") == "Completed"
                      and s, 120, what=f"{NAME} rebalanced to Running 3/3")
        assert st["stormStatus"] == "ACTIVE"
        wait_for(lambda: c.kubectl("get", "topology", NAME, "-n", NS, "-o", "jsonpath={.status.replicas}").stdout
                 == "3", 30, what="status.replicas 3")
        assert len(worker_pods(c, NAME)) == 3
        # the selector finds exactly the worker pods (what an HPA reads their metrics by)
        selected = kget(c, "pods", "-n", NS, "-l", SELECTOR)["items"]
        assert sorted(p["metadata"]["name"] for p in selected) == sorted(st["slots"].values())
        scale = _scale(c)
        assert scale["spec"]["replicas"] == 3 and scale["status"] == {"replicas": 3, "selector": SELECTOR}, scale
        # the stream goes on after the rebalance: the spout's acked count grows between two reads
        # (a restarted executor counts from 0 again: a drop only moves the mark)
        last = [-1]

        def acks_grow() -> bool:
            acked = int((status(c, NAME).get("components") or {}).get("sentences", {}).get("acked", 0))
            grew = last[0] >= 0 and acked > last[0]
            last[0] = acked
            return grew

        wait_for(acks_grow, 60, interval=1, what="acks after the rebalance")
        rebalanced = [e["message"] for e in kget(c, "events", "-n", NS, "--field-selector",
                                                 f"involvedObject.name={NAME}")["items"]
                      if e["reason"] == "RebalanceRequested"]
        assert any("numWorkers 2 -> 3" in m for m in rebalanced), rebalanced
    finally:
        delete_and_wait_gone(c, NAME)
