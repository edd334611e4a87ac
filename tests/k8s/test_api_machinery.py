"""What the operator relies on from the real API server: CRD schema
validation, the status subresource, finalizers, garbage collection; and a
clear failure when the binaries are missing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .cluster import Cluster, find_bin_dir
from .conftest import apply, kget, wait_for

pytestmark = pytest.mark.k8s

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.squall.io
spec:
  group: test.squall.io
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [size]
              properties:
                size: {type: integer, minimum: 1, maximum: 10}
            status:
              type: object
              properties:
                phase: {type: string}
"""


def widget(name: str, size: object, finalizers: list[str] | None = None) -> str:
    meta: dict[str, object] = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    return json.dumps({"apiVersion": "test.squall.io/v1", "kind": "Widget", "metadata": meta, "spec": {"size": size}})


def test_crd_validation_status_and_finalizers(k8s_cluster: Cluster, ns: str) -> None:
    k8s_cluster.kubectl("apply", "-f", "-", input=CRD)
    k8s_cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.test.squall.io", "--timeout=30s")
    # schema validation
    bad = k8s_cluster.kubectl("apply", "-n", ns, "-f", "-", input=widget("w0", 11), check=False)
    assert bad.returncode != 0 and "spec.size" in bad.stderr, bad.stderr
    wait_for(lambda: apply(k8s_cluster, widget("w1", 3, ["test.squall.io/cleanup"]), ns), 20,
             what="the Widget kind to be served")
    # the status subresource: status is ignored on the main resource...
    k8s_cluster.kubectl("patch", "widget", "w1", "-n", ns, "--type=merge", "-p", '{"status":{"phase":"X"}}')
    assert "status" not in kget(k8s_cluster, "widget", "w1", "-n", ns)
    # ...and set through /status
    k8s_cluster.kubectl("patch", "widget", "w1", "-n", ns, "--subresource=status", "--type=merge",
                        "-p", '{"status":{"phase":"Running"}}')
    w = kget(k8s_cluster, "widget", "w1", "-n", ns)
    assert w["status"]["phase"] == "Running" and w["metadata"]["generation"] == 1
    # a finalizer holds the object in deletion until removed
    k8s_cluster.kubectl("delete", "widget", "w1", "-n", ns, "--wait=false")
    w = kget(k8s_cluster, "widget", "w1", "-n", ns)
    assert w["metadata"]["deletionTimestamp"]
    k8s_cluster.kubectl("patch", "widget", "w1", "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait_for(lambda: k8s_cluster.kubectl("get", "widget", "w1", "-n", ns, check=False).returncode != 0, 20,
             what="w1 to be removed")
    # garbage collection: a ConfigMap owned by a Widget goes with it
    apply(k8s_cluster, widget("w2", 2), ns)
    uid = kget(k8s_cluster, "widget", "w2", "-n", ns)["metadata"]["uid"]
    owned = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned", "ownerReferences": [
        {"apiVersion": "test.squall.io/v1", "kind": "Widget", "name": "w2", "uid": uid}]}, "data": {"a": "b"}}
    apply(k8s_cluster, json.dumps(owned), ns)
    k8s_cluster.kubectl("delete", "widget", "w2", "-n", ns)
    # the controller-manager's garbage collector watches a kind only after its discovery of new
    # resources, which runs every 30 s: for a CRD created a moment ago that comes first
    wait_for(lambda: k8s_cluster.kubectl("get", "configmap", "owned", "-n", ns, check=False).returncode != 0, 90,
             what="the garbage collector to delete the owned ConfigMap")
    k8s_cluster.kubectl("delete", "crd", "widgets.test.squall.io", "--wait=false")


def test_missing_binaries_fail_with_build_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("SQUALL_K8S_BIN", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="scripts/k8s-build"):
        find_bin_dir()


def test_kubelet_standalone_help() -> None:
    from pathlib import Path

    r = subprocess.run([sys.executable, str(Path(__file__).parent / "kubelet.py"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--kubeconfig" in r.stdout
