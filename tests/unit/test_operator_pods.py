"""Pure builders of the operator: worker pods, node slots, the pod plan and the status."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from squall.models.cluster import (
    Assignment,
    ErrorInfo,
    ExecutorStats,
    StormBase,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.models.v1alpha1 import Topology
from squall_operator import pods
from squall_operator.nimbus import initial_storm_base

pytestmark = pytest.mark.unit

DNS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
CONFIG = pods.WorkerPodConfig(image="squall-worker:0.1.0", zookeeper="zk:2181", zk_root="/squall",
                              search_paths=("/app/topologies",), command=("python", "-m", "squall.worker"),
                              resources={"requests": {"cpu": "100m"}}, env={"A": "1"})


def test_pod_name_is_dns_safe_and_bounded() -> None:
    assert pods.pod_name("wc", WorkerSlot("node-1", 6700)) == "wc-node-1-6700"
    dotted = pods.pod_name("wc", WorkerSlot("ip-10-0-0-1.ec2.internal", 6701))
    assert DNS.match(dotted) and dotted.startswith("wc-ip-10-0-0-1-ec2-internal-6701-")
    long = pods.pod_name("t" * 60, WorkerSlot("n" * 80, 6700))
    assert len(long) <= 63 and DNS.match(long)
    # distinct slots keep distinct names even when cut
    other = pods.pod_name("t" * 60, WorkerSlot("n" * 80, 6701))
    assert other != long and len(other) <= 63



def test_a_slots_pods_differ_by_generation_and_keep_the_slot_in_labels() -> None:
    """A replacement pod gets a name of its own (created while the old one terminates); the slot
    stays readable from the pod's labels and annotation."""
    slot = WorkerSlot("node-1", 6700)
    assert pods.pod_name("wc", slot, "x7k2p") == "wc-node-1-6700-x7k2p"
    long = pods.pod_name("t" * 60, WorkerSlot("n" * 80, 6700), "x7k2p")
    assert len(long) == 63 and DNS.match(long) and long.endswith("-x7k2p")
    assert long != pods.pod_name("t" * 60, WorkerSlot("n" * 80, 6701), "x7k2p")
    with pytest.raises(ValueError, match="generation"):
        pods.pod_name("wc", slot, "Bad_1")
    draws = iter([0, 1, 2, 3, 26, 0, 0, 0, 0, 0])
    assert pods.pod_generation(lambda n: next(draws)) == "bcdf9"
    assert pods.pod_generation(lambda n: next(draws)) == "bbbbb"
    a = pods.worker_pod("wc", "u", "ns", slot, CONFIG, generation="bcdf9")
    b = pods.worker_pod("wc", "u", "ns", slot, CONFIG, generation="bbbbb")
    assert a["metadata"]["name"] != b["metadata"]["name"]
    for pod in (a, b):
        assert pods.pod_view(pod).slot == slot
        assert pod["metadata"]["labels"][pods.LABEL_NODE] == "node-1"
        assert pod["metadata"]["labels"][pods.LABEL_PORT] == "6700"


