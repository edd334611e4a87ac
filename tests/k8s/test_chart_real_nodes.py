"""The chart as a user installs it, on real nodes, and the operator's end-to-end scenarios there.

helm/squall is installed once for the module with its default values except the chart-wide worker
image (the word count's, built from examples/wordcount/Dockerfile), no CPU request per worker (the
2-core nodes run several; `chart_release`), a storage class served by a
static local PersistentVolume for ZooKeeper, and the operator pinned to node-1 (so that failing
node-2 leaves ZooKeeper and the operator alone). The operator, ZooKeeper and every worker run in
containers from the images scripts/k8s-images built, non-root with read-only root filesystems; the
operator reaches ZooKeeper by its Service name through CoreDNS and kube-proxy.

The tests run in file order on that release: the word count from the example file, deactivate /
activate, invalid specs, rebalance 2 -> 3 workers with every message id acked, two topologies with
two images side by side and an image roll with every id acked, the operator killed mid-rebalance, a
failed node (kubelet, containerd and containers killed), and `kubectl delete` with the finalizer's
wait. Also: ZooKeeper's digest ACLs (on by default) refuse a client without the chart's
credentials, and the chaos run: a worker pod deleted every 20 s under a steady acked load, measured
with bench/chaos.py's figures (SQUALL_K8S_CHAOS_MINUTES makes it longer; docs/reliability.md). The message-id pipeline (tests/integration/topologies/engine_components.py) is not in any
image: its module comes as a ConfigMap volume on PYTHONPATH, and its spout writes the acked ids to
a hostPath folder the test reads (the nodes share this machine's file system).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from loadfile import load_file

from .conftest import CHART, chart_release, kget, wait_for
from .conftest import pod_ready as _ready
from .realnode import RealNodeCluster

# the first test's setup starts the cluster and installs the release; each scenario waits for pods
# to start in containers on a loaded 2-core machine
pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
EXAMPLE = REPO / "examples" / "wordcount" / "topology.yaml"
COMPONENTS = REPO / "tests" / "integration" / "topologies" / "engine_components.py"
WORKER_IMAGE = "squall-worker:0.1.0"
WORDCOUNT_IMAGE = "squall-wordcount:0.1.0"
UID = 10001  # the images' user


class Release:
    def __init__(self, c: RealNodeCluster, ns: str, tmp: Path) -> None:
        self.c, self.ns, self.tmp = c, ns, tmp

    def kubectl(self, *args: str, **kw: Any) -> Any:
        return self.c.kubectl("-n", self.ns, *args, **kw)

    def get(self, *args: str) -> Any:
        return kget(self.c, "-n", self.ns, *args)

    def status(self, name: str) -> dict[str, Any]:
        return self.get("topology", name).get("status") or {}

    def running(self, name: str, workers: int) -> dict[str, Any] | None:
        st = self.status(name)
        if st.get("phase") == "Running" and st.get("workers") == f"{workers}/{workers}":
            return st
        return None

    def reasons(self, name: str) -> list[str]:
        items = self.get("events", "--field-selector", f"involvedObject.name={name}")["items"]
        return [e["reason"] for e in sorted(items, key=lambda e: e["metadata"]["creationTimestamp"])]

    def workers(self, name: str, live: bool = False) -> list[dict[str, Any]]:
        pods = self.get("pods", "-l", f"squall.io/topology={name}")["items"]
        return [p for p in pods if not (live and p["metadata"].get("deletionTimestamp"))]

    def apply(self, doc: dict[str, Any], check: bool = True) -> Any:
        return self.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=check)

    def delete_and_wait_gone(self, name: str, timeout: float = 150) -> None:
        self.kubectl("delete", "topology", name, "--wait=false", "--ignore-not-found")
        wait_for(lambda: self.kubectl("get", "topology", name, check=False).returncode != 0, timeout,
                 interval=1, what=f"topology {name} to be removed")

    def acked(self, name: str) -> int:
        return int((self.status(name).get("components") or {}).get("ids", {}).get("acked", 0))

    def out_dir(self, name: str) -> Path:
        """A folder the id pipeline's spout writes to (hostPath: the nodes share this machine)."""
        d = self.tmp / name
        d.mkdir(mode=0o755)
        os.chown(d, UID, UID)
        return d

    def id_pipeline(self, name: str, out: Path, count: int, workers: int = 2, rate: float = 150,
                    image: str = WORKER_IMAGE) -> dict[str, Any]:
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
                "config": {"test.count": count, "test.rate": rate, "test.out": "/out"},
                "worker": {
                    "image": image,
                    "env": [{"name": "PYTHONPATH", "value": "/components:/app"}],
                    "volumes": [{"name": "components", "configMap": {"name": "e2e-components"}},
                                {"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}],
                    "volumeMounts": [{"name": "components", "mountPath": "/components", "readOnly": True},
                                     {"name": "out", "mountPath": "/out"}],
                },
                "spouts": [{"name": "ids", "class": f"{comps}:IdSpout", "parallelism": 1}],
                "bolts": [
                    {"name": "pass", "class": f"{comps}:PassBolt", "parallelism": 2,
                     "inputs": [{"component": "ids", "grouping": "shuffle"}]},
                    {"name": "sink", "class": f"{comps}:SinkBolt", "parallelism": 2,
                     "inputs": [{"component": "pass", "grouping": "fields", "fields": ["id"]}]},
                ],
            },
        }

    def all_ids_acked(self, name: str, out: Path, n: int, timeout: float = 300) -> dict[str, Any]:
        """Waits for the spout's `done` file, removes the topology (the spout writes its summary
        when it closes) and checks that every id 0..n-1 was acked. Returns the summary."""
        wait_for(lambda: list(out.glob("spout-*.done")), timeout, interval=1, what=f"every message id of {name} acked")
        self.delete_and_wait_gone(name)
        files = sorted(out.glob("spout-*.json"))
        assert len(files) == 1, files
        summary: dict[str, Any] = json.loads(files[0].read_text())
        missing = set(range(n)) - set(summary["acked"])
        assert not missing, f"{len(missing)} message ids never acked, e.g. {sorted(missing)[:10]}"
        assert set(summary["acked"]) <= set(range(n)), "the spout acked ids it never emitted"
        return summary


