"""The real-node cluster (realnode.py): real kubelets run pods from the images
scripts/k8s-images built, in real containers, with cluster DNS and Services.

A server pod on node-2 and a client pod on node-1, both from the squall-worker
image, non-root with a read-only root filesystem: the client resolves the
server's Service by name through CoreDNS, reaches it through kube-proxy's
rules and reaches the server's pod IP directly across nodes.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from .conftest import apply, kget, wait_for
from .realnode import RealNodeCluster

pytestmark = pytest.mark.k8s

WORKER_IMAGE = "squall-worker:0.1.0"

SECURITY = {
    "runAsNonRoot": True, "runAsUser": 10001, "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
}

SERVER = """
import http.server, os, socket
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{os.environ['HOSTNAME']} uid={os.getuid()}".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""

CLIENT = """
import json, os, socket, sys, urllib.request
ns, server_ip = sys.argv[1], sys.argv[2]
out = {"uid": os.getuid(), "hostname": socket.gethostname()}
out["resolved"] = socket.gethostbyname(f"web.{ns}.svc.cluster.local")
out["short"] = socket.gethostbyname("web")  # the pod's search path
out["by_name"] = urllib.request.urlopen(f"http://web.{ns}.svc:8080/", timeout=10).read().decode()
out["by_pod_ip"] = urllib.request.urlopen(f"http://{server_ip}:8080/", timeout=10).read().decode()
out["api"] = socket.gethostbyname("kubernetes.default.svc.cluster.local")
try:
    open("/written", "w")
    out["rootfs"] = "writable"
except OSError as e:
    out["rootfs"] = type(e).__name__
print(json.dumps(out), flush=True)
"""


def pod(name: str, node: str, args: list[str], labels: dict[str, str] | None = None,
        server: bool = False, restart: str = "") -> str:
    container: dict[str, object] = {
        "name": "main", "image": WORKER_IMAGE, "imagePullPolicy": "Never",
        "command": ["python", "-c"], "args": args, "securityContext": SECURITY,
    }
    if server:
        container["ports"] = [{"containerPort": 8080}]
        container["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": node, "restartPolicy": restart or ("Always" if server else "Never"),
                 "terminationGracePeriodSeconds": 1, "containers": [container]},
    })


def test_real_nodes_run_built_images_with_dns_and_services(real_cluster: RealNodeCluster, real_ns: str) -> None:
    c = real_cluster
    nodes = kget(c, "nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-1", "node-2"]
    for n in nodes:
        assert n["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://"), n["status"]["nodeInfo"]
        assert n["status"]["nodeInfo"]["kubeletVersion"] == c.version

    apply(c, pod("web-0", "node-2", [textwrap.dedent(SERVER)], labels={"app": "web"}, server=True), real_ns)
    apply(c, json.dumps({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": 8080}]},
    }), real_ns)

    def ready() -> str | None:
        p = kget(c, "pod", "web-0", "-n", real_ns)
        ok = any(x["type"] == "Ready" and x["status"] == "True" for x in p["status"].get("conditions", []))
        return p["status"].get("podIP") if ok else None

    server_ip = wait_for(ready, 120, what="the server pod Ready on node-2")
    assert server_ip.startswith(c.nodes["node-2"].cidr.rsplit(".", 2)[0] + ".2."), server_ip
    c.wait_service_routed(real_ns, "web")

    apply(c, pod("client", "node-1", [textwrap.dedent(CLIENT), real_ns, server_ip]), real_ns)
    phase = wait_for(lambda: kget(c, "pod", "client", "-n", real_ns)["status"].get("phase") in ("Succeeded", "Failed")
                     and kget(c, "pod", "client", "-n", real_ns)["status"]["phase"], 120, what="the client pod to finish")
    logs = c.kubectl("logs", "client", "-n", real_ns).stdout  # through the API server and node-1's kubelet
    assert phase == "Succeeded", logs
    out = json.loads(logs.strip().splitlines()[-1])
    svc_ip = kget(c, "service", "web", "-n", real_ns)["spec"]["clusterIP"]
    assert out["resolved"] == svc_ip and out["short"] == svc_ip
    assert out["by_name"] == "web-0 uid=10001"
    assert out["by_pod_ip"] == "web-0 uid=10001"
    assert out["api"] == "10.96.0.1"
    assert out["uid"] == 10001 and out["hostname"] == "client"
    assert out["rootfs"] == "OSError"
    client_pod = kget(c, "pod", "client", "-n", real_ns)
    assert client_pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    assert client_pod["status"]["podIP"].startswith(c.nodes["node-1"].cidr.rsplit(".", 2)[0] + ".1.")


def test_a_failed_real_node_loses_its_containers_and_comes_back(real_cluster: RealNodeCluster, real_ns: str) -> None:
    c = real_cluster
    apply(c, pod("sleeper", "node-2", ["import time; time.sleep(3600)"], restart="Always"), real_ns)
    wait_for(lambda: kget(c, "pod", "sleeper", "-n", real_ns)["status"].get("phase") == "Running", 120,
             what="the pod Running on node-2")
    assert c._node_pids(c.nodes["node-2"]), "no process in node-2's cgroups"

    c.fail_node("node-2")
    assert not c._node_pids(c.nodes["node-2"]), "containers of the failed node still run"

    def ready(status: str) -> bool:
        node = kget(c, "node", "node-2")
        return any(x["type"] == "Ready" and x["status"] == status for x in node["status"]["conditions"])

    wait_for(lambda: ready("Unknown"), 60, what="node-2 Unknown after its kubelet died")
    c.restore_node("node-2")
    wait_for(lambda: ready("True"), 90, what="node-2 Ready again")
    wait_for(lambda: kget(c, "pod", "sleeper", "-n", real_ns)["status"].get("phase") == "Running"
             and c._node_pids(c.nodes["node-2"]), 120, what="the pod running again on node-2")