def test_worker_pod_probes_ask_the_worker_over_http() -> None:
    """Readiness is the worker's /readyz (its ZooKeeper session, endpoint, assignment and loops),
    not a TCP connect to the slot port, which a worker peers cannot find still accepts; liveness
    and startup are /healthz, on the named port `metrics`, with room for a slow start."""
    pod = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701), CONFIG)
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"data": 6701, "metrics": 7701}
    ready, live, start = c["readinessProbe"], c["livenessProbe"], c["startupProbe"]
    assert "tcpSocket" not in ready
    assert ready["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert live["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert start["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert ready["periodSeconds"] == CONFIG.readiness_period_secs and ready["failureThreshold"] == 3
    # a worker gets its whole start-up limit before liveness counts, and a minute of failures after
    assert start["periodSeconds"] * start["failureThreshold"] >= CONFIG.startup_limit_secs
    assert live["periodSeconds"] * live["failureThreshold"] >= 60
    for probe in (ready, live, start):
        assert probe["timeoutSeconds"] >= 3  # /readyz asks ZooKeeper (at most 2 s)
    notes = pod["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/port"] == "7701"
    assert notes["prometheus.io/path"] == "/metrics"
    # another offset moves the port, and the pods are rolled (the template hash changes)
    other = pods.WorkerPodConfig(**{**CONFIG.__dict__, "metrics_port_offset": 100})
    (c2,) = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701), other)["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in c2["ports"]}["metrics"] == 6801
    assert pods.template_hash(other, None) != pods.template_hash(CONFIG, None)


def test_label_values_are_valid() -> None:
    assert pods.label_value("node-1") == "node-1"
    v = pods.label_value("x" * 100)
    assert len(v) <= 63 and v[0].isalnum() and v[-1].isalnum()


def test_worker_pod() -> None:
    pod = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701), CONFIG)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "wc-node-2-6701" and meta["namespace"] == "ns1"
    assert meta["ownerReferences"] == [{
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "name": "wc", "uid": "uid-1",
        "controller": True, "blockOwnerDeletion": True,
    }]
    assert meta["labels"][pods.LABEL_TOPOLOGY] == "wc"
    assert meta["labels"]["squall.io/port"] == "6701"
    assert meta["annotations"][pods.ANNOTATION_SLOT] == "node-2-6701"
    assert pods.worker_selector("wc").items() <= meta["labels"].items()
    assert spec["nodeName"] == "node-2"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["image"] == "squall-worker:0.1.0"
    assert c["command"] == ["python", "-m", "squall.worker"]
    args = c["args"]

    def arg(name: str) -> str:
        return str(args[args.index(name) + 1])

    assert arg("--zookeeper") == "zk:2181" and arg("--root") == "/squall"
    assert arg("--topology") == "wc" and arg("--node") == "node-2" and arg("--port") == "6701"
    assert arg("--host") == "$(POD_IP)" and arg("--search-path") == "/app/topologies"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["A"]["value"] == "1" and env["PYTHONUNBUFFERED"]["value"] == "1"
    # a deleted worker serves its slot for the next pod, within the grace period (30 s)
    assert env["SQUALL_HANDOVER_SECS"]["value"] == "15"
    assert [pods.handover_secs(dataclasses.replace(CONFIG, termination_grace_secs=g)) for g in (30, 60, 16, 5)] \
        == [15, 15, 6, 0]
    assert c["ports"] == [{"name": "data", "containerPort": 6701, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 7701, "protocol": "TCP"}]
    assert arg("--metrics-port") == "7701"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["resources"] == {"requests": {"cpu": "100m"}}
    plain = pods.worker_pod("wc", "u", "ns", WorkerSlot("n", 1), pods.WorkerPodConfig(image="i", zookeeper="z"))
    assert "command" not in plain["spec"]["containers"][0]  # the image's entrypoint
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_worker_pod_is_locked_down() -> None:
    """Non-root, read-only root filesystem, no capability, RuntimeDefault seccomp, no service
    account token, and the topology's CURVE pair from its own Secret (docs/reliability.md)."""
    pod = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701), CONFIG)
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    env = {e["name"]: e for e in c["env"]}
    secret = pods.curve_secret_name("wc", "uid-1")
    assert env["SQUALL_CURVE_PUBLIC_KEY"]["valueFrom"] == {"secretKeyRef": {"name": secret, "key": "public"}}
    assert env["SQUALL_CURVE_SECRET_KEY"]["valueFrom"] == {"secretKeyRef": {"name": secret, "key": "secret"}}
    # CURVE off: no key in the pod
    plain = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701),
                            pods.WorkerPodConfig(image="i", zookeeper="z", curve=False))
    assert not [e for e in plain["spec"]["containers"][0]["env"] if e["name"].startswith("SQUALL_CURVE")]


def test_curve_secret_and_network_policy_belong_to_the_topology() -> None:
    body = pods.curve_secret("wc", "uid-1", "ns1", b"P" * 40, b"S" * 40)
    assert body["kind"] == "Secret" and body["immutable"] is True
    assert body["metadata"]["name"] == pods.curve_secret_name("wc", "uid-1")
    assert body["metadata"]["ownerReferences"] == [pods.owner_reference("wc", "uid-1")]
    assert body["stringData"] == {"public": "P" * 40, "secret": "S" * 40}
    # a resubmission is a new resource (uid): a new Secret, so a new pair
    assert pods.curve_secret_name("wc", "uid-2") != pods.curve_secret_name("wc", "uid-1")
    assert DNS.match(pods.curve_secret_name("t" * 80, "uid-1"))
    policy = pods.network_policy("wc", "uid-1", "ns1")
    sel = pods.worker_selector("wc")
    assert policy["metadata"]["ownerReferences"] == [pods.owner_reference("wc", "uid-1")]
    assert policy["spec"] == {"podSelector": {"matchLabels": sel}, "policyTypes": ["Ingress"],
                              "ingress": [{"from": [{"podSelector": {"matchLabels": sel}}]},
                                          {"ports": [{"protocol": "TCP", "port": "metrics"}]}]}
    # the policy selects exactly the topology's worker pods, and no other topology's
    pod = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("n", 6700), CONFIG)
    assert sel.items() <= pod["metadata"]["labels"].items()
    other = pods.worker_pod("wc2", "uid-3", "ns1", WorkerSlot("n", 6701), CONFIG)
    assert not sel.items() <= other["metadata"]["labels"].items()


