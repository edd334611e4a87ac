"""The chart's NetworkPolicy, enforced on the real nodes (docs/reliability.md, "Pod lockdown").

The real nodes run a NetworkPolicy agent each (kube-network-policies, tests/k8s/go/netpol;
realnode.py hands it the first packet of every connection to or from its node's pods). helm/squall
is installed with its defaults except the word count's image for the workers and ZooKeeper on an
emptyDir; the word count from the example file runs with its two workers on the two nodes, and its
Topology's policy (`wordcount-workers`: ingress from its own workers on any port, from anywhere on
the HTTP port `metrics`) is what the agents enforce. Checked with real TCP connections from pods:

- a plain pod of the worker image, not one of the topology's workers, gets no connection to either
  worker's data port (its SYNs are dropped: a timeout, not a refusal), while it does reach the
  same workers' `metrics` port: the path is there, the policy closes the data port;
- a pod carrying the topology's worker labels (the kind the policy admits) reaches both data ports;
- the agents of the workers' nodes counted the drops, and the word count keeps acking sentences
  throughout, its workers reaching each other across the nodes through the same agents.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import chart_release, wait_for
from .conftest import pod_ready as _ready
from .realnode import RealNodeCluster
from .test_chart_real_nodes import EXAMPLE, UID, WORKER_IMAGE, Release

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

TOPOLOGY = "wordcount"
WORKER_LABELS = {"app.kubernetes.io/name": "squall-worker", "squall.io/topology": TOPOLOGY}
CONNECT_TIMEOUT = 3.0

# run in a probe pod: one TCP connect per "host:port" argument, a JSON line of outcomes
PROBE = """
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=%s).close()
        out[target] = "connected"
    except socket.timeout:
        out[target] = "timeout"
    except OSError as e:
        out[target] = "error: %%s" %% e
print(json.dumps(out))
""" % CONNECT_TIMEOUT


@pytest.fixture(scope="module")
def netpol_release(real_cluster: RealNodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    r = Release(real_cluster, "squall-netpol", tmp_path_factory.mktemp("netpol"))
    with chart_release(real_cluster, r.ns, "zookeeper.persistence.enabled=false",
                       "worker.image.repository=squall-wordcount"):
        yield r


def _probe_pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod of the worker image that only waits; the probes run in it with `kubectl exec`."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID},
            "containers": [{
                "name": "probe", "image": WORKER_IMAGE, "imagePullPolicy": "Never",
                "command": ["python", "-c", "import time; time.sleep(3600)"],
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def _connect(r: Release, pod: str, targets: list[str]) -> dict[str, str]:
    out = r.kubectl("exec", pod, "--", "python", "-c", PROBE, *targets, timeout=60).stdout
    result: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return result


def _port(pod: dict[str, Any], name: str) -> int:
    return next(int(p["containerPort"]) for c in pod["spec"]["containers"] for p in c.get("ports") or []
                if p.get("name") == name)


def _acked(r: Release) -> int:
    return int((r.status(TOPOLOGY).get("components") or {}).get("sentences", {}).get("acked", 0))


def test_only_the_topologys_own_workers_reach_its_worker_ports(netpol_release: Release) -> None:
    r, c = netpol_release, netpol_release.c
    r.kubectl("apply", "-f", str(EXAMPLE))
    wait_for(lambda: r.running(TOPOLOGY, 2), 240, interval=2, what=f"{TOPOLOGY} Running 2/2")
    workers = [p for p in r.workers(TOPOLOGY, live=True) if _ready(p)]
    assert sorted(p["spec"]["nodeName"] for p in workers) == ["node-1", "node-2"], workers
    policy = r.get("networkpolicy", f"{TOPOLOGY}-workers")["spec"]
    assert policy["podSelector"]["matchLabels"] == WORKER_LABELS, policy
    wait_for(lambda: _acked(r) > 20, 120, interval=1, what="acked sentences in the status")

    data = [f"{p['status']['podIP']}:{_port(p, 'data')}" for p in workers]
    metrics = [f"{p['status']['podIP']}:{_port(p, 'metrics')}" for p in workers]
    # both probes on node-1: one worker is on the same node (bridged), the other across (routed)
    r.apply(_probe_pod("stranger", "node-1", {"app": "netpol-stranger"}))
    r.apply(_probe_pod("member", "node-1", WORKER_LABELS))
    for name in ("stranger", "member"):
        wait_for(lambda: _ready(r.get("pod", name)), 120, interval=1, what=f"probe pod {name} Ready")

    before = {n: c.netpol_verdicts(n) for n in c.nodes}
    acked_before = _acked(r)
    t0 = time.monotonic()
    stranger = _connect(r, "stranger", data + metrics)
    print(f"stranger: {stranger} ({time.monotonic() - t0:.1f}s)")
    assert {stranger[t] for t in data} == {"timeout"}, f"the data ports let a stranger in: {stranger}"
    assert {stranger[t] for t in metrics} == {"connected"}, f"the metrics ports are not reachable: {stranger}"
    after = {n: c.netpol_verdicts(n) for n in c.nodes}
    for p in workers:  # each SYN is judged by the agent of the worker's node
        node = p["spec"]["nodeName"]
        assert after[node]["drop"] > before[node]["drop"], (node, before, after)

    # the member's first SYN may beat its address to the agents (no NRI with containerd 1.6):
    # TCP sends it again, and the next connect is judged with the pod known
    def member_connected() -> dict[str, str] | None:
        m = _connect(r, "member", data)
        return m if set(m.values()) == {"connected"} else None

    member = wait_for(member_connected, 30, interval=1, what="the member pod connected to both data ports")
    print(f"member: {member}")

    wait_for(lambda: _acked(r) > acked_before + 20, 60, interval=1,
             what="the word count acking sentences after the probes")
    verdicts = {n: c.netpol_verdicts(n) for n in c.nodes}
    print(f"agents' verdicts: {verdicts}")
    assert all(v["accept"] > 0 for v in verdicts.values()), verdicts
    # the release's teardown removes the word count (Storm's kill) and the namespace with the probes