def _cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((x for x in st.get("conditions") or [] if x["type"] == type_), {})


@contextlib.contextmanager
def real_release(real_cluster: RealNodeCluster, tmp: Path) -> Iterator[Release]:
    """The chart on the real nodes as this module describes: the session fixture `release`
    (conftest.py), shared with the other modules that ask for it by name."""
    os.chmod(tmp, 0o755)
    r = Release(real_cluster, "squall-real", tmp)

    def configmaps() -> None:
        r.kubectl("create", "configmap", "e2e-components", f"--from-file={COMPONENTS}")
        r.kubectl("create", "configmap", "chaos-components", f"--from-file={BENCH / 'topologies' / 'chaos_components.py'}")

    with chart_release(real_cluster, r.ns, "worker.image.repository=squall-wordcount",
                       "operator.nodeSelector.kubernetes\\.io/hostname=node-1",
                       local_pv=True, before_install=configmaps):
        yield r


@pytest.fixture(autouse=True)
def no_topology_left_behind(release: Release) -> Iterator[None]:
    """After each scenario, every Topology it made is gone, also when it failed half-way: the
    nodes' slots are shared, and a failed roll's 2 workers left running once kept the word count
    from fitting on node-1 when node-2 failed (the next scenario's failure was only that). The
    chart's word count stays: later scenarios use it."""
    yield
    for t in release.get("topologies")["items"]:
        if t["metadata"]["name"] != "wordcount":
            release.delete_and_wait_gone(t["metadata"]["name"])


# --- the scenarios, in order -----------------------------------------------------------------------


def test_chart_defaults_run_the_word_count_in_containers(release: Release) -> None:
    r = release
    pvc = r.get("pvc")["items"]
    assert [p["status"]["phase"] for p in pvc] == ["Bound"]
    # in real containers: its image's user, a read-only root filesystem
    ident = r.kubectl("exec", "deploy/squall-operator", "--", "sh", "-c", "id -u; touch /probe 2>&1 || true").stdout
    assert ident.splitlines()[0] == str(UID) and "Read-only file system" in ident, ident

    r.kubectl("apply", "-f", str(EXAMPLE))

    def running() -> str | None:
        line = r.kubectl("get", "topo", "wordcount", "--no-headers").stdout.split()
        return " ".join(line) if line[1:3] == ["Running", "2/2"] else None

    wait_for(running, 240, interval=2, what="wordcount Running 2/2")
    out = r.kubectl("get", "topo").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "WORKERS", "EXECUTORS", "ACKED/S", "FAILED/S", "UPTIME", "AGE"], out
    workers = r.workers("wordcount")
    assert len(workers) == 2, [p["metadata"]["name"] for p in workers]
    assert sorted(p["spec"]["nodeName"] for p in workers) == ["node-1", "node-2"]
    for p in workers:
        assert p["spec"]["containers"][0]["image"] == WORDCOUNT_IMAGE
        assert p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    wait_for(lambda: (r.status("wordcount").get("components") or {}).get("sentences", {}).get("acked", 0) > 50,
             90, interval=1, what="acked sentences in the status")
    assert "Submitted" in r.reasons("wordcount")

    # a topology without windows keeps CPython's allocator (squall.worker.allocator; the
    # trending example's workers run on jemalloc: test_examples_real_nodes.py)
    for p in workers:
        name = p["metadata"]["name"]
        log = r.kubectl("logs", name).stdout
        assert "allocator: CPython's own (auto: the topology has no windowed bolt)" in log, log[-3000:]

    # the workers locked down in their containers (docs/reliability.md, "Pod lockdown"): the
    # image's user, a read-only root filesystem, no capability, a seccomp filter, no privilege
    # gain, no API token; and sealed: the Topology's CURVE pair from its own Secret
    inside = r.kubectl("exec", workers[0]["metadata"]["name"], "--", "sh", "-c",
                       "id -u; touch /probe 2>&1 || true; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status;"
                       " ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true;"
                       ' test -n "$SQUALL_CURVE_SECRET_KEY" && echo sealed').stdout
    lines = [" ".join(x.split()) for x in inside.splitlines()]
    assert lines[0] == str(UID) and "Read-only file system" in inside, inside
    assert {"CapEff: 0000000000000000", "Seccomp: 2", "NoNewPrivs: 1", "sealed"} <= set(lines), inside
    assert "No such file or directory" in inside, inside
    assert r.get("networkpolicy", "wordcount-workers")["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "squall-worker", "squall.io/topology": "wordcount"}


def test_zookeeper_acl_is_on_by_default_and_kept_across_upgrade(release: Release) -> None:
    """zookeeper.auth is on by default: the chart made a Secret with digest credentials, the
    operator and the workers got them from Secrets, and the ZooKeeper in its container refuses a
    client without them (anonymous or with a wrong password) every read and write of the word
    count's nodes. `helm upgrade` keeps the Secret, so the running topology is undisturbed."""
    import base64

    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from squall.state import ClusterState, ZkCredentials, topology_key

    r = release
    key = topology_key("wordcount", r.ns)  # the word count in ZooKeeper: NAMESPACE~NAME
    secret = r.get("secret", "squall-zk-auth")
    creds = ZkCredentials.parse(base64.b64decode(secret["data"]["credentials"]).decode(), "the chart's Secret")
    (op,) = r.get("pods", "-l", "app.kubernetes.io/component=operator")["items"]
    assert {"name": "SQUALL_ZK_AUTH", "valueFrom": {"secretKeyRef": {"name": "squall-zk-auth", "key": "credentials"}}} \
        in op["spec"]["containers"][0]["env"]
    topo_secret = r.get("secret", "wordcount-zk-auth")
    assert topo_secret["data"]["credentials"] == secret["data"]["credentials"]
    assert topo_secret["metadata"]["ownerReferences"][0]["uid"] == r.get("topology", "wordcount")["metadata"]["uid"]
    for p in r.workers("wordcount"):
        assert {"name": "SQUALL_ZK_AUTH",
                "valueFrom": {"secretKeyRef": {"name": "wordcount-zk-auth", "key": "credentials"}}} \
            in p["spec"]["containers"][0]["env"]

    (zk_pod,) = r.get("pods", "-l", "app.kubernetes.io/component=zookeeper")["items"]
    hosts = f"{zk_pod['status']['podIP']}:2181"  # the machine reaches pod addresses (realnode.py)
    with ClusterState.connect(hosts, root="/squall", credentials=creds) as owner:
        beats = owner.get_worker_heartbeats(key)
        assert len(beats) == 2, beats
        beat = f"/squall/workerbeats/{key}/{next(iter(beats)).key()}"
        acl, _ = owner.client.get_acls(beat)
        assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acl] == [("digest", creds.user, 31)], acl
        before = owner.client.get(f"/squall/assignments/{key}")[0]
    strangers = {"anonymous": KazooClient(hosts=hosts),
                 "wrong password": KazooClient(hosts=hosts, auth_data=[("digest", f"{creds.user}:not-the-password")])}
    try:
        for who, zk in strangers.items():
            zk.start(timeout=30)
            for path in ("/squall", f"/squall/assignments/{key}", f"/squall/storms/{key}", beat):
                with pytest.raises(NoAuthError):
                    zk.get(path)
                    print(f"{who} read {path}")
            for path in (f"/squall/workerbeats/{key}", "/squall/assignments"):
                with pytest.raises(NoAuthError):
                    zk.get_children(path)
                    print(f"{who} listed {path}")
            with pytest.raises(NoAuthError):
                zk.set(beat, b"{}")
            with pytest.raises(NoAuthError):
                zk.set(f"/squall/assignments/{key}", b"{}")
            with pytest.raises(NoAuthError):
                zk.create("/squall/assignments/intruder", b"{}")
            with pytest.raises(NoAuthError):
                zk.delete(beat)
    finally:
        for zk in strangers.values():
            zk.stop()
            zk.close()

    # helm upgrade (same chart and values): the Secret's credentials stay, nothing restarts
    pods = {p["metadata"]["uid"] for p in r.get("pods")["items"]}
    r.c.helm("upgrade", "squall", str(CHART), "-n", r.ns, "--reuse-values", timeout=180)
    assert r.get("secret", "squall-zk-auth")["data"]["credentials"] == secret["data"]["credentials"]
    assert {p["metadata"]["uid"] for p in r.get("pods")["items"]} == pods
    with ClusterState.connect(hosts, root="/squall", credentials=creds) as owner:
        assert owner.client.get(f"/squall/assignments/{key}")[0] == before
        assert len(owner.get_worker_heartbeats(key)) == 2
    assert r.running("wordcount", 2)