def _node(name: str, ready: str = "True", labels: dict[str, str] | None = None,
          taints: list[dict[str, str]] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "addresses": [{"type": "Hostname", "address": name},
                          {"type": "InternalIP", "address": f"10.0.0.{name[-1]}"}],
        },
    }


def test_node_slots() -> None:
    nodes = [
        _node("n1"),
        _node("n2", labels={"squall.io/slots": "2"}),
        _node("n3", ready="Unknown"),
        _node("n4", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
        _node("n5", unschedulable=True),
        _node("n6", labels={"squall.io/slots": "many"}),
        _node("n7", labels={"squall.io/slots": "0"}),
    ]
    out = pods.node_slots(nodes, pods.SlotConfig(default_slots=3, base_port=7000))
    assert out.slots == {"n1": ("10.0.0.1", (7000, 7001, 7002)), "n2": ("10.0.0.2", (7000, 7001))}
    assert set(out.unhealthy) == {"n3", "n4", "n5", "n6"}
    assert "NotReady" in out.unhealthy["n3"] and "unreachable" in out.unhealthy["n4"]
    assert "cordoned" in out.unhealthy["n5"] and "not a slot count" in out.unhealthy["n6"]


def test_node_selector() -> None:
    nodes = [_node("n1", labels={"squall": "yes"}), _node("n2"), _node("n3", ready="False")]
    out = pods.node_slots(nodes, pods.SlotConfig(node_selector={"squall": "yes"}, default_slots=1))
    assert list(out.slots) == ["n1"] and out.unhealthy == {}


def _view(name: str, slot: WorkerSlot | None, phase: str = "Running", ready: bool = True,
          deleting: bool = False) -> pods.PodView:
    return pods.PodView(name=name, slot=slot, node=slot.node if slot else "n1", phase=phase,
                        ready=ready, deleting=deleting)


def test_plan_pods() -> None:
    a, b, c, d = (WorkerSlot("n1", 6700), WorkerSlot("n2", 6700), WorkerSlot("n3", 6700),
                  WorkerSlot("n1", 6701))
    existing = [
        _view("pa", a),
        _view("pb", b, phase="Failed"),
        _view("pc", c),  # no longer assigned, node down
        _view("pd", d, deleting=True),  # assigned again while the old pod terminates
    ]
    plan = pods.plan_pods([a, b, d], existing, unhealthy_nodes=["n3"])
    # a new pod (a name of its own) at once for d, whose old pod terminates, and for b, whose
    # finished pod is deleted in the same round
    assert plan.create == (d, b)
    assert pods.plan_pods([a, b, d], existing[:3], unhealthy_nodes=["n3"]).create == (d, b)
    assert pods.plan_pods([a, d], [existing[0], _view("pd2", d), existing[3]]).create == ()
    # a pod terminating on a node that is gone still covers its slot: no kubelet would run another
    assert pods.plan_pods([d], [existing[3]], unhealthy_nodes=["n1"]).create == ()
    assert set(plan.delete) == {"pb", "pc"}
    assert "failed" in plan.delete["pb"] and "no longer assigned" in plan.delete["pc"]
    assert plan.force == {"pc"}
    # a pod on a dead node stuck terminating is forced
    plan = pods.plan_pods([], [_view("pc", c, deleting=True)], unhealthy_nodes=["n3"])
    assert plan.force == {"pc"}


def test_pod_view() -> None:
    pod = {
        "metadata": {"name": "wc-n1-6700", "annotations": {pods.ANNOTATION_SLOT: "n1-6700"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"restartCount": 2}]},
    }
    v = pods.pod_view(pod)
    assert v == pods.PodView("wc-n1-6700", WorkerSlot("n1", 6700), "n1", "Running", True, False, 2, "")
    assert pods.pod_view({"metadata": {"name": "x"}}).slot is None


TOPO = Topology.model_validate({
    "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "wc"},
    "spec": {"numWorkers": 2, "spouts": [{"name": "s", "class": "m:S"}],
             "bolts": [{"name": "b", "class": "m:B", "parallelism": 2, "numTasks": 4,
                        "inputs": [{"component": "s"}]}]},
})


def _assignment(base: StormBase, slots: list[WorkerSlot]) -> Assignment:
    from squall_operator.nimbus import needed_executors

    ex = needed_executors(base)
    return Assignment(executor_slots={f"{e[0]}-{e[1]}": slots[i % len(slots)].key() for i, e in enumerate(ex)})


