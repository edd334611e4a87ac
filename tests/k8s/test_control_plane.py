"""Acceptance tests of the test control plane and the process kubelet."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from .cluster import Cluster
from .conftest import apply, container_pid, kget, pid_alive, wait_for

pytestmark = pytest.mark.k8s

CHART = Path(__file__).parent / "charts" / "hello"


def pod_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def test_nodes_ready_with_leases(k8s_cluster: Cluster) -> None:
    nodes = kget(k8s_cluster, "nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["node-1", "node-2", "node-3"]
    for i, n in enumerate(nodes):
        conds = {c["type"]: c["status"] for c in n["status"]["conditions"]}
        assert conds["Ready"] == "True"
        assert {"type": "InternalIP", "address": f"127.0.0.{2 + i}"} in n["status"]["addresses"]
        assert n["status"]["capacity"]["pods"] == "110"
        assert n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]
        assert n["status"]["nodeInfo"]["kubeletVersion"] == k8s_cluster.version
    lease = kget(k8s_cluster, "lease", "node-1", "-n", "kube-node-lease")
    first = lease["spec"]["renewTime"]
    wait_for(lambda: kget(k8s_cluster, "lease", "node-1", "-n", "kube-node-lease")["spec"]["renewTime"] != first,
             15, what="the node-1 Lease to be renewed")


def test_versions(k8s_cluster: Cluster) -> None:
    v = json.loads(k8s_cluster.kubectl("version", "-o", "json").stdout)
    assert v["serverVersion"]["gitVersion"] == k8s_cluster.version
    assert v["clientVersion"]["gitVersion"] == k8s_cluster.version
    minor = k8s_cluster.version.split(".")[1]
    assert v["serverVersion"]["minor"] == minor
    hv = k8s_cluster.helm("version", "--short").stdout
    assert hv.startswith("v3."), hv


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels: {app: web}
      containers:
        - name: web
          image: python:3.12
          command: ["python", "-m", "http.server", "8123", "--bind", "$(POD_IP)"]
          env:
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
          ports: [{name: http, containerPort: 8123}]
          readinessProbe:
            httpGet: {path: /, port: http}
            periodSeconds: 1
          livenessProbe:
            tcpSocket: {port: 8123}
            periodSeconds: 2
"""


def test_deployment_serves_and_stops(k8s_cluster: Cluster, ns: str) -> None:
    apply(k8s_cluster, DEPLOYMENT, ns)
    k8s_cluster.kubectl("wait", "-n", ns, "--for=condition=Available", "deployment/web", "--timeout=90s", timeout=100)
    pods = kget(k8s_cluster, "pods", "-n", ns, "-l", "app=web")["items"]
    assert len(pods) == 2
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    pids = []
    for p in pods:
        ip = p["status"]["podIP"]
        node = kget(k8s_cluster, "node", p["spec"]["nodeName"])
        assert ip == node["status"]["addresses"][0]["address"]
        assert p["status"]["phase"] == "Running"
        cs = p["status"]["containerStatuses"][0]
        assert cs["ready"] and cs["restartCount"] == 0 and "running" in cs["state"]
        assert "Directory listing" in http_get(f"http://{ip}:8123/")
        pids.append(container_pid(p))
    assert all(pid_alive(pid) for pid in pids)
    # deleting the Deployment removes the ReplicaSet and pods (garbage
    # collector) and the kubelet stops the processes (graceful deletion)
    k8s_cluster.kubectl("delete", "-n", ns, "deployment/web", "--wait=true", timeout=60)
    wait_for(lambda: not kget(k8s_cluster, "pods,replicasets", "-n", ns)["items"], 60,
             what="pods and replica sets to be removed")
    wait_for(lambda: not any(pid_alive(pid) for pid in pids), 15, what="the server processes to stop")


STATEFULSET = """
apiVersion: v1
kind: Service
metadata:
  name: sleeper
spec:
  clusterIP: None
  selector: {app: sleeper}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: sleeper
spec:
  serviceName: sleeper
  replicas: 1
  selector:
    matchLabels: {app: sleeper}
  template:
    metadata:
      labels: {app: sleeper}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: main
          image: squall-worker:dev
          command: ["python", "-c", "import time\\nprint('started', flush=True)\\nwhile True: time.sleep(1)"]
"""


