"""The chart as a user installs it, on real nodes: helm/squall with its default
values except the worker image (the word count's, built from
examples/wordcount/Dockerfile), a storage class served by a static local
PersistentVolume for ZooKeeper, and operator.resolveClasses=false (the
operator image does not carry the topologies' code). The operator, ZooKeeper
and the workers run in containers from the images scripts/k8s-images built,
non-root with read-only root filesystems; the operator reaches ZooKeeper by
its Service name through CoreDNS and kube-proxy.
"""

from __future__ import annotations

import json
import os

import pytest

from .conftest import kget, wait_for
from .realnode import RealNodeCluster

pytestmark = pytest.mark.k8s

REPO_CHART = os.path.join(os.path.dirname(__file__), "..", "..", "helm", "squall")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "wordcount", "topology.yaml")


def test_chart_defaults_run_the_word_count_in_containers(real_cluster: RealNodeCluster, real_ns: str) -> None:
    c = real_cluster
    sc = f"{real_ns}-local"
    pvdir = c.nodes["node-1"].dir / f"pv-{real_ns}"
    pvdir.mkdir(parents=True)
    os.chown(pvdir, 1000, 1000)  # the zookeeper image's user
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{real_ns}-zk"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "local": {"path": str(pvdir)},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}}))
    c.helm("install", "squall", REPO_CHART, "-n", real_ns,
           "--set", f"zookeeper.persistence.storageClass={sc}",
           "--set", "worker.image.repository=squall-wordcount",
           "--set", "operator.resolveClasses=false", timeout=180)

    def ready(selector: str) -> list[dict[str, object]]:
        pods = kget(c, "pods", "-n", real_ns, "-l", selector)["items"]
        return [p for p in pods if any(x["type"] == "Ready" and x["status"] == "True"
                                       for x in p["status"].get("conditions", []))]

    wait_for(lambda: ready("app.kubernetes.io/component=zookeeper"), 180, what="ZooKeeper Ready (on its PV)")
    wait_for(lambda: ready("app.kubernetes.io/component=operator"), 180, what="the operator Ready")
    pvc = kget(c, "pvc", "-n", real_ns)["items"]
    assert [p["status"]["phase"] for p in pvc] == ["Bound"]

    # in real containers: its image's user, a read-only root filesystem
    ident = c.kubectl("exec", "-n", real_ns, "deploy/squall-operator", "--", "sh", "-c",
                      "id -u; touch /probe 2>&1 || true").stdout
    assert ident.splitlines()[0] == "10001" and "Read-only file system" in ident, ident

    c.kubectl("apply", "-n", real_ns, "-f", EXAMPLE)

    def running() -> str | None:
        line = c.kubectl("get", "topo", "wordcount", "-n", real_ns, "--no-headers").stdout.split()
        return " ".join(line) if line[1:3] == ["Running", "2/2"] else None

    wait_for(running, 240, interval=2, what="wordcount Running 2/2")
    workers = kget(c, "pods", "-n", real_ns, "-l", "squall.io/topology=wordcount")["items"]
    assert len(workers) == 2, [p["metadata"]["name"] for p in workers]
    assert sorted(p["spec"]["nodeName"] for p in workers) == ["node-1", "node-2"]
    for p in workers:
        assert p["spec"]["containers"][0]["image"] == "squall-wordcount:0.1.0"
        assert p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")

    # the workers locked down in their containers (docs/reliability.md, "Pod lockdown"): the
    # image's user, a read-only root filesystem, no capability, a seccomp filter, no privilege
    # gain, no API token; and sealed: the Topology's CURVE pair from its own Secret
    inside = c.kubectl("exec", "-n", real_ns, workers[0]["metadata"]["name"], "--", "sh", "-c",
                       "id -u; touch /probe 2>&1 || true; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status;"
                       " ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true;"
                       ' test -n "$SQUALL_CURVE_SECRET_KEY" && echo sealed').stdout
    lines = [" ".join(x.split()) for x in inside.splitlines()]
    assert lines[0] == "10001" and "Read-only file system" in inside, inside
    assert {"CapEff: 0000000000000000", "Seccomp: 2", "NoNewPrivs: 1", "sealed"} <= set(lines), inside
    assert "No such file or directory" in inside, inside
    assert kget(c, "networkpolicy", "wordcount-workers", "-n", real_ns)["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "squall-worker", "squall.io/topology": "wordcount"}

    # kubectl delete waits for the operator's finalizer (Storm's kill), then the workers are gone
    c.kubectl("delete", "topology", "wordcount", "-n", real_ns, "--timeout=120s", timeout=150)
    wait_for(lambda: not kget(c, "pods", "-n", real_ns, "-l", "squall.io/topology=wordcount")["items"], 120,
             what="the worker pods gone")