def test_status_running_with_stats_and_errors() -> None:
    base = initial_storm_base(TOPO, 1000.0)
    a, b = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
    assignment = _assignment(base, [a, b])
    beats = {
        a: WorkerHeartbeat(time_secs=1010, uptime_secs=5, executors={
            e: ExecutorStats(component=("s" if e == "7-7" else "b"), emitted=10, acked=8,
                             latency_ms_mean=2.0, latency_samples=8, latency_ms_p99=5.0)
            for e, s in assignment.executor_slots.items() if s == a.key()}),
    }
    views = [_view("wc-n1-6700", a), _view("wc-n2-6700", b)]
    err = ErrorInfo(component="b", task=3, time_secs=1005, error="Traceback...\nValueError: boom")
    st = pods.build_status(base=base, assignment=assignment, heartbeats=beats, pods=views,
                           errors={"b": err, "s": None}, now=1060.0, generation=3)
    assert st["phase"] == "Running" and st["workers"] == "2/2"
    assert st["readyWorkers"] == 2 and st["desiredWorkers"] == 2
    # s:1 + b:2 + __acker:2
    assert st["executors"] == 5 and st["tasks"] == 1 + 4 + 2
    assert st["observedGeneration"] == 3 and st["stormStatus"] == "ACTIVE"
    assert st["launchTime"] == "1970-01-01T00:16:40Z" and st["uptimeSecs"] == 60.0
    assert st["slots"] == {"n1-6700": "wc-n1-6700", "n2-6700": "wc-n2-6700"}
    assert st["components"]["b"]["lastError"] == "ValueError: boom"
    assert st["components"]["b"]["executors"] == 2 and st["components"]["b"]["tasks"] == 4
    total_emitted = sum(c["emitted"] for c in st["components"].values())
    assert total_emitted == 10 * len(beats[a].executors)
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Active"]["status"] == "True"
    assert conds["Valid"]["status"] == "True"


def test_status_pending_inactive_and_transition_times() -> None:
    base = initial_storm_base(TOPO, 1000.0)
    a, b = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700)
    assignment = _assignment(base, [a, b])
    st = pods.build_status(base=base, assignment=assignment, heartbeats={},
                           pods=[_view("p1", a), _view("p2", b, ready=False)], errors={},
                           now=1001.0, generation=1)
    assert st["phase"] == "Pending" and st["workers"] == "1/2"
    inactive = base.model_copy(update={"status": TopologyStatus.INACTIVE})
    st2 = pods.build_status(base=inactive, assignment=assignment, heartbeats={},
                            pods=[_view("p1", a), _view("p2", b)], errors={}, now=1005.0,
                            generation=2, previous=st)
    assert st2["phase"] == "Inactive"
    c1 = {c["type"]: c for c in st["conditions"]}
    c2 = {c["type"]: c for c in st2["conditions"]}
    assert c2["Valid"]["lastTransitionTime"] == c1["Valid"]["lastTransitionTime"]
    assert c2["Ready"]["lastTransitionTime"] != c1["Ready"]["lastTransitionTime"]
    assert c2["Active"]["status"] == "False"


def test_status_rebalance_phases() -> None:
    base = initial_storm_base(TOPO, 1000.0)
    a, b, c = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700), WorkerSlot("n3", 6700)
    two = _assignment(base, [a, b])
    rebalancing = base.model_copy(update={
        "status": TopologyStatus.REBALANCING, "prev_status": TopologyStatus.ACTIVE,
        "delayed_action": "DO_REBALANCE", "delayed_due_secs": 1030.0, "rebalance_num_workers": 3,
    })
    views2 = [_view("pa", a), _view("pb", b)]
    st = pods.build_status(base=rebalancing, assignment=two, heartbeats={}, pods=views2, errors={},
                           now=1001.0, generation=2)
    cond = {x["type"]: x for x in st["conditions"]}["Rebalancing"]
    assert st["phase"] == "Rebalancing" and cond["status"] == "True" and cond["reason"] == "Waiting"
    assert "numWorkers 2 -> 3" in cond["message"]
    done = base.model_copy(update={"num_workers": 3})
    three = _assignment(done, [a, b, c])
    st2 = pods.build_status(base=done, assignment=three, heartbeats={}, pods=views2, errors={},
                            now=1031.0, generation=2, previous=st)
    cond2 = {x["type"]: x for x in st2["conditions"]}["Rebalancing"]
    assert cond2["status"] == "True" and cond2["reason"] == "Reassigned"
    assert st2["phase"] == "Pending" and st2["workers"] == "2/3"
    st3 = pods.build_status(base=done, assignment=three, heartbeats={},
                            pods=[*views2, _view("pc", c)], errors={}, now=1033.0, generation=2,
                            previous=st2)
    cond3 = {x["type"]: x for x in st3["conditions"]}["Rebalancing"]
    assert cond3["status"] == "False" and cond3["reason"] == "Completed"
    assert st3["phase"] == "Running" and st3["workers"] == "3/3"