def test_deactivate_and_activate(release: Release) -> None:
    r = release

    def emitted() -> int:
        return int((r.status("wordcount").get("components") or {}).get("sentences", {}).get("emitted", 0))

    pods_before = {p["metadata"]["uid"] for p in r.workers("wordcount")}
    r.kubectl("patch", "topology", "wordcount", "--type", "merge", "-p", '{"spec":{"active":false}}')
    wait_for(lambda: r.status("wordcount").get("phase") == "Inactive", 60, what="phase Inactive")
    assert _cond(r.status("wordcount"), "Active")["status"] == "False"
    time.sleep(6)  # the last heartbeats of the spout's emits reach the status
    last = emitted()
    time.sleep(6)
    assert emitted() == last, "a deactivated spout kept emitting"
    assert {p["metadata"]["uid"] for p in r.workers("wordcount")} == pods_before  # the workers stay up
    r.kubectl("patch", "topology", "wordcount", "--type", "merge", "-p", '{"spec":{"active":true}}')
    wait_for(lambda: r.status("wordcount").get("phase") == "Running", 60, what="phase Running again")
    wait_for(lambda: emitted() > last, 60, interval=1, what="the spout to emit again")
    assert {"Deactivated", "Activated"} <= set(r.reasons("wordcount"))


def test_invalid_specs_are_refused_with_clear_status_and_events(release: Release) -> None:
    r = release
    doc = yaml.safe_load(EXAMPLE.read_text())
    # deleted below, twice: each kill waits 3 s instead of the example's 30 (kill waits are
    # test_kubectl_delete_waits_for_the_finalizer's)
    doc["spec"]["killWaitSecs"] = 3
    # what the schema can express: the API server refuses it, naming the fields
    bad = json.loads(json.dumps(doc))
    bad["metadata"]["name"] = "bad-schema"
    bad["spec"]["spouts"][0]["parallelism"] = 0
    bad["spec"]["bolts"][0]["inputs"][0]["grouping"] = "random"
    bad["spec"]["worker"] = {"imagePullPolicy": "Sometimes"}
    res = r.apply(bad, check=False)
    assert res.returncode != 0
    assert "spec.spouts[0].parallelism" in res.stderr and "greater than or equal to 1" in res.stderr, res.stderr
    assert "spec.bolts[0].inputs[0].grouping" in res.stderr, res.stderr
    assert "spec.worker.imagePullPolicy" in res.stderr and "Unsupported value" in res.stderr, res.stderr
    # a misspelt field is refused too, not dropped
    bad = json.loads(json.dumps(doc))
    bad["metadata"]["name"] = "bad-field"
    bad["spec"]["numWorker"] = 3
    res = r.apply(bad, check=False)
    assert res.returncode != 0 and "numWorker" in res.stderr, res.stderr
    # what needs the graph: phase Failed, the message in the status, an Event, no pods
    bad = json.loads(json.dumps(doc))
    bad["metadata"]["name"] = "bad-graph"
    bad["spec"]["bolts"][1]["inputs"][0]["component"] = "splitt"
    r.apply(bad)
    # a class the image lacks: the first worker, in the image, reports the import error
    missing = json.loads(json.dumps(doc))
    missing["metadata"]["name"] = "bad-class"
    missing["spec"]["numWorkers"] = 1
    missing["spec"]["bolts"][0]["class"] = "wordcount:NoSuchBolt"
    # an image no registry serves
    no_image = json.loads(json.dumps(doc))
    no_image["metadata"]["name"] = "no-image"
    no_image["spec"]["numWorkers"] = 1
    no_image["spec"]["worker"] = {"image": "registry.invalid/team-c/nope:1"}
    applied = time.monotonic()
    r.apply(missing)
    r.apply(no_image)
    st = wait_for(lambda: (s := r.status("bad-graph")).get("phase") == "Failed" and s, 60, what="bad-graph Failed")
    assert "splitt" in st["message"] and _cond(st, "Valid")["status"] == "False", st
    assert "InvalidSpec" in r.reasons("bad-graph") and not r.workers("bad-graph")
    st = wait_for(lambda: (s := r.status("bad-class")).get("state") == "ComponentLoadFailed" and s, 180,
                  interval=1, what="bad-class ComponentLoadFailed")
    print(f"ComponentLoadFailed shown {time.monotonic() - applied:.1f}s after kubectl apply")
    assert "NoSuchBolt" in st["message"] and _cond(st, "WorkersHealthy")["reason"] == "ComponentLoadFailed", st
    assert "ComponentLoadFailed" in r.reasons("bad-class")
    st = wait_for(lambda: (s := r.status("no-image")).get("state") in ("ErrImagePull", "ImagePullBackOff") and s,
                  120, interval=1, what="no-image ErrImagePull")
    print(f"{st['state']} shown {time.monotonic() - applied:.1f}s after kubectl apply")
    assert "registry.invalid/team-c/nope:1" in st["message"] and _cond(st, "WorkersHealthy")["status"] == "False"
    assert st["state"] in r.reasons("no-image")
    table = r.kubectl("get", "topo").stdout
    assert any(line.split()[:2] == ["bad-class", "ComponentLoadFailed"] for line in table.splitlines()), table
    # the word count ran on, untouched
    assert r.status("wordcount")["phase"] == "Running"
    for name in ("bad-graph", "bad-class", "no-image"):
        r.kubectl("delete", "topology", name, "--wait=false")
    for name in ("bad-graph", "bad-class", "no-image"):
        r.delete_and_wait_gone(name)
    # the same name with the spec fixed runs: nothing of the failed one is left in the way
    fixed = json.loads(json.dumps(doc))
    fixed["metadata"]["name"] = "bad-class"
    fixed["spec"]["numWorkers"] = 1
    applied = time.monotonic()
    r.apply(fixed)
    wait_for(lambda: r.running("bad-class", 1), 240, interval=1, what="the fixed bad-class Running 1/1")
    print(f"the fixed bad-class Running 1/1 {time.monotonic() - applied:.1f}s after kubectl apply")
    assert r.status("wordcount")["phase"] == "Running"
    r.delete_and_wait_gone("bad-class")


