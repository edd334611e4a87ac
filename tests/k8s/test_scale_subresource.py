"""`kubectl scale topology/NAME --replicas=N` on the real API server.

The Topology CRD's scale subresource maps replicas to `spec.numWorkers`, the status replicas to
`status.replicas` (the workers running) and the selector to `status.selector` (the worker pods'
labels), so `kubectl scale`, the HorizontalPodAutoscaler and KEDA drive a topology like a
Deployment; the operator turns the numWorkers change into a hot rebalance. `kubectl get
topologies` shows acked/s and failed/s, `-o wide` the nimbus status, the tasks and the image.
A topology whose bolt fails every tuple turns Degraded (condition, STATUS, one Event) and clears
when deactivated; its workers' PodDisruptionBudget is the Topology's and goes with it; the
operator's livenessProbe keeps passing.

The chart, the operator, ZooKeeper and the process kubelet are the session's release `squall` in
namespace squall-e2e (the `squall` fixture, conftest.py), shared with test_operator_e2e.py.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall_operator import pods

from .cluster import Cluster
from .conftest import kget, wait_for
from .test_operator_e2e import (
    NS,
    WORDCOUNT,
    apply_doc,
    cond,
    delete_and_wait_gone,
    events,
    id_pipeline,
    running,
    status,
    worker_pods,
)

pytestmark = pytest.mark.k8s

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


def _budget(c: Cluster, name: str) -> dict[str, Any] | None:
    r = c.kubectl("get", "poddisruptionbudget", f"{name}-workers", "-n", NS, "-o", "json", check=False)
    return dict(json.loads(r.stdout)) if r.returncode == 0 else None


def test_degraded_condition_worker_budget_and_operator_liveness(squall: Cluster, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    c = squall
    name = "failing"
    doc = id_pipeline(name, tmp_path, count=0, workers=1, rate=50)
    # every tuple fails at once: acks never move, the failed fraction is 100%
    doc["spec"]["bolts"] = [{"name": "refuse", "class": "failing_components:RaisingBolt", "parallelism": 1,
                             "inputs": [{"component": "ids", "grouping": "shuffle"}]}]
    doc["spec"]["health"] = {"stalledSecs": 5, "failedFraction": 0.5, "windowSecs": 5}
    apply_doc(c, doc)
    try:
        uid = kget(c, "topology", name, "-n", NS)["metadata"]["uid"]
        # the workers' PodDisruptionBudget: the Topology's, selecting exactly its worker pods
        budget = wait_for(lambda: _budget(c, name), 60, what=f"PodDisruptionBudget {name}-workers")
        assert budget["spec"]["maxUnavailable"] == 1, budget
        assert budget["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "squall-worker",
                                                              "squall.io/topology": name}}, budget
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        (owner,) = budget["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Topology", name, uid, True)
        wait_for(lambda: running(c, name, 1), 120, what=f"{name} Running 1/1")
        # the disruption controller counts the worker pod under it
        wait_for(lambda: ((_budget(c, name) or {}).get("status") or {}).get("expectedPods") == 1, 60,
                 what="the budget to find the worker pod")

        st = wait_for(lambda: (s := status(c, name)).get("state") == "Degraded" and s, 90,
                      what=f"{name} Degraded")
        degraded = cond(st, "Degraded")
        assert st["phase"] == "Running" and degraded["status"] == "True", st
        assert degraded["reason"] in ("AcksStalled", "TuplesFailing"), degraded
        assert "spec.health" in degraded["message"], degraded
        lines = c.kubectl("get", "topologies", "-n", NS).stdout.splitlines()
        (row,) = [x.split() for x in lines[1:] if x.startswith(f"{name} ")]
        assert row[1:3] == ["Degraded", "1/1"], row
        assert max(len(x) for x in lines) < 120, lines

        # deactivated: nothing to judge, the condition clears with one Recovered
        c.kubectl("patch", "topology", name, "-n", NS, "--type", "merge", "-p", '{"spec":{"active":false}}')
        st = wait_for(lambda: (s := status(c, name)).get("phase") == "Inactive"
                      and cond(s, "Degraded").get("status") == "False" and s, 60, what=f"{name} Inactive")
        assert cond(st, "Degraded")["reason"] == "SpoutsInactive" and st["state"] == "Inactive", st
        reasons = wait_for(lambda: (r := [e["reason"] for e in events(c, name)]).count("Recovered") == 1 and r,
                           30, what="the Recovered Event")
        assert reasons.count("Degraded") == 1, reasons
        assert "SpecChangeIgnored" not in reasons, reasons

        # what the operator does at each start: the budget merged into the one that exists (a
        # changed worker.podDisruptionBudget.maxUnavailable), through the real client
        from squall_operator.kube_api import KubernetesApi

        monkeypatch.setenv("KUBECONFIG", str(c.kubeconfig))
        api = KubernetesApi()
        api.apply_disruption_budget(NS, pods.disruption_budget(name, uid, NS, 2))
        merged = _budget(c, name) or {}
        assert merged["spec"]["maxUnavailable"] == 2 and merged["metadata"]["ownerReferences"] == [owner], merged
        api.delete_disruption_budget(NS, "no-such-workers")  # gone already: nothing to do
    finally:
        delete_and_wait_gone(c, name)
    # owned by the Topology: the garbage collector removes it with it
    wait_for(lambda: _budget(c, name) is None, 60, what=f"PodDisruptionBudget {name}-workers to go")

    # the operator's livenessProbe is on /healthz, which answers while the loop turns: never restarted
    (pod,) = kget(c, "pods", "-n", NS, "-l", "app.kubernetes.io/component=operator")["items"]
    (container,) = pod["spec"]["containers"]
    probe = container["livenessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/healthz", "health"), probe
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    conn = http.client.HTTPConnection(pod["status"]["podIP"], 8080, timeout=5)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"ok\n")
    finally:
        conn.close()