def test_status_failed_and_killing() -> None:
    st = pods.build_status(base=None, assignment=None, heartbeats={}, pods=[], errors={}, now=1.0,
                           generation=1, problem="spec.bolts[0].inputs[0].component: 'x' — unknown")
    assert st["phase"] == "Failed" and "unknown" in st["message"]
    valid = {c["type"]: c for c in st["conditions"]}["Valid"]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    base = initial_storm_base(TOPO, 1000.0).model_copy(update={
        "status": TopologyStatus.KILLED, "delayed_action": "REMOVE", "delayed_due_secs": 1030.0})
    st = pods.build_status(base=base, assignment=None, heartbeats={}, pods=[], errors={}, now=1001.0,
                           generation=1, deleting=True)
    assert st["phase"] == "Killing"
    killing = {c["type"]: c for c in st["conditions"]}["Killing"]
    assert killing["status"] == "True" and "1970-01-01T00:17:10Z" in killing["message"]


def test_throughput_rates_between_status_writes() -> None:
    # the first sample gives no rate (the columns stay blank)
    first = pods.throughput(None, acked=100, failed=0, now=1000.0)
    assert first == {"rateSample": {"timeSecs": 1000.0, "acked": 100, "failed": 0}}
    # within the window: the previous rates and sample stay, so the status does not change
    assert pods.throughput(first, acked=150, failed=1, now=1004.9) == first
    # after it: (count now - count then) / seconds between, and a new sample
    second = pods.throughput(first, acked=1100, failed=20, now=1010.0)
    assert second["ackedPerSec"] == 100.0 and second["failedPerSec"] == 2.0
    assert second["rateSample"] == {"timeSecs": 1010.0, "acked": 1100, "failed": 20}
    assert pods.throughput(second, acked=1101, failed=20, now=1013.0) == second
    third = pods.throughput(second, acked=1101, failed=20, now=1016.0)
    assert third["ackedPerSec"] == 0.2 and third["failedPerSec"] == 0.0
    # a count that went down (workers restarted): a new sample, the last rates kept
    reset = pods.throughput(third, acked=5, failed=0, now=1030.0)
    assert reset["ackedPerSec"] == 0.2 and reset["rateSample"]["acked"] == 5
    # idle: the rates reach 0 once, then nothing changes however long it stays idle
    idle = pods.throughput(reset, acked=5, failed=0, now=1040.0)
    assert idle["ackedPerSec"] == 0.0 and idle["failedPerSec"] == 0.0
    assert pods.throughput(idle, acked=5, failed=0, now=5000.0) == idle
    # traffic again after long idle: no rate averaged over the idle hour, a new sample first
    woke = pods.throughput(idle, acked=505, failed=0, now=5000.0)
    assert woke["ackedPerSec"] == 0.0 and woke["rateSample"]["timeSecs"] == 5000.0
    assert pods.throughput(woke, acked=1505, failed=0, now=5010.0)["ackedPerSec"] == 100.0
    # a custom window
    assert pods.throughput(first, acked=200, failed=0, now=1001.0, window=1.0)["ackedPerSec"] == 100.0