def test_rebalance_2_to_3_workers_loses_no_message_id(release: Release) -> None:
    r = release
    n = 1500
    out = r.out_dir("rebalance")
    r.apply(r.id_pipeline("ids", out, n, workers=2))
    wait_for(lambda: r.running("ids", 2), 240, interval=1, what="ids Running 2/2")
    wait_for(lambda: r.acked("ids") >= 100, 90, interval=1, what="the first acks")
    r.kubectl("patch", "topology", "ids", "--type", "merge", "-p", '{"spec":{"numWorkers":3}}')
    seen = wait_for(lambda: (s := r.status("ids")).get("phase") == "Rebalancing" and s, 60, interval=0.5,
                    what="phase Rebalancing")
    assert _cond(seen, "Rebalancing")["reason"] == "Waiting" and _cond(seen, "Active")["status"] == "False"
    st = wait_for(lambda: r.running("ids", 3), 240, interval=1, what="ids Running 3/3")
    assert _cond(st, "Rebalancing")["reason"] == "Completed" and _cond(st, "Rebalancing")["status"] == "False"
    assert st["stormStatus"] == "ACTIVE"
    assert {"RebalanceRequested", "RebalanceCompleted"} <= set(r.reasons("ids"))
    assert {p["spec"]["nodeName"] for p in r.workers("ids", live=True)} == {"node-1", "node-2"}
    r.all_ids_acked("ids", out, n)


