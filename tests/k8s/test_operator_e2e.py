"""The operator as nimbus, end to end on the real control plane and the process kubelet.

`helm install` the chart (CRD, operator, RBAC, ZooKeeper) into one namespace, then, in order:
run the word count from the same file `squall run` takes (its pods, probes, metrics, Secrets and
its state in ZooKeeper), read `kubectl get topo`, steer it with `kubectl squall rebalance -w` and
`kill -w`, and kill it with `kubectl delete`. The tests run in file order on one release, the
session fixture `squall` (conftest.py), which the other modules on this release share.

What test_chart_real_nodes.py shows the same way on real nodes (deactivate / activate, invalid
specs, rebalance 2 -> 3 workers with every id acked, a failed node, the operator killed
mid-rebalance, ZooKeeper's ACLs refusing strangers) is not repeated here
(docs/testing.md, "Which kubelet each test uses").

The process kubelet runs the images as local commands: squall-operator -> `squall operator`,
squall-worker -> the command the values set, zookeeper -> the ZooKeeper of the PySpark jars.
Pods of a node share its address (127.0.0.2 for node-1), so ZooKeeper and the operator are pinned
to node-1 and the operator reaches ZooKeeper at 127.0.0.2 (there is no cluster DNS here).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.topology_keys import topology_key

from .cluster import Cluster
from .conftest import chart_release, kget, wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "examples" / "wordcount" / "topology.yaml"
COMPONENTS_DIR = REPO / "tests" / "integration" / "topologies"
NS = "squall-e2e"
# a second namespace the operator runs (operator.watchNamespaces): test_namespaces_e2e.py runs a
# topology of one name in each
NS_B = "squall-e2e-b"
ZK = "127.0.0.2:2181"


def _values(tmp: Path) -> Path:
    values = {
        "searchPaths": [str(WORDCOUNT.parent), str(COMPONENTS_DIR)],
        "operator": {
            "image": {"tag": "dev"},
            "nodeSelector": {"kubernetes.io/hostname": "node-1"},
            "monitorFreqSecs": 1,
            "taskTimeoutSecs": 8,
            "launchTimeoutSecs": 60,
            "leaseDurationSecs": 6,
            "logLevel": "INFO",
            "watchNamespaces": [NS, NS_B],
        },
        "worker": {"image": {"tag": "dev"}, "command": "python -m squall.worker",
                   "terminationGracePeriodSeconds": 10},
        "slots": {"perNode": 3},
        "zookeeper": {
            "connect": ZK,
            "nodeSelector": {"kubernetes.io/hostname": "node-1"},
            "persistence": {"enabled": False},
            # the process kubelet mounts no volumes: a fresh directory per test session
            "dataDir": str(tmp / "zookeeper-data"),
            "tickTime": 500,
            "auth": {"enabled": True},
        },
    }
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@contextlib.contextmanager
def e2e_release(c: Cluster, tmp: Path) -> Iterator[Cluster]:
    """The chart installed as release `squall` in namespace squall-e2e: the session fixture
    `squall` (conftest.py), shared by this module, test_scale_subresource.py,
    test_topology_pods.py and test_zk_outage_e2e.py."""
    # pods of node-1 listen on 127.0.0.2 of this machine: a second test cluster running at the
    # same time would share ZooKeeper's address and two operators would fight over one state
    import socket

    # the previous module's release leaves this namespace terminating for a while, and its
    # ZooKeeper pod's process may still hold the port until its grace period is over
    wait_for(lambda: c.kubectl("get", "namespace", NS, check=False).returncode != 0, 180,
             what=f"namespace {NS} of a previous module to be gone")

    def port_free() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.2", 2181)) != 0

    deadline = time.monotonic() + 60
    while not port_free():
        if time.monotonic() > deadline:
            pytest.fail("127.0.0.2:2181 is still in use 60 s after the previous release was gone (another "
                        "test cluster running at the same time?); the operator tests need node-1's address "
                        "for their ZooKeeper")
        time.sleep(0.5)
    wait_for(lambda: c.kubectl("get", "namespace", NS_B, check=False).returncode != 0, 180,
             what=f"namespace {NS_B} of a previous module to be gone")
    c.kubectl("create", "namespace", NS_B)  # before the chart, which puts the operator's Role there
    try:
        with chart_release(c, NS, values=_values(tmp), helm_wait=True, operator_log=lambda: _operator_log(c)):
            wait_for(lambda: _lease_holder(c), 60, what="the operator to hold its lease")
            yield c
    finally:
        c.kubectl("delete", "namespace", NS_B, "--wait=false", check=False)


def _lease_holder(c: Cluster) -> str:
    r = c.kubectl("get", "lease", "squall-operator", "-n", NS, "-o", "json", check=False)
    if r.returncode != 0:
        return ""
    return str(json.loads(r.stdout)["spec"].get("holderIdentity") or "")


def _operator_pod(c: Cluster) -> dict[str, Any]:
    items = kget(c, "pods", "-n", NS, "-l", "app.kubernetes.io/component=operator")["items"]
    assert len(items) == 1, [p["metadata"]["name"] for p in items]
    return items[0]


def _operator_log(c: Cluster) -> str:
    """The operator container's log, from the process kubelet."""
    pod = _operator_pod(c)
    assert c.kubelet is not None
    return c.kubelet.logs(NS, pod["metadata"]["name"], "operator")