def test_status_scale_subresource_fields_and_throughput() -> None:
    from squall_operator.crd import TopologyStatusModel

    base = initial_storm_base(TOPO, 1000.0)
    a, b, c = WorkerSlot("n1", 6700), WorkerSlot("n2", 6700), WorkerSlot("n3", 6700)
    assignment = _assignment(base, [a, b])

    def beats(spout_acked: int, spout_failed: int) -> dict[WorkerSlot, WorkerHeartbeat]:
        out: dict[WorkerSlot, WorkerHeartbeat] = {}
        for slot in (a, b):
            out[slot] = WorkerHeartbeat(time_secs=1010, uptime_secs=5, executors={
                e: (ExecutorStats(component="s", acked=spout_acked, failed=spout_failed)
                    if e == "1-1" else ExecutorStats(component="b", acked=10_000))
                for e, s in assignment.executor_slots.items() if s == slot.key()})
        return out

    views = [dataclasses.replace(_view("wc-n1-6700", a), image="img:1"),
             dataclasses.replace(_view("wc-n2-6700", b), image="img:2")]
    st = pods.build_status(base=base, assignment=assignment, heartbeats=beats(100, 1), pods=views,
                           errors={}, now=1060.0, generation=3)
    assert st["replicas"] == 2
    assert st["selector"] == "app.kubernetes.io/name=squall-worker,squall.io/topology=wc"
    assert st["image"] == "img:1, img:2"
    assert "ackedPerSec" not in st and st["rateSample"]["acked"] == 100
    # the spouts' acked tuple trees count; the bolts' acks do not
    st2 = pods.build_status(base=base, assignment=assignment, heartbeats=beats(600, 11), pods=views,
                            errors={}, now=1070.0, generation=3, previous=st)
    assert st2["ackedPerSec"] == 50.0 and st2["failedPerSec"] == 1.0
    TopologyStatusModel.model_validate(st2)
    # scaled to 3: the new slot has no pod yet, so 2 replicas run
    three = _assignment(base, [a, b, c])
    st3 = pods.build_status(base=base.model_copy(update={"num_workers": 3}), assignment=three,
                            heartbeats={}, pods=views, errors={}, now=1080.0, generation=4, previous=st2)
    assert st3["replicas"] == 2 and st3["desiredWorkers"] == 3
    # not yet submitted, or an invalid spec: no worker runs, the selector is known from the name
    for problem in (None, "spec.numWorkers: bad"):
        st4 = pods.build_status(base=None, assignment=None, heartbeats={}, pods=[], errors={}, now=1.0,
                                generation=1, problem=problem, topology="wc")
        assert st4["replicas"] == 0 and st4["selector"] == st["selector"]
        TopologyStatusModel.model_validate(st4)


# --- per-topology worker settings ------------------------------------------------------------