def test_two_images_side_by_side_and_an_image_roll_loses_no_message_id(release: Release) -> None:
    """`ids` runs squall-worker beside the word count on squall-wordcount; changing its
    spec.worker.image rolls its pods to the other image with every message id acked, and the word
    count is untouched. The drain roll (`spec.upgrade.mode: drain`): spouts deactivated while the
    pods are replaced, the drain ending once nothing is pending, well before rebalanceWaitSecs
    (the hand-over roll, the default: test_image_roll_measured_under_steady_acked_load)."""
    r = release
    n = 1500
    out = r.out_dir("roll")
    doc = r.id_pipeline("roll", out, n, workers=2)
    doc["spec"]["upgrade"] = {"mode": "drain"}
    doc["spec"]["rebalanceWaitSecs"] = 60
    r.apply(doc)
    wait_for(lambda: r.running("roll", 2), 240, interval=1, what="roll Running 2/2")

    def images(name: str) -> set[str]:
        return {p["spec"]["containers"][0]["image"] for p in r.workers(name, live=True)}

    assert images("roll") == {WORKER_IMAGE} and images("wordcount") == {WORDCOUNT_IMAGE}
    assert set(r.status("roll")["images"].values()) == {WORKER_IMAGE}
    other = {p["metadata"]["uid"] for p in r.workers("wordcount")}
    before = {p["metadata"]["uid"] for p in r.workers("roll")}
    wait_for(lambda: r.acked("roll") >= 100, 90, interval=1, what="the first acks")
    r.kubectl("patch", "topology", "roll", "--type", "merge", "-p",
              json.dumps({"spec": {"worker": {"image": WORDCOUNT_IMAGE}}}))
    seen = wait_for(lambda: (s := r.status("roll")).get("phase") == "Rolling" and s, 60, interval=0.5,
                    what="phase Rolling")
    assert _cond(seen, "Rolling")["reason"] in ("Draining", "Replacing") and _cond(seen, "Active")["status"] == "False"
    # a slot at a time (maxUnavailable 1): a worker pod is Ready throughout the roll
    ready_counts: list[int] = []

    def rolled() -> dict[str, Any] | None:
        ready_counts.append(sum(_ready(p) for p in r.workers("roll", live=True)))
        s = r.running("roll", 2)
        return s if s and set(s["images"].values()) == {WORDCOUNT_IMAGE} else None

    st = wait_for(rolled, 300, interval=0.5, what=f"roll Running 2/2 on {WORDCOUNT_IMAGE}")
    print(f"ready worker pods during the roll, sampled: {ready_counts}")
    assert min(ready_counts) >= 1, ready_counts
    assert _cond(st, "Rolling")["reason"] == "Completed" and st["stormStatus"] == "ACTIVE"
    assert images("roll") == {WORDCOUNT_IMAGE}
    # every slot runs a new pod; an old one may still be terminating (it hands its slot over to the
    # new pod, then exits: docs/operator.md), and is gone within the grace period (30 s)
    assert not before & {p["metadata"]["uid"] for p in r.workers("roll", live=True)}, "a pod was not replaced"
    wait_for(lambda: not before & {p["metadata"]["uid"] for p in r.workers("roll")}, 45, interval=0.5,
             what="the old worker pods gone")
    assert {"RollStarted", "RollReplacing", "RollCompleted"} <= set(r.reasons("roll"))
    assert "SpecChangeIgnored" not in r.reasons("roll")
    # the drain ended on the spouts' heartbeats (nothing pending), not after rebalanceWaitSecs
    (replacing,) = [e["message"] for e in r.get("events", "--field-selector", "involvedObject.name=roll")["items"]
                    if e["reason"] == "RollReplacing"]
    print(f"drain roll: {replacing}")
    assert replacing.startswith("nothing pending"), replacing
    assert {p["metadata"]["uid"] for p in r.workers("wordcount")} == other
    assert r.status("wordcount")["phase"] == "Running"
    r.all_ids_acked("roll", out, n)



ROLL_RATE = float(os.environ.get("SQUALL_K8S_ROLL_RATE", "200"))