def topo(c: Cluster, name: str) -> dict[str, Any]:
    return kget(c, "topology", name, "-n", NS)


def status(c: Cluster, name: str) -> dict[str, Any]:
    return topo(c, name).get("status") or {}


def cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((x for x in st.get("conditions") or [] if x["type"] == type_), {})


def events(c: Cluster, name: str) -> list[dict[str, Any]]:
    items = kget(c, "events", "-n", NS, "--field-selector", f"involvedObject.name={name}")["items"]
    return sorted(items, key=lambda e: e["metadata"]["creationTimestamp"])


def reasons(c: Cluster, name: str) -> list[str]:
    return [e["reason"] for e in events(c, name)]


def worker_pods(c: Cluster, name: str) -> list[dict[str, Any]]:
    return kget(c, "pods", "-n", NS, "-l", f"squall.io/topology={name}")["items"]


def zk_credentials(c: Cluster) -> Any:
    """The digest credentials the chart generated (zookeeper.auth): Squall's nodes carry an ACL."""
    import base64

    from squall.state import ZkCredentials

    secret = kget(c, "secret", "squall-zk-auth", "-n", NS)
    return ZkCredentials.parse(base64.b64decode(secret["data"]["credentials"]).decode(), "the chart's Secret")


def zk_state(c: Cluster) -> Any:
    from squall.state import ClusterState

    return ClusterState.connect(ZK, root="/squall", credentials=zk_credentials(c))


def running(c: Cluster, name: str, workers: int) -> dict[str, Any] | None:
    st = status(c, name)
    if st.get("phase") == "Running" and st.get("workers") == f"{workers}/{workers}":
        return st
    return None


def spout_emitted(c: Cluster, name: str, spout: str) -> int:
    return int((status(c, name).get("components") or {}).get(spout, {}).get("emitted", 0))


def apply_doc(c: Cluster, doc: dict[str, Any], check: bool = True) -> Any:
    return c.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(doc), check=check)


def id_pipeline(name: str, out: Path, count: int, workers: int = 2, rate: float = 150) -> dict[str, Any]:
    comps = "engine_components"
    return {
        "apiVersion": "squall.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {
            "numWorkers": workers,
            "messageTimeoutSecs": 10,
            "maxSpoutPending": 200,
            "rebalanceWaitSecs": 2,
            "killWaitSecs": 3,
            "config": {"test.count": count, "test.rate": rate, "test.out": str(out)},
            "spouts": [{"name": "ids", "class": f"{comps}:IdSpout", "parallelism": 1}],
            "bolts": [
                {"name": "pass", "class": f"{comps}:PassBolt", "parallelism": 2,
                 "inputs": [{"component": "ids", "grouping": "shuffle"}]},
                {"name": "sink", "class": f"{comps}:SinkBolt", "parallelism": 2,
                 "inputs": [{"component": "pass", "grouping": "fields", "fields": ["id"]}]},
            ],
        },
    }