WORKER = {
    "image": "team-a/wordcount:2",
    "imagePullPolicy": "Always",
    "imagePullSecrets": [{"name": "regcred"}],
    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": 1073741824}},
    "env": [{"name": "MODE", "value": "fast"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
    "nodeSelector": {"disk": "ssd"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "stream", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "serviceAccountName": "wordcount",
    "volumes": [{"name": "models", "configMap": {"name": "models"}}],
    "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
    "labels": {"team": "a", pods.LABEL_TOPOLOGY: "spoofed"},
    "annotations": {"note": "x"},
}


def _worker(**over: Any) -> Any:
    from squall.models.v1alpha1 import WorkerSpec

    return WorkerSpec.model_validate({**WORKER, **over})


def test_worker_settings_are_laid_under_the_operators_own() -> None:
    pod = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701), CONFIG, _worker())
    spec, meta = pod["spec"], pod["metadata"]
    (c,) = spec["containers"]
    assert c["image"] == "team-a/wordcount:2" and c["imagePullPolicy"] == "Always"
    assert c["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": 1073741824}}
    names = [e["name"] for e in c["env"]]
    # the operator's variables first, the chart's, then the topology's
    assert names == ["POD_IP", "POD_NAME", "NODE_NAME", "PYTHONUNBUFFERED", "SQUALL_HANDOVER_SECS", "SQUALL_CURVE_PUBLIC_KEY",
                     "SQUALL_CURVE_SECRET_KEY", "A", "MODE", "TOKEN"]
    assert c["env"][-1] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    assert c["envFrom"] == [{"prefix": "APP_", "configMapRef": {"name": "settings"}}]
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"},
                                 {"name": "models", "mountPath": "/models", "readOnly": True}]
    assert spec["volumes"] == [{"name": "tmp", "emptyDir": {}}, {"name": "models", "configMap": {"name": "models"}}]
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert spec["serviceAccountName"] == "wordcount" and "automountServiceAccountToken" not in spec
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    # the operator's own parts stay
    assert spec["nodeName"] == "node-2" and c["securityContext"]["readOnlyRootFilesystem"] is True
    assert meta["labels"]["team"] == "a" and meta["labels"][pods.LABEL_TOPOLOGY] == "wc"
    assert meta["annotations"]["note"] == "x" and meta["annotations"][pods.ANNOTATION_SLOT] == "node-2-6701"
    # without settings: the chart's defaults
    plain = pods.worker_pod("wc", "uid-1", "ns1", WorkerSlot("node-2", 6701), CONFIG)
    assert plain["spec"]["containers"][0]["image"] == "squall-worker:0.1.0"
    assert plain["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    assert plain["spec"]["automountServiceAccountToken"] is False


def test_template_hash_changes_exactly_with_the_pod_settings() -> None:
    base = pods.template_hash(CONFIG, None)
    assert pods.template_hash(CONFIG, None) == base
    assert pods.template_hash(CONFIG, _worker()) == pods.template_hash(CONFIG, _worker())
    assert pods.template_hash(CONFIG, _worker()) != pods.template_hash(CONFIG, _worker(image="team-a/wordcount:3"))
    # a new default image from the chart (helm upgrade) rolls too
    import dataclasses

    assert pods.template_hash(dataclasses.replace(CONFIG, image="squall-worker:0.2.0"), None) != base
    pod = pods.worker_pod("wc", "u", "ns", WorkerSlot("n", 6700), CONFIG, _worker())
    view = pods.pod_view(pod)
    assert view.template == pods.template_hash(CONFIG, _worker()) and view.image == "team-a/wordcount:2"


@pytest.mark.parametrize(("over", "where"), [
    ({"imagePullPolicy": "Sometimes"}, "imagePullPolicy"),
    ({"resources": {"requests": {"cpu": "lots"}}}, "resources.requests.cpu"),
    ({"resources": {"requests": {"cpu": -1}}}, "resources.requests.cpu"),
    ({"env": [{"name": "POD_IP", "value": "x"}]}, "env.0.name"),
    ({"env": [{"name": "1 bad", "value": "x"}]}, "env.0.name"),
    ({"volumes": [{"name": "tmp", "emptyDir": {}}]}, "volumes.0.name"),
    ({"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, "volumeMounts"),
    ({"tolerations": [{"operator": "Maybe"}]}, "tolerations.0.operator"),
    ({"serviceAccountName": "Not_Valid"}, "serviceAccountName"),
    ({"image": "has space"}, "image"),
    ({"hostNetwork": True}, "hostNetwork"),
])
def test_invalid_worker_settings_are_refused_naming_the_field(over: dict[str, Any], where: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        _worker(**over)
    locs = [".".join(str(p) for p in e["loc"]) for e in info.value.errors()]
    assert any(where in loc or (where == "volumeMounts" and "volumeMounts" in str(info.value)) for loc in locs), locs


def _pod_with(status: dict[str, Any], name: str = "wc-n1-6700") -> pods.PodView:
    pod = pods.worker_pod("wc", "u", "ns", WorkerSlot("n1", 6700), CONFIG)
    pod["metadata"]["name"] = name
    pod["status"] = status
    return pods.pod_view(pod)


def test_pod_problems_name_the_reason() -> None:
    pull = _pod_with({"phase": "Pending", "containerStatuses": [{"name": "worker", "restartCount": 0, "state": {
        "waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope:1\""}}}]})
    crash = _pod_with({"phase": "Running", "containerStatuses": [{"name": "worker", "restartCount": 4, "state": {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": 1, "message": "Traceback\nModuleNotFoundError: No module named 'x'"}}}]},
        name="wc-n2-6700")
    rejected = _pod_with({"phase": "Failed", "reason": "OutOfcpu", "message": "Pod Node didn't have enough resource: cpu"},
                         name="wc-n3-6700")
    creating = _pod_with({"phase": "Pending", "containerStatuses": [{"name": "worker", "state": {
        "waiting": {"reason": "ContainerCreating"}}}]}, name="wc-n4-6700")
    problems = pods.pod_problems([crash, rejected, pull, creating])
    assert [p.reason for p in problems] == ["ImagePullBackOff", "CrashLoopBackOff", "PodRejected"]
    assert "image 'squall-worker:0.1.0' cannot be pulled" in problems[0].message
    assert "4 restarts" in problems[1].message and "exit code 1" in problems[1].message
    assert "ModuleNotFoundError" in problems[1].message
    assert "OutOfcpu" in problems[2].message and "n1" in problems[2].message
    assert pods.pod_problems([creating]) == []


def test_status_state_shows_the_blocking_reason() -> None:
    topo = Topology.model_validate({"metadata": {"name": "wc"}, "spec": {
        "numWorkers": 1, "spouts": [{"name": "s", "class": "m:S"}]}})
    base = initial_storm_base(topo, 100.0)
    blocker = pods.Problem("ImagePullBackOff", "pod wc-n1-6700: image 'nope' cannot be pulled")
    st = pods.build_status(base=base, assignment=None, heartbeats={}, pods=[], errors={}, now=110.0,
                           generation=1, blockers=[blocker])
    assert st["phase"] == "Pending" and st["state"] == "ImagePullBackOff"
    assert "cannot be pulled" in st["message"]
    health = next(c for c in st["conditions"] if c["type"] == "WorkersHealthy")
    assert health["status"] == "False" and health["reason"] == "ImagePullBackOff"
    ok = pods.build_status(base=base, assignment=None, heartbeats={}, pods=[], errors={}, now=111.0,
                           generation=1, previous=st)
    assert ok["state"] == "Pending" and ok["message"] == ""
    assert next(c for c in ok["conditions"] if c["type"] == "WorkersHealthy")["status"] == "True"


# --- placement: node filter ------------------------------------------------------------------------


def _knode(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
           allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []},
            "status": {"allocatable": allocatable or {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "value": "stream", "effect": "NoSchedule"}


@pytest.mark.parametrize(("node", "worker", "requests", "fit", "why"), [
    (_knode("n"), None, {}, None, ""),
    (_knode("n", taints=[CONTROL_PLANE]), None, {}, 0, "taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated"),
    (_knode("n", taints=[{**DEDICATED, "effect": "PreferNoSchedule"}]), None, {}, None, ""),
    (_knode("n", taints=[DEDICATED]), {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "stream"}]}, {}, None, ""),
    (_knode("n", taints=[DEDICATED]), {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch"}]}, {}, 0, "taint dedicated=stream"),
    (_knode("n", taints=[DEDICATED, CONTROL_PLANE]), {"tolerations": [{"operator": "Exists"}]}, {}, None, ""),
    (_knode("n", taints=[DEDICATED]), {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]}, {}, 0, "dedicated"),
    (_knode("n", labels={"disk": "ssd"}), {"nodeSelector": {"disk": "ssd"}}, {}, None, ""),
    (_knode("n", labels={"disk": "hdd"}), {"nodeSelector": {"disk": "ssd"}}, {}, 0, "nodeSelector disk=ssd"),
    (_knode("n", labels={"zone": "a", "gen": "5"}), {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                              {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]},
                                                    {"key": "spot", "operator": "DoesNotExist"}]}]}}}}, {}, None, ""),
    (_knode("n", labels={"zone": "a"}), {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]}}}}, {}, 0,
     "required node affinity"),
    (_knode("n"), {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}}, {}, None, ""),
    (_knode("n"), None, {"cpu": "1500m", "memory": "1Gi"}, 2, ""),
    (_knode("n"), None, {"cpu": "8"}, 0, "a worker requests cpu 8, the node has 4 allocatable"),
    (_knode("n"), None, {"nvidia.com/gpu": "1"}, 0, "nvidia.com/gpu"),
])
def test_node_fit(node: dict[str, Any], worker: dict[str, Any] | None, requests: dict[str, str],
                  fit: int | None, why: str) -> None:
    from squall.models.v1alpha1 import WorkerSpec

    spec = WorkerSpec.model_validate(worker) if worker is not None else None
    got_fit, got_why = pods.node_fit(node, spec, requests)
    assert got_fit == fit and why in got_why, (got_fit, got_why)