@pytest.mark.parametrize("mode", ["handover", "drain"])
def test_image_roll_measured_under_steady_acked_load(release: Release, mode: str) -> None:
    """An image roll, measured: bench/chaos.py's durable source -> pass -> sink topology (2
    workers, ROLL_RATE ids/s, every ack and every delivery recorded in files on a hostPath) has its
    spec.worker.image changed under that steady load (rebalanceWaitSecs 30).
    Figures: the fewest acks in any 1 s window from the patch until the last old pod is gone,
    against the steady rate before; the longest stretch with no ack; ids lost (must be 0);
    duplicates. `handover` (the default): spouts active throughout, the worst 1 s at 80% of the
    steady rate or more (the roll's goal). `drain`: the stream stops while the pods are replaced,
    but the drain ends once nothing is pending, not after rebalanceWaitSecs."""
    chaos = load_bench_chaos()
    r = release
    name, rate, warmup, wait = f"roll-{mode}", ROLL_RATE, 8.0, 30
    # the roll takes about 10 s from a steady rate about 11 s after the start, and each id is
    # waited for: a longer load only makes the test longer (the assert below says if it is short:
    # 40 s leaves the roll and the old pods' exit 30 s; they took 9.2 s handover, 10.7 s drain)
    load_secs = 40.0
    count = int(rate * load_secs)
    out = r.out_dir(name)
    doc = r.id_pipeline(name, out, 0, workers=2)
    spec = doc["spec"]
    spec["maxSpoutPending"] = 1000
    spec["rebalanceWaitSecs"] = wait
    spec["upgrade"] = {"mode": mode}
    spec["config"] = {"chaos.count": count, "chaos.rate": rate, "chaos.out": "/out"}
    spec["worker"]["volumes"][0]["configMap"]["name"] = "chaos-components"
    spec["spouts"] = [{"name": "ids", "class": "chaos_components:DurableSpout", "parallelism": 2}]
    for b in spec["bolts"]:
        b["class"] = f"chaos_components:{b['class'].split(':')[1]}"
    r.apply(doc)
    wait_for(lambda: r.running(name, 2), 240, interval=1, what=f"{name} Running 2/2")
    wait_for(lambda: len(chaos.read_records(out)[0]) >= rate, 120, interval=1, what="the first second of acks")
    time.sleep(warmup)
    before_pods = {p["metadata"]["uid"] for p in r.workers(name)}
    at = time.time()
    before = chaos.steady_rate(chaos.read_records(out)[0], at)
    print(f"{mode}: steady {before:.0f} acks/s (target {rate:g}); {count} ids")
    assert before >= 0.9 * rate, f"no steady load to measure against: {before:.0f} acks/s"
    r.kubectl("patch", "topology", name, "--type", "merge", "-p",
              json.dumps({"spec": {"worker": {"image": WORDCOUNT_IMAGE}}}))
    storm: list[str] = []  # the spouts' activation, sampled during the roll

    def rolled() -> dict[str, Any] | None:
        s = r.status(name)
        storm.append(str(s.get("stormStatus")))
        done = s.get("phase") == "Running" and s.get("workers") == "2/2" \
            and set((s.get("images") or {}).values()) == {WORDCOUNT_IMAGE} \
            and _cond(s, "Rolling").get("reason") == "Completed"
        return s if done else None

    wait_for(rolled, 240, interval=0.5, what=f"{name} rolled onto {WORDCOUNT_IMAGE}")
    completed = time.time()
    wait_for(lambda: not before_pods & {p["metadata"]["uid"] for p in r.workers(name)}, 60, interval=0.5,
             what="the old worker pods gone")
    until = time.time()
    assert until < at + load_secs - 10, "the roll outlasted the load: measure with a longer one"
    wait_for(lambda: len(chaos.read_records(out)[1] & set(range(count))) == count, 300, interval=1,
             what=f"every one of the {count} ids acked at the spout")
    reasons = r.reasons(name)
    replacing = [e["message"] for e in r.get("events", "--field-selector", f"involvedObject.name={name}")["items"]
                 if e["reason"] == "RollReplacing"]
    r.delete_and_wait_gone(name)

    times, acked, deliveries = chaos.read_records(out)
    starts = [at + i / 10 for i in range(max(1, int((until - at - 1) * 10)))]
    worst = min(chaos.count_between(times, t, t + 1) for t in starts)
    during = [t for t in times if at <= t < until]
    gaps = [b - a for a, b in zip([at, *during], [*during, until])]
    pause = max(gaps)
    lost = count - len(acked & set(range(count)))
    duplicates = len(deliveries) - len(set(deliveries))
    figures = {
        "mode": mode, "steady_acks_per_s": round(before, 1), "worst_1s_acks": worst,
        "worst_1s_of_steady": round(worst / before, 3), "longest_no_ack_s": round(pause, 2),
        "roll_s": round(completed - at, 1), "old_pods_gone_s": round(until - at, 1), "ids": count,
        "lost": lost, "acked_undelivered": len(acked - set(deliveries)), "duplicates": duplicates,
        "storm_status_sampled": sorted(set(storm)), "drain": replacing,
    }
    print(f"roll figures: {json.dumps(figures)}")
    if os.environ.get("SQUALL_K8S_ROLL_JSON"):
        with open(os.environ["SQUALL_K8S_ROLL_JSON"], "a") as f:
            f.write(json.dumps(figures) + "\n")
    assert lost == 0, figures
    assert figures["acked_undelivered"] == 0, figures
    assert {"RollStarted", "RollCompleted"} <= set(reasons), reasons
    if mode == "handover":
        # spouts active at every sample, never deactivated; the stream barely dips
        assert set(storm) == {"ACTIVE"} and "Deactivated" not in reasons, (storm, reasons)
        assert worst >= 0.8 * before, figures
    else:
        assert "INACTIVE" in storm, storm
        # the drain ended once nothing was pending: the stream stopped for the pods' replacement,
        # not for rebalanceWaitSecs on top of it
        assert len(replacing) == 1 and replacing[0].startswith("nothing pending"), figures


def load_bench_chaos() -> ModuleType:
    """bench/chaos.py, whose figures (records, steady rate, recovery, report) the k8s run reuses."""
    return load_file(BENCH / "chaos.py", "bench_chaos")


# the short run: 4 deletions 20 s apart (about 2.5 minutes with the warm-up and the drain);
# SQUALL_K8S_CHAOS_MINUTES=5 deletes a pod every 20 s for 5 minutes
CHAOS_EVERY = 20.0
CHAOS_DELETIONS = max(1, int(float(os.environ.get("SQUALL_K8S_CHAOS_MINUTES", "0")) * 60 / CHAOS_EVERY)) \
    if os.environ.get("SQUALL_K8S_CHAOS_MINUTES") else 4


