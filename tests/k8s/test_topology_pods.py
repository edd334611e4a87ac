"""Per-topology worker pod settings, honest health and placement on the real API server, and
invalid settings refused.

The CRD's schema refuses invalid worker settings with the field in the message. With the chart
installed (the session's `squall` fixture, conftest.py: the process kubelet runs `squall-worker:*`
images as the worker command, any tag, and reports ErrImagePull for an image it does not know),
what cannot run says why on the Topology within a minute (an image no registry serves, requests
no node can hold, an invalid pod template) while a topology on its own image runs on, and
workers keep off a tainted node of the three unless they tolerate it. Two images side by side
and an image roll with every id acked run on real nodes (test_chart_real_nodes.py).
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import Cluster
from .conftest import kget, wait_for
from .test_operator_e2e import (
    NS,
    WORDCOUNT,
    apply_doc,
    cond,
    reasons,
    running,
    status,
    worker_pods,
)

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]


def _wordcount(name: str, worker: dict[str, Any], workers: int = 1) -> dict[str, Any]:
    doc = yaml.safe_load(WORDCOUNT.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["numWorkers"] = workers
    doc["spec"]["worker"] = worker
    return doc


def test_crd_refuses_invalid_worker_settings_and_keeps_valid_ones(squall: Cluster) -> None:
    c = squall
    good = _wordcount("good", {
        "image": "team-a/wordcount:2", "imagePullPolicy": "Never",
        "resources": {"requests": {"cpu": "250m", "memory": 268435456}, "limits": {"cpu": 1}},
        "env": [{"name": "MODE", "value": "fast"}],
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"disk": "ssd"},
        "volumes": [{"name": "models", "configMap": {"name": "models"}}],
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
    })
    r = c.kubectl("apply", "--dry-run=server", "-o", "json", "-n", NS, "-f", "-", input=yaml.safe_dump(good))
    assert json.loads(r.stdout)["spec"]["worker"] == good["spec"]["worker"]
    cases = [
        ({"imagePullPolicy": "Sometimes"}, "spec.worker.imagePullPolicy", "Unsupported value"),
        ({"resources": {"requests": {"cpu": "lots"}}}, "spec.worker.resources.requests.cpu", "should match"),
        ({"tolerations": [{"operator": "Maybe"}]}, "spec.worker.tolerations[0].operator", "Unsupported value"),
        ({"serviceAccountName": "Not_Valid"}, "spec.worker.serviceAccountName", "should match"),
        ({"hostNetwork": True}, "hostNetwork", "unknown field"),
    ]
    for worker, field, words in cases:
        r = c.kubectl("apply", "--dry-run=server", "-n", NS, "-f", "-", input=yaml.safe_dump(_wordcount("bad", worker)),
                      check=False)
        assert r.returncode != 0, worker
        assert field in r.stderr and words in r.stderr, r.stderr


def test_operator_is_ready_through_its_readiness_endpoint(squall: Cluster) -> None:
    pod = kget(squall, "pods", "-n", NS, "-l", "app.kubernetes.io/component=operator")["items"][0]
    (container,) = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert any(x["type"] == "Ready" and x["status"] == "True" for x in pod["status"]["conditions"])
    conn = http.client.HTTPConnection(pod["status"]["podIP"], 8080, timeout=5)
    try:
        conn.request("GET", "/readyz")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"ok\n")
    finally:
        conn.close()


def test_what_cannot_run_says_why_within_a_minute(squall: Cluster) -> None:
    c = squall
    # a topology on an image of its own runs beside them and stays untouched
    apply_doc(c, _wordcount("other", {"image": "squall-worker:team-b"}))
    wait_for(lambda: running(c, "other", 1), 120, what="other Running 1/1")
    other_uids = {p["metadata"]["uid"] for p in worker_pods(c, "other")}
    apply_doc(c, _wordcount("no-image", {"image": "registry.invalid/team-c/nope:1"}))
    apply_doc(c, _wordcount("too-big", {"resources": {"requests": {"cpu": "512"}}}))
    apply_doc(c, _wordcount("bad-volume", {"volumes": [{"name": "v", "emptyDir": {}, "configMap": {"name": "x"}}]}))
    st = wait_for(lambda: (s := status(c, "no-image")).get("state") in ("ErrImagePull", "ImagePullBackOff") and s,
                  60, what="no-image to show ErrImagePull")
    assert "registry.invalid/team-c/nope:1" in st["message"] and cond(st, "WorkersHealthy")["status"] == "False"
    assert st["state"] in reasons(c, "no-image")
    st = wait_for(lambda: (s := status(c, "too-big")).get("state") == "Unschedulable" and s, 60,
                  what="too-big to show Unschedulable")
    assert "requests cpu 512" in st["message"] and not worker_pods(c, "too-big")
    st = wait_for(lambda: (s := status(c, "bad-volume")).get("state") == "InvalidPodTemplate" and s, 60,
                  what="bad-volume to show InvalidPodTemplate")
    assert "spec.volumes[1]" in st["message"], st["message"]
    assert "InvalidPodTemplate" in reasons(c, "bad-volume")
    # the columns show it
    table = c.kubectl("get", "topo", "-n", NS).stdout
    assert any(line.split()[:2] == ["too-big", "Unschedulable"] for line in table.splitlines()), table
    # the others run on
    assert status(c, "other")["phase"] == "Running"
    assert {p["metadata"]["uid"] for p in worker_pods(c, "other")} == other_uids
    # deleted together: each kill waits its killWaitSecs (30 s), and one after another they did
    # so in turn
    doomed = ("no-image", "too-big", "bad-volume")
    c.kubectl("delete", "topology", *doomed, "-n", NS, "--wait=false")
    for name in doomed:
        wait_for(lambda: c.kubectl("get", "topology", name, "-n", NS, check=False).returncode != 0, 120,  # noqa: B023
                 what=f"topology {name} to be removed")


def test_workers_keep_off_nodes_their_pods_may_not_use(squall: Cluster) -> None:
    c = squall
    c.kubectl("taint", "node", "node-2", "dedicated=stream:NoSchedule")
    try:
        apply_doc(c, _wordcount("untolerant", {}, workers=3))
        apply_doc(c, _wordcount("dedicated", {
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "stream", "effect": "NoSchedule"}],
            "nodeSelector": {"kubernetes.io/hostname": "node-2"}}, workers=1))
        wait_for(lambda: running(c, "untolerant", 3), 120, what="untolerant Running 3/3")
        wait_for(lambda: running(c, "dedicated", 1), 120, what="dedicated Running 1/1")
        assert "node-2" not in {p["spec"]["nodeName"] for p in worker_pods(c, "untolerant")}
        assert {p["spec"]["nodeName"] for p in worker_pods(c, "dedicated")} == {"node-2"}
    finally:
        c.kubectl("taint", "node", "node-2", "dedicated-", check=False)
        for name in ("untolerant", "dedicated", "other"):
            c.kubectl("delete", "topology", name, "-n", NS, "--wait=false", check=False)