def test_allowed_slots_follow_the_node_filter_and_requests() -> None:
    from squall.models.v1alpha1 import WorkerSpec

    nodes = [_knode("cp", taints=[CONTROL_PLANE]), _knode("n1"), _knode("n2", allocatable={"cpu": "1"})]
    offered = pods.node_slots(nodes, pods.SlotConfig(default_slots=3))
    worker = WorkerSpec.model_validate({"resources": {"requests": {"cpu": "500m"}}})
    requests = pods.worker_requests(CONFIG, worker)
    assert requests == {"cpu": "500m"}
    allowed, refused = pods.allowed_slots(nodes, offered, worker, requests)
    assert allowed == {WorkerSlot("n1", p) for p in (6700, 6701, 6702)} | {WorkerSlot("n2", p) for p in (6700, 6701)}
    assert set(refused) == {"cp"} and "control-plane" in refused["cp"]
    # the chart's default resources count when the topology sets none; a limit counts as request
    assert pods.worker_requests(CONFIG, None) == {"cpu": "100m"}
    limits_only = WorkerSpec.model_validate({"resources": {"limits": {"memory": "1Gi"}}})
    assert pods.worker_requests(CONFIG, limits_only) == {"memory": "1Gi"}


def test_kubelet_refusal_is_a_pod_problem_but_eviction_is_not() -> None:
    refused = _pod_with({"phase": "Failed", "reason": "NodeAffinity", "message": "Predicate NodeAffinity failed"})
    evicted = _pod_with({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}, name="wc-n2-6700")
    assert pods.refused_by_kubelet(refused) and not pods.refused_by_kubelet(evicted)
    assert [p.reason for p in pods.pod_problems([refused, evicted])] == ["PodRejected"]