def _timestamp(rfc3339: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _worker_rss_mb(r: Release, pod: str) -> float | None:
    """Resident memory of the worker process (not tini) in a worker pod's container."""
    out = r.kubectl("exec", pod, "--", "ps", "-eo", "rss=,args=", check=False, timeout=30).stdout
    for line in out.splitlines():
        rss, _, args = line.strip().partition(" ")
        if args.startswith("python") and "squall.worker" in args:
            return round(int(rss) / 1024, 1)
    return None


@pytest.mark.timeout(600 + int(CHAOS_DELETIONS * CHAOS_EVERY))
def test_worker_pods_deleted_every_20s_lose_no_message_id(release: Release) -> None:
    """The chaos run on Kubernetes: bench/chaos.py's durable source -> pass -> sink
    topology (2 workers, 100 ids/s, every ack and every delivery recorded in files on a hostPath)
    while a random worker pod is deleted (`kubectl delete pod`) every 20 s; the operator makes a
    new one for the slot. Figures as bench/chaos.py's: ids lost (must be 0), duplicates, recovery
    after each deletion (ack rate back above 90% of the steady rate for 3 s), memory of the
    worker pods alive at the end."""
    import random

    chaos = load_bench_chaos()
    r = release
    name, rate, warmup, settle = "chaos", 100.0, 8.0, 10.0
    count = int(rate * (warmup + CHAOS_DELETIONS * CHAOS_EVERY + settle + 5))
    out = r.out_dir(name)
    doc = r.id_pipeline(name, out, 0, workers=2)
    spec = doc["spec"]
    spec["maxSpoutPending"] = 1000
    spec["config"] = {"chaos.count": count, "chaos.rate": rate, "chaos.out": "/out"}
    spec["worker"]["env"] = [{"name": "PYTHONPATH", "value": "/components:/app"}]
    spec["worker"]["volumes"][0]["configMap"]["name"] = "chaos-components"
    spec["spouts"] = [{"name": "ids", "class": "chaos_components:DurableSpout", "parallelism": 2}]
    for b in spec["bolts"]:
        b["class"] = f"chaos_components:{b['class'].split(':')[1]}"
    t_start = time.time()
    r.apply(doc)
    wait_for(lambda: r.running(name, 2), 240, interval=1, what=f"{name} Running 2/2")
    wait_for(lambda: len(chaos.read_records(out)[0]) >= rate, 120, interval=1, what="the first second of acks")
    time.sleep(warmup)
    before = chaos.steady_rate(chaos.read_records(out)[0], time.time())
    print(f"steady: {before:.0f} acks/s (target {rate:g}); {count} ids; {CHAOS_DELETIONS} deletions")
    assert before >= 0.9 * rate, f"no steady load to measure against: {before:.0f} acks/s"

    rng = random.Random(20261123)
    faults: list[Any] = []
    rss: dict[str, list[float]] = {}  # pod uid -> samples
    names: dict[str, str] = {}
    uids: set[str] = set()
    back: list[float] = []  # seconds from a deletion to its replacement pod Ready
    timelines: list[dict[str, float]] = []
    for _ in range(CHAOS_DELETIONS):
        live = sorted(r.workers(name, live=True), key=lambda p: p["metadata"]["name"])
        uids |= {p["metadata"]["uid"] for p in live}
        victim = rng.choice(live)
        slot = victim["metadata"]["annotations"]["squall.io/slot"]
        at = time.time()
        r.kubectl("delete", "pod", victim["metadata"]["name"], "--wait=false")
        faults.append(chaos.Fault("delete", at, f"kubectl delete pod {victim['metadata']['name']} "
                                                f"({victim['spec']['nodeName']})"))
        print(f"{time.strftime('%H:%M:%S')} {faults[-1].detail}")
        # where the time goes, seconds after the deletion: seen by polling the API (~0.3 s apart)
        # or from its timestamps (1 s resolution: old_exited, new_created, new_started)
        marks: dict[str, float] = {}
        deadline, replaced = at + CHAOS_EVERY, None
        while time.time() < deadline:
            pods = r.workers(name)
            seen = time.time() - at
            old = next((p for p in pods if p["metadata"]["uid"] == victim["metadata"]["uid"]), None)
            if old is None:
                marks.setdefault("old_gone", round(seen, 1))
            else:
                done = ((old["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated")
                if done and done.get("finishedAt"):
                    marks.setdefault("old_exited", round(_timestamp(done["finishedAt"]) - at, 1))
            new = next((p for p in pods if p["metadata"]["annotations"].get("squall.io/slot") == slot
                        and p["metadata"]["uid"] not in uids), None)
            if new is not None:
                marks.setdefault("new_seen", round(seen, 1))
                marks.setdefault("new_created", round(_timestamp(new["metadata"]["creationTimestamp"]) - at, 1))
                running = ((new["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("running")
                if running and running.get("startedAt"):
                    marks.setdefault("new_started", round(_timestamp(running["startedAt"]) - at, 1))
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            if replaced is None and new is not None and len(pods) == 2 and all(_ready(p) for p in pods):
                replaced = seen
                marks["new_ready"] = round(seen, 1)
                back.append(round(replaced, 1))
                for p in pods:  # memory, once per interval, of every worker pod (the new one just Ready)
                    mb = _worker_rss_mb(r, p["metadata"]["name"])
                    if mb is not None:
                        rss.setdefault(p["metadata"]["uid"], []).append(mb)
                        names[p["metadata"]["uid"]] = p["metadata"]["name"]
            if replaced is not None and "old_gone" in marks:
                time.sleep(max(0.0, min(1.0, deadline - time.time())))
        timelines.append(marks)
        faults[-1].detail += f"; new pod created after ~{marks.get('new_created', 0):.0f}s, Ready after " \
                             f"{replaced:.1f}s" if replaced else "; no new pod Ready in 20s"
        print(f"  timeline (s after the deletion): {marks}")
    load_end = time.time() + settle
    time.sleep(settle)
    alive = r.workers(name, live=True)
    uids |= {p["metadata"]["uid"] for p in alive}
    end_rss = {p["metadata"]["name"]: _worker_rss_mb(r, p["metadata"]["name"]) for p in alive}
    wait_for(lambda: len(chaos.read_records(out)[1] & set(range(count))) == count, 180, interval=1,
             what=f"every one of the {count} ids acked at the spout")
    r.delete_and_wait_gone(name)

    times, acked, deliveries = chaos.read_records(out)
    ends = [f.at for f in faults[1:]] + [load_end]
    lowest: list[int] = []  # per deletion, the fewest acks in any 1 s window until the next one
    for fault, until in zip(faults, ends):
        fault.recovery_s = chaos.recovery_time(times, fault.at, before, until)
        starts = [fault.at + i / 10 for i in range(max(1, int((until - fault.at - 1) * 10)))]
        lowest.append(min(chaos.count_between(times, t, t + 1) for t in starts))
    recovered = [f.recovery_s for f in faults if f.recovery_s is not None]
    delivered = set(deliveries)
    result = chaos.Result(
        settings={"rate": rate, "deletions": CHAOS_DELETIONS, "every_s": CHAOS_EVERY, "workers": 2},
        count=count, acked=len(acked & set(range(count))), lost=len(set(range(count)) - acked),
        acked_undelivered=len(acked - delivered), deliveries=len(deliveries),
        duplicates=len(deliveries) - len(delivered), steady_rate=round(before, 1),
        faults=[{"kind": f.kind, "at_s": round(f.at - t_start, 1), "detail": f.detail,
                 "recovery_s": f.recovery_s, "lowest_1s_acks": low, "timeline_s": marks}
                for f, marks, low in zip(faults, timelines, lowest)],
        recovery_p50_s=chaos.percentile_50(recovered),
        recovery_max_s=max(recovered) if len(recovered) == len(faults) and recovered else None,
        unrecovered=len(faults) - len(recovered),
        worker_restarts=len(uids) - 2,
        rss_mb={"workers_alive_at_end": {n: {"first": rss[u][0] if rss.get(u) else None, "last": end_rss[n],
                                             "samples": len(rss.get(u, []))}
                                         for u, n in ((p["metadata"]["uid"], p["metadata"]["name"]) for p in alive)},
                "new_pod_ready_s": back},
        elapsed_s=round(time.time() - t_start, 1),
    )
    print(chaos.report(result))
    print(f"fewest acks in a 1 s window after each deletion (steady {before:.0f}/s): {lowest}")
    if os.environ.get("SQUALL_K8S_CHAOS_JSON"):
        Path(os.environ["SQUALL_K8S_CHAOS_JSON"]).write_text(json.dumps(dataclasses.asdict(result), indent=2) + "\n")
    assert result.lost == 0 and result.acked == count, chaos.report(result)
    assert result.acked_undelivered == 0, chaos.report(result)
    assert result.worker_restarts == CHAOS_DELETIONS, chaos.report(result)  # one new pod per deletion
    # the ack rate came back after every deletion before the next one, and within the
    # recovery goal of 5 s: the deleted worker serves its slot until the new pod's worker registered
    # (squall.worker.handover), so the rate barely dips (0.0 s, 92-98% of it in the worst 1 s
    # window, docs/reliability.md): the bound has a wide margin on the loaded 2-core machine
    assert result.unrecovered == 0, chaos.report(result)
    assert result.recovery_max_s is not None and result.recovery_max_s <= 5.0, chaos.report(result)

def test_operator_killed_mid_rebalance_finishes_it(release: Release) -> None:
    r, c = release, release.c
    out = r.out_dir("restart")
    doc = r.id_pipeline("restart", out, 0, workers=2, rate=100)
    doc["spec"]["rebalanceWaitSecs"] = 8
    r.apply(doc)
    wait_for(lambda: r.running("restart", 2), 240, interval=1, what="restart Running 2/2")
    r.kubectl("patch", "topology", "restart", "--type", "merge", "-p", '{"spec":{"numWorkers":3}}')
    wait_for(lambda: r.status("restart").get("phase") == "Rebalancing", 60, interval=0.5, what="phase Rebalancing")
    (op,) = r.get("pods", "-l", "app.kubernetes.io/component=operator")["items"]
    cid = op["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    # SIGKILL to the operator's container, through its node's containerd: the kubelet restarts it
    c.ctr(op["spec"]["nodeName"], "tasks", "kill", "--signal", "SIGKILL", cid)
    wait_for(lambda: r.get("pods", "-l", "app.kubernetes.io/component=operator")["items"][0]["status"]
             ["containerStatuses"][0]["restartCount"] >= 1, 90, interval=1, what="the operator container restarted")
    st = wait_for(lambda: r.running("restart", 3), 240, interval=1, what="the rebalance to finish after the restart")
    assert _cond(st, "Rebalancing")["reason"] == "Completed" and st["stormStatus"] == "ACTIVE"
    r.delete_and_wait_gone("restart")


def test_failed_node_moves_its_workers_and_no_message_id_is_lost(release: Release) -> None:
    """node-2's kubelet, containerd and containers are killed: nimbus moves its executors to
    node-1, the dead node's pods stay Terminating, every id is acked; node-2 then comes back."""
    r, c = release, release.c
    n = 3000
    out = r.out_dir("nodefail")
    # 2 workers: node-1 then holds the word count's 2 and these 2 (the chart's 4 slots per node)
    r.apply(r.id_pipeline("nodefail", out, n, workers=2, rate=100))
    wait_for(lambda: r.running("nodefail", 2), 240, interval=1, what="nodefail Running 2/2")
    assert any(p["spec"]["nodeName"] == "node-2" for p in r.workers("nodefail")), "expected a worker on node-2"
    wait_for(lambda: r.acked("nodefail") >= 100, 90, interval=1, what="the first acks")
    t0 = time.monotonic()
    try:
        c.fail_node("node-2")
        wait_for(lambda: (s := r.running("nodefail", 2)) and all(k.startswith("node-1-") for k in s["slots"]),
                 240, interval=1, what="nodefail Running 2/2 on node-1")
        print(f"executors moved off the failed node and running again in {time.monotonic() - t0:.1f}s")
        assert {p["spec"]["nodeName"] for p in r.workers("nodefail", live=True)} == {"node-1"}
        node = kget(c, "node", "node-2")
        assert any(x["type"] == "Ready" and x["status"] == "Unknown" for x in node["status"]["conditions"])
        # the Topology's Events say why its executors moved
        items = r.get("events", "--field-selector", "involvedObject.name=nodefail")["items"]
        reasons = {e["reason"] for e in items}
        assert "Assigned" in reasons and ("NodeNotReady" in reasons or any("dead" in e["message"] for e in items)), \
            [(e["reason"], e["message"]) for e in items]
        wait_for(lambda: list(out.glob("spout-*.done")), 300, interval=1, what="every message id acked")
        wait_for(lambda: r.running("wordcount", 2), 120, interval=1, what="the word count running again")
    finally:
        c.restore_node("node-2")
    wait_for(lambda: any(x["type"] == "Ready" and x["status"] == "True"
                         for x in kget(c, "node", "node-2")["status"]["conditions"]), 120, what="node-2 back")
    summary = r.all_ids_acked("nodefail", out, n, timeout=10)
    print(f"spout summary: acks {summary['acks']}, failed {summary['failed']}, opens {summary['opens']}")


def test_kubectl_delete_waits_for_the_finalizer(release: Release) -> None:
    r = release
    assert "squall.io/kill" in r.get("topology", "wordcount")["metadata"]["finalizers"]
    # kubectl delete waits for the operator's finalizer (Storm's kill), then the workers are gone
    r.kubectl("delete", "topology", "wordcount", "--timeout=150s", timeout=180)
    wait_for(lambda: not r.workers("wordcount"), 120, what="the worker pods gone")
