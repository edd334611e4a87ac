"""A node fails: heartbeats stop, its processes die, the control plane notices."""

from __future__ import annotations

import pytest

from .cluster import Cluster
from .conftest import apply, container_pid, kget, pid_alive, wait_for

pytestmark = pytest.mark.k8s

PINNED = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pinned
spec:
  replicas: 1
  selector:
    matchLabels: {app: pinned}
  template:
    metadata:
      labels: {app: pinned}
    spec:
      nodeSelector: {kubernetes.io/hostname: node-3}
      terminationGracePeriodSeconds: 1
      containers:
        - name: main
          image: python:3.12
          command: ["python", "-c", "import time\\nwhile True: time.sleep(1)"]
"""


def _cond(obj: dict, typ: str) -> str:
    return next((c["status"] for c in obj["status"].get("conditions", []) if c["type"] == typ), "")


def test_failed_node_pods_marked_and_lease_stops(k8s_cluster: Cluster, ns: str) -> None:
    kl = k8s_cluster.kubelet
    assert kl is not None
    apply(k8s_cluster, PINNED, ns)
    k8s_cluster.kubectl("wait", "-n", ns, "--for=condition=Available", "deployment/pinned", "--timeout=60s", timeout=70)
    pod = kget(k8s_cluster, "pods", "-n", ns, "-l", "app=pinned")["items"][0]
    assert pod["spec"]["nodeName"] == "node-3"
    pid = container_pid(pod)
    try:
        kl.fail_node("node-3")
        assert not pid_alive(pid)
        renewed = kget(k8s_cluster, "lease", "node-3", "-n", "kube-node-lease")["spec"]["renewTime"]
        # the node lifecycle controller: Ready becomes Unknown after the grace
        # period, the node is tainted unreachable, its pods are not ready
        wait_for(lambda: _cond(kget(k8s_cluster, "node", "node-3"), "Ready") == "Unknown", 60,
                 what="node-3 to be Unknown")
        node = kget(k8s_cluster, "node", "node-3")
        assert any(t["key"] == "node.kubernetes.io/unreachable" for t in node["spec"].get("taints", []))
        wait_for(lambda: _cond(kget(k8s_cluster, "pod", pod["metadata"]["name"], "-n", ns), "Ready") == "False", 30,
                 what="the pod on node-3 to be marked not ready")
        assert kget(k8s_cluster, "lease", "node-3", "-n", "kube-node-lease")["spec"]["renewTime"] == renewed
        # other nodes stay Ready
        assert _cond(kget(k8s_cluster, "node", "node-1"), "Ready") == "True"
    finally:
        kl.restore_node("node-3")
    wait_for(lambda: _cond(kget(k8s_cluster, "node", "node-3"), "Ready") == "True", 60, what="node-3 to come back")
    k8s_cluster.kubectl("wait", "-n", ns, "--for=condition=Available", "deployment/pinned", "--timeout=90s", timeout=100)