def test_statefulset_pod_restarted_after_kill9(k8s_cluster: Cluster, ns: str) -> None:
    apply(k8s_cluster, STATEFULSET, ns)
    k8s_cluster.kubectl("rollout", "status", "-n", ns, "statefulset/sleeper", "--timeout=60s", timeout=70)
    pod = kget(k8s_cluster, "pod", "sleeper-0", "-n", ns)
    pid = container_pid(pod)
    os.kill(pid, signal.SIGKILL)

    def restarted() -> dict | None:
        p = kget(k8s_cluster, "pod", "sleeper-0", "-n", ns)
        cs = p["status"]["containerStatuses"][0]
        if cs["restartCount"] == 1 and "running" in cs["state"] and pod_ready(p):
            return p
        return None

    p = wait_for(restarted, 30, what="sleeper-0 to be restarted")
    cs = p["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert container_pid(p) != pid
    assert p["metadata"]["uid"] == pod["metadata"]["uid"]  # restarted in place
    assert k8s_cluster.kubelet is not None
    assert k8s_cluster.kubelet.logs(ns, "sleeper-0", "main").count("started") == 2


ENV_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: envpod
  labels: {{team: storm}}
spec:
  restartPolicy: Never
  nodeName: node-2
  containers:
    - name: show
      image: busybox
      workingDir: {workdir}
      command: ["sh", "-c"]
      args: ["echo ip=$MY_IP name=$MY_NAME node=$MY_NODE team=$TEAM greeting=$(GREETING) cwd=$(pwd) ns=$MY_NS"]
      env:
        - {{name: MY_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
        - {{name: MY_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: MY_NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
        - {{name: MY_NS, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
        - {{name: TEAM, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['team']"}}}}}}
        - {{name: GREETING, value: hello}}
"""


def test_pod_env_workdir_and_logs(k8s_cluster: Cluster, ns: str, tmp_path: Path) -> None:
    apply(k8s_cluster, ENV_POD.format(workdir=tmp_path), ns)
    wait_for(lambda: kget(k8s_cluster, "pod", "envpod", "-n", ns)["status"].get("phase") == "Succeeded", 30,
             what="envpod to succeed")
    pod = kget(k8s_cluster, "pod", "envpod", "-n", ns)
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    want = f"ip=127.0.0.3 name=envpod node=node-2 team=storm greeting=hello cwd={tmp_path} ns={ns}"
    assert k8s_cluster.kubelet is not None
    assert k8s_cluster.kubelet.logs(ns, "envpod", "show").strip() == want
    # kubectl logs goes through the API server to the kubelet's endpoint
    assert k8s_cluster.kubectl("logs", "-n", ns, "envpod").stdout.strip() == want


PROBE_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: python:3.12
      # listens after 4 s; removes its health file 4 s later, so the
      # liveness probe fails and the kubelet restarts it
      command: ["python", "-c", "import os, socket, time\\ntime.sleep(4)\\ns = socket.create_server((os.environ['IP'], 8124))\\nopen('healthy', 'w').close()\\ntime.sleep(4)\\nos.remove('healthy')\\ntime.sleep(3600)"]
      env:
        - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
      readinessProbe:
        tcpSocket: {port: 8124}
        periodSeconds: 1
      livenessProbe:
        exec: {command: ["test", "-f", "healthy"]}
        initialDelaySeconds: 6
        periodSeconds: 1
        failureThreshold: 2
"""


def test_probes(k8s_cluster: Cluster, ns: str) -> None:
    apply(k8s_cluster, PROBE_POD, ns)
    wait_for(lambda: kget(k8s_cluster, "pod", "probed", "-n", ns)["status"]["containerStatuses"][0]["state"].get("running"),
             30, what="probed to run")
    assert not pod_ready(kget(k8s_cluster, "pod", "probed", "-n", ns))  # not listening yet
    wait_for(lambda: pod_ready(kget(k8s_cluster, "pod", "probed", "-n", ns)), 15, what="readiness")
    wait_for(lambda: kget(k8s_cluster, "pod", "probed", "-n", ns)["status"]["containerStatuses"][0]["restartCount"] >= 1,
             30, what="the liveness probe to restart the container")
    events = kget(k8s_cluster, "events", "-n", ns, "--field-selector", "involvedObject.name=probed")["items"]
    reasons = {e["reason"] for e in events}
    assert {"Scheduled", "Started", "Unhealthy", "Killing"} <= reasons, reasons


GRACE_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
    - name: main
      image: python:3.12
      command: ["python", "-c", "import signal, sys, time\\ndef term(*a):\\n    print('got SIGTERM', flush=True)\\n    {on_term}\\nsignal.signal(signal.SIGTERM, term)\\nprint('up', flush=True)\\nwhile True: time.sleep(0.2)"]
"""


def test_graceful_deletion(k8s_cluster: Cluster, ns: str) -> None:
    kl = k8s_cluster.kubelet
    assert kl is not None
    apply(k8s_cluster, GRACE_POD.format(name="polite", grace=30, on_term="sys.exit(0)"), ns)
    apply(k8s_cluster, GRACE_POD.format(name="stubborn", grace=3, on_term="pass"), ns)
    for name in ("polite", "stubborn"):
        wait_for(lambda: "up" in kl.logs(ns, name, "main"), 30, what=f"{name} to start")
    pids = {n: container_pid(kget(k8s_cluster, "pod", n, "-n", ns)) for n in ("polite", "stubborn")}
    t0 = time.monotonic()
    k8s_cluster.kubectl("delete", "pod", "polite", "-n", ns, "--wait=true", timeout=40)
    assert time.monotonic() - t0 < 15  # exited on SIGTERM, no need to wait 30 s
    assert "got SIGTERM" in kl.logs(ns, "polite", "main")
    assert not pid_alive(pids["polite"])
    t0 = time.monotonic()
    k8s_cluster.kubectl("delete", "pod", "stubborn", "-n", ns, "--wait=true", timeout=40)
    took = time.monotonic() - t0
    assert 2.5 <= took < 15, took  # SIGTERM ignored: SIGKILL after the 3 s grace
    assert "got SIGTERM" in kl.logs(ns, "stubborn", "main")
    assert not pid_alive(pids["stubborn"])


def test_helm_install_and_uninstall(k8s_cluster: Cluster, ns: str) -> None:
    out = k8s_cluster.helm("install", "hello", str(CHART), "-n", ns, "--set", "port=8125",
                           "--wait", "--timeout", "90s", timeout=120).stdout
    assert "STATUS: deployed" in out
    cm = kget(k8s_cluster, "configmap", "hello-content", "-n", ns)
    assert cm["data"]["kubeVersion"] == k8s_cluster.version  # helm saw the real server version
    pod = kget(k8s_cluster, "pods", "-n", ns, "-l", "app.kubernetes.io/instance=hello")["items"][0]
    assert pod_ready(pod)
    assert http_get(f"http://{pod['status']['podIP']}:8125/index.html").strip() == "hello from squall"
    # RBAC from the chart: the pod's service account may read config maps
    can = k8s_cluster.kubectl("auth", "can-i", "list", "configmaps", "-n", ns,
                              f"--as=system:serviceaccount:{ns}:hello", check=False).stdout.strip()
    assert can == "yes"
    cannot = k8s_cluster.kubectl("auth", "can-i", "list", "secrets", "-n", ns,
                                 f"--as=system:serviceaccount:{ns}:hello", check=False).stdout.strip()
    assert cannot == "no"
    assert "hello" in k8s_cluster.helm("list", "-n", ns, "-q").stdout.split()
    pid = container_pid(pod)
    k8s_cluster.helm("uninstall", "hello", "-n", ns, "--wait", "--timeout", "60s", timeout=90)
    assert k8s_cluster.helm("list", "-n", ns, "-q").stdout.strip() == ""
    wait_for(lambda: not kget(k8s_cluster, "deployments,pods,configmaps,services,serviceaccounts", "-n", ns,
                              "-l", "app.kubernetes.io/instance=hello")["items"], 60, what="the release's objects to go")
    wait_for(lambda: not pid_alive(pid), 20, what="the web server to stop")


CUSTOM = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: "1"
---
apiVersion: v1
kind: Pod
metadata:
  name: reader
spec:
  serviceAccountName: default
  restartPolicy: Never
  containers:
    - name: main
      image: python:3.12
      # the pod's kubeconfig (a token of its service account): allowed to
      # list nothing in the namespace, so kubectl reports Forbidden
      command: ["sh", "-c", "kubectl get configmaps 2>&1; test -s $KUBECONFIG"]
"""


def test_kubectl_apply_get_delete(k8s_cluster: Cluster, ns: str) -> None:
    out = apply(k8s_cluster, CUSTOM, ns)
    assert "configmap/settings created" in out and "pod/reader created" in out
    assert kget(k8s_cluster, "configmap", "settings", "-n", ns)["data"] == {"a": "1"}
    # apply again: unchanged; then change it
    assert "configmap/settings unchanged" in apply(k8s_cluster, CUSTOM, ns)
    k8s_cluster.kubectl("patch", "configmap", "settings", "-n", ns, "--type=merge", "-p", '{"data":{"a":"2"}}')
    assert kget(k8s_cluster, "configmap", "settings", "-n", ns)["data"]["a"] == "2"
    wait_for(lambda: kget(k8s_cluster, "pod", "reader", "-n", ns)["status"].get("phase") == "Succeeded", 30,
             what="the reader pod to finish")
    assert k8s_cluster.kubelet is not None
    logs = k8s_cluster.kubelet.logs(ns, "reader", "main")
    assert "Forbidden" in logs and f"system:serviceaccount:{ns}:default" in logs, logs
    k8s_cluster.kubectl("delete", "-n", ns, "-f", "-", input=CUSTOM, timeout=60)
    assert "NotFound" in k8s_cluster.kubectl("get", "configmap", "settings", "-n", ns, check=False).stderr


ZK_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: zk
spec:
  nodeName: node-1
  containers:
    - name: zookeeper
      image: zookeeper:3.9
      readinessProbe:
        tcpSocket: {port: 2181}
        periodSeconds: 1
"""


def test_zookeeper_image_runs_pyspark_zookeeper(k8s_cluster: Cluster, ns: str) -> None:
    apply(k8s_cluster, ZK_POD, ns)
    wait_for(lambda: pod_ready(kget(k8s_cluster, "pod", "zk", "-n", ns)), 60, what="ZooKeeper to be ready")
    with socket.create_connection(("127.0.0.2", 2181), timeout=5) as s:
        s.sendall(b"ruok")
        assert s.recv(16) == b"imok"
    k8s_cluster.kubectl("delete", "pod", "zk", "-n", ns, "--wait=true", timeout=60)


JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: twice
spec:
  completions: 2
  parallelism: 1
  backoffLimit: 4
  template:
    spec:
      restartPolicy: OnFailure
      initContainers:
        - name: init
          image: busybox
          command: ["sh", "-c", "echo init done > $SQUALL_POD_DIR/init-ran"]
      containers:
        - name: main
          image: python:3.12
          # fails on its first run in each pod, succeeds when restarted
          command: ["sh", "-c", "test -f $SQUALL_POD_DIR/init-ran || exit 3; if [ -f $SQUALL_POD_DIR/tried ]; then echo ok; else touch $SQUALL_POD_DIR/tried; exit 1; fi"]
"""


def test_job_with_init_container_and_on_failure(k8s_cluster: Cluster, ns: str) -> None:
    apply(k8s_cluster, JOB, ns)
    k8s_cluster.kubectl("wait", "-n", ns, "--for=condition=Complete", "job/twice", "--timeout=90s", timeout=100)
    pods = kget(k8s_cluster, "pods", "-n", ns, "-l", "job-name=twice")["items"]
    assert len(pods) == 2
    for p in pods:
        assert p["status"]["phase"] == "Succeeded"
        assert p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        cs = p["status"]["containerStatuses"][0]
        assert cs["restartCount"] == 1 and cs["state"]["terminated"]["exitCode"] == 0