def kubectl_squall(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl squall ARGS --namespace squall-e2e`: kubectl finds the plugin on PATH."""
    env = c.env()
    env["PATH"] = f"{c.bin}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([str(c.bin / "kubectl"), "squall", *args, "--namespace", NS], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def delete_and_wait_gone(c: Cluster, name: str, timeout: float = 90) -> None:
    c.kubectl("delete", "topology", name, "-n", NS, "--wait=false")
    wait_for(lambda: c.kubectl("get", "topology", name, "-n", NS, check=False).returncode != 0, timeout,
             what=f"topology {name} to be removed")


# --- the scenarios, in order -----------------------------------------------------------------------


def test_helm_installs_crd_operator_rbac_and_zookeeper(squall: Cluster) -> None:
    c = squall
    crd = kget(c, "crd", "topologies.squall.io")
    assert crd["spec"]["names"]["shortNames"] == ["topo"]
    pod = _operator_pod(c)
    assert pod["spec"]["nodeName"] == "node-1" and pod["status"]["phase"] == "Running"
    assert _lease_holder(c) == pod["metadata"]["name"]
    zk = kget(c, "statefulset", "squall-zookeeper", "-n", NS)
    assert zk["status"].get("readyReplicas") == 1
    # least privilege: nodes are read-only, no secrets
    sa = f"system:serviceaccount:{NS}:squall"
    can = lambda *a: c.kubectl("auth", "can-i", *a, "--as", sa, check=False).stdout.strip()  # noqa: E731
    assert can("list", "nodes") == "yes"
    assert can("delete", "nodes") == "no"
    assert can("get", "secrets", "-n", NS) == "no" and can("list", "secrets", "-n", NS) == "no"
    assert can("create", "secrets", "-n", NS) == "yes"  # each Topology's CURVE pair, never read back
    assert can("create", "pods", "-n", NS) == "yes"
    assert can("create", "pods", "-n", "default") == "no"
    assert can("patch", "topologies.squall.io/status", "-n", NS) == "yes"


def test_wordcount_runs_from_the_same_file(squall: Cluster) -> None:
    c = squall
    out = c.kubectl("apply", "-n", NS, "-f", str(WORDCOUNT)).stdout
    assert "topology.squall.io/wordcount created" in out
    st = wait_for(lambda: running(c, "wordcount", 2), 120, what="wordcount Running 2/2")
    assert st["stormStatus"] == "ACTIVE" and st["observedGeneration"] == topo(c, "wordcount")["metadata"]["generation"]
    # counts arrive: the spout's trees are acked and the count bolt executes words
    wait_for(lambda: (status(c, "wordcount").get("components") or {}).get("sentences", {}).get("acked", 0) > 50,
             60, what="acked sentences in the status")
    comps = status(c, "wordcount")["components"]
    assert comps["count"]["executed"] > 0 and comps["split"]["emitted"] > 0
    assert comps["count"]["executors"] == 2 and comps["count"]["tasks"] == 4
    pods = worker_pods(c, "wordcount")
    assert len(pods) == 2
    for p in pods:
        assert p["metadata"]["ownerReferences"][0]["kind"] == "Topology"
        slot = p["metadata"]["annotations"]["squall.io/slot"]
        assert slot.startswith(p["spec"]["nodeName"] + "-")
        # the slot's name and a generation (a replacement pod gets a new one)
        assert p["metadata"]["name"].startswith(f"wordcount-{slot}-")
        assert p["metadata"]["labels"]["squall.io/port"] == slot.rsplit("-", 1)[1]
        # Ready through the worker's own /readyz (its ZooKeeper session, endpoint, assignment,
        # loops), not a TCP connect; its /metrics answers on the same named port
        (ctr,) = p["spec"]["containers"]
        got = ctr["readinessProbe"]["httpGet"]
        assert (got["path"], got["port"]) == ("/readyz", "metrics")
        assert any(x["type"] == "Ready" and x["status"] == "True" for x in p["status"]["conditions"])
        port = {cp["name"]: cp["containerPort"] for cp in ctr["ports"]}["metrics"]
        conn = http.client.HTTPConnection(p["status"]["podIP"], port, timeout=10)
        conn.request("GET", "/readyz")
        assert conn.getresponse().read() == b"ok\n"
        conn.close()
        conn = http.client.HTTPConnection(p["status"]["podIP"], port, timeout=10)
        conn.request("GET", "/metrics")
        assert b'squall_emitted_total{component=' in conn.getresponse().read()
        conn.close()
    assert "Submitted" in reasons(c, "wordcount")
    # sealed: the workers read the Topology's CURVE pair from its own Secret, and a
    # NetworkPolicy lets only its workers reach them; both owned by the Topology
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in pods[0]["spec"]["containers"][0]["env"]
            if e["name"].startswith("SQUALL_CURVE_")}
    assert set(refs) == {"SQUALL_CURVE_PUBLIC_KEY", "SQUALL_CURVE_SECRET_KEY"}
    secret = kget(c, "secret", refs["SQUALL_CURVE_SECRET_KEY"]["name"], "-n", NS)
    policy = kget(c, "networkpolicy", "wordcount-workers", "-n", NS)
    for obj in (secret, policy):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == topo(c, "wordcount")["metadata"]["uid"]
    assert policy["spec"]["podSelector"]["matchLabels"]["squall.io/topology"] == "wordcount"
    with zk_state(c) as zk:
        eps = zk.get_endpoints(topology_key("wordcount", NS))
        assert {ep.host for ep in eps.values()} <= {"127.0.0.2", "127.0.0.3", "127.0.0.4"}
        assert len(eps) == 2
    # the operator's /metrics (its health port): rounds, the assignment it wrote, phases
    from prometheus_client.parser import text_string_to_metric_families

    op = kget(c, "pods", "-n", NS, "-l", "app.kubernetes.io/component=operator")["items"][0]
    conn = http.client.HTTPConnection(op["status"]["podIP"], 8080, timeout=10)
    conn.request("GET", "/metrics")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(conn.getresponse().read().decode()) for s in fam.samples}
    conn.close()
    assert samples[("squall_operator_reconcile_rounds_total", (("outcome", "ok"),))] > 0
    assert samples[("squall_nimbus_assignment_changes_total", (("topology", topology_key("wordcount", NS)),))] >= 1
    assert samples[("squall_operator_topologies", (("phase", "Running"),))] >= 1


def test_kubectl_get_topo_columns(squall: Cluster) -> None:
    def listed() -> tuple[list[str], list[str]] | None:
        out = squall.kubectl("get", "topo", "-n", NS).stdout.splitlines()
        row = next((line.split() for line in out[1:] if line.startswith("wordcount ")), [])
        # the rate columns stay empty until the operator has two samples 5 s apart
        return (out[0].split(), row) if len(row) == 8 else None

    header, row = wait_for(listed, 60, what="wordcount's line with its rates")
    assert header == ["NAME", "STATUS", "WORKERS", "EXECUTORS", "ACKED/S", "FAILED/S", "UPTIME", "AGE"], header
    # sentences 1 + split 2 + count 2 + report 1 + __acker 2
    assert row[1:4] == ["Running", "2/2", "8"], row
    assert float(row[4]) > 0 and float(row[5]) >= 0, row
    assert row[6][-1] in "smh" and row[7][-1] in "smh"
    described = squall.kubectl("describe", "topology", "wordcount", "-n", NS).stdout
    assert "Conditions:" in described and "Submitted" in described


def test_kubectl_squall_rebalance_w_waits_as_asked(squall: Cluster) -> None:
    """`kubectl squall rebalance -w 6`: Storm's rebalance with the asked wait instead of the
    spec's rebalanceWaitSecs (the message timeout, 30 s): the spouts are deactivated for the
    wait, then the executors are reassigned and the activation restored."""
    c = squall
    asked = time.time()
    done = kubectl_squall(c, "rebalance", "wordcount", "-e", "count=4", "-w", "6")
    assert done.returncode == 0 and "after 6s" in done.stdout, (done.stdout, done.stderr)
    seen = wait_for(lambda: (s := status(c, "wordcount")).get("phase") == "Rebalancing" and s, 30,
                    what="phase Rebalancing")
    assert cond(seen, "Active")["status"] == "False"
    with zk_state(c) as zk:
        base = zk.get_storm(topology_key("wordcount", NS))
    # stored in ZooKeeper when the operator asked nimbus: due 6 s after, not 30
    assert base is not None and base.status.value == "REBALANCING" and base.delayed_due_secs is not None
    assert 5 <= base.delayed_due_secs - asked < 20, base.delayed_due_secs - asked
    st = wait_for(lambda: (s := status(c, "wordcount")).get("phase") == "Running"
                  and cond(s, "Rebalancing").get("reason") == "Completed" and s, 90, what="the rebalance to complete")
    assert st["stormStatus"] == "ACTIVE" and cond(st, "Active")["status"] == "True"
    requested = [e["message"] for e in events(c, "wordcount") if e["reason"] == "RebalanceRequested"]
    assert any("in 6s (squall.io/rebalance-wait-secs)" in m for m in requested), requested
    with zk_state(c) as zk:
        base = zk.get_storm(topology_key("wordcount", NS))
        assert base is not None and base.component_executors.get("count") == 4
    # back to the executors the later tests expect, without waiting the spec's 30 s
    done = kubectl_squall(c, "rebalance", "wordcount", "-e", "count=2", "-w", "0")
    assert done.returncode == 0, done.stderr

    def count_executors() -> int | None:
        with zk_state(c) as zk:
            base = zk.get_storm(topology_key("wordcount", NS))
        return None if base is None else base.component_executors.get("count")

    wait_for(lambda: count_executors() == 2, 60, what="count back to 2 executors")
    wait_for(lambda: (s := status(c, "wordcount")).get("phase") == "Running"
             and cond(s, "Rebalancing").get("reason") == "Completed", 90, what="the second rebalance to complete")


def test_kubectl_squall_kill_w_waits_as_asked(squall: Cluster, tmp_path: Path) -> None:
    """`kubectl squall kill -w 8` on a topology whose killWaitSecs is 120: the operator's kill
    deactivates, waits 8 s (the annotation on the deleted resource), then removes the workers
    and the resource, long before 120 s."""
    c = squall
    doc = id_pipeline("quick", tmp_path / "out", 0, workers=1, rate=50)
    doc["spec"]["killWaitSecs"] = 120
    apply_doc(c, doc)
    wait_for(lambda: running(c, "quick", 1), 120, what="quick Running 1/1")
    uid = topo(c, "quick")["metadata"]["uid"]
    asked = time.time()
    done = kubectl_squall(c, "kill", "quick", "-w", "8")
    assert done.returncode == 0 and "after 8s" in done.stdout, (done.stdout, done.stderr)

    def killed() -> Any:
        with zk_state(c) as zk:
            base = zk.get_storm(topology_key("quick", NS))
        return base if base is not None and base.status.value == "KILLED" else None

    base = wait_for(killed, 30, what="the kill in ZooKeeper")
    # the due time nimbus stored: 8 s after the request, not killWaitSecs' 120
    assert base.delayed_due_secs is not None and 7 <= base.delayed_due_secs - asked < 30, base.delayed_due_secs - asked
    wait_for(lambda: c.kubectl("get", "topology", "quick", "-n", NS, check=False).returncode != 0, 90,
             what="the resource to be removed")
    assert time.time() - asked < 120
    assert not worker_pods(c, "quick")
    messages = [e["message"] for e in kget(c, "events", "-n", NS)["items"]
                if e["involvedObject"].get("uid") == uid and e["reason"] == "Killing"]
    assert any("in 8s (squall.io/kill-wait-secs)" in m for m in messages), messages


def test_kubectl_delete_is_storms_kill(squall: Cluster) -> None:
    c = squall
    uid = topo(c, "wordcount")["metadata"]["uid"]
    assert "squall.io/kill" in topo(c, "wordcount")["metadata"]["finalizers"]
    t0 = time.monotonic()
    c.kubectl("delete", "topology", "wordcount", "-n", NS, "--wait=false")
    st = wait_for(lambda: (s := status(c, "wordcount")).get("phase") == "Killing" and s, 30, what="phase Killing")
    assert cond(st, "Killing")["status"] == "True"
    assert topo(c, "wordcount")["metadata"].get("deletionTimestamp")
    # workers stay up during killWaitSecs (the message timeout: 30 s) so in-flight tuples finish
    assert len(worker_pods(c, "wordcount")) == 2
    with zk_state(c) as zk:
        base = zk.get_storm(topology_key("wordcount", NS))
        assert base is not None and base.status.value == "KILLED"
    wait_for(lambda: c.kubectl("get", "topology", "wordcount", "-n", NS, check=False).returncode != 0, 120,
             what="the finalizer to be released")
    assert time.monotonic() - t0 >= 25
    assert not worker_pods(c, "wordcount")
    with zk_state(c) as zk:
        assert topology_key("wordcount", NS) not in zk.topologies_with_state()
    reasons_ = [e["reason"] for e in kget(c, "events", "-n", NS)["items"]
                if e["involvedObject"].get("uid") == uid]
    assert {"Killing", "Killed"} <= set(reasons_), reasons_
