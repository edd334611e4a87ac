"""`helm upgrade` of a release installed with ZooKeeper's ACLs off (the chart's default before
they were turned on) to `zookeeper.auth.enabled=true`, under an acked load, on real nodes
(docs/reliability.md, "ZooKeeper ACLs").

The upgrade makes the credentials' Secret and restarts the operator with them; the workers' pod
template changes with it, so the operator rolls the running topology's workers onto the
credentials (a slot at a time) and every message id is still acked. The restarted operator
closes the nodes made while ACLs were off (ZooKeeper keeps a node's ACL when it is rewritten):
without resubmitting the topology, a client without the credentials is refused on its nodes.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import chart_release, wait_for
from .realnode import RealNodeCluster
from .test_chart_real_nodes import CHART, COMPONENTS, Release, _ready

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def old_release(real_cluster: RealNodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The chart installed with zookeeper.auth.enabled=false (ZooKeeper on an emptyDir)."""
    tmp = tmp_path_factory.mktemp("zk-upgrade")
    os.chmod(tmp, 0o755)
    r = Release(real_cluster, "squall-upgrade", tmp)
    with chart_release(real_cluster, r.ns, "zookeeper.auth.enabled=false", "zookeeper.persistence.enabled=false",
                       "operator.nodeSelector.kubernetes\\.io/hostname=node-1",
                       before_install=lambda: r.kubectl("create", "configmap", "e2e-components",
                                                        f"--from-file={COMPONENTS}")):
        yield r


def _has_credentials(pod: dict[str, Any]) -> bool:
    return any(e["name"] == "SQUALL_ZK_AUTH" for e in pod["spec"]["containers"][0].get("env", []))


def test_upgrade_turns_zookeeper_acls_on_for_a_running_topology(old_release: Release) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from squall.state import ClusterState, ZkCredentials, topology_key

    r = old_release
    key = topology_key("ids", r.ns)  # the topology in ZooKeeper: NAMESPACE~NAME
    assert r.kubectl("get", "secret", "squall-zk-auth", check=False).returncode != 0
    n = 6000
    out = r.out_dir("ids")
    r.apply(r.id_pipeline("ids", out, n, workers=2, rate=100))
    wait_for(lambda: r.running("ids", 2), 240, interval=1, what="ids Running 2/2")
    wait_for(lambda: r.acked("ids") >= 100, 90, interval=1, what="the first acks")
    assert not any(_has_credentials(p) for p in r.workers("ids"))
    (zk_pod,) = r.get("pods", "-l", "app.kubernetes.io/component=zookeeper")["items"]
    hosts = f"{zk_pod['status']['podIP']}:2181"
    stranger = KazooClient(hosts=hosts)
    stranger.start(timeout=30)
    try:
        assert stranger.get(f"/squall/assignments/{key}")[0], "open before the upgrade"
        (op,) = r.get("pods", "-l", "app.kubernetes.io/component=operator")["items"]
        t0 = time.monotonic()
        r.c.helm("upgrade", "squall", str(CHART), "-n", r.ns, "--reuse-values",
                 "--set", "zookeeper.auth.enabled=true", timeout=180)
        secret = r.get("secret", "squall-zk-auth")
        creds = ZkCredentials.parse(base64.b64decode(secret["data"]["credentials"]).decode(), "the chart's Secret")

        def new_operator() -> bool:
            pods = [p for p in r.get("pods", "-l", "app.kubernetes.io/component=operator")["items"]
                    if not p["metadata"].get("deletionTimestamp")]
            return len(pods) == 1 and pods[0]["metadata"]["uid"] != op["metadata"]["uid"] \
                and _has_credentials(pods[0]) and _ready(pods[0])

        wait_for(new_operator, 180, interval=1, what="the operator restarted with the credentials")
        # the workers' pod template changed with the credentials: rolled onto them
        st = wait_for(lambda: (s := r.running("ids", 2)) and len(r.workers("ids")) == 2
                      and all(_has_credentials(p) for p in r.workers("ids")) and s,
                      300, interval=1, what="ids rolled onto the credentials, Running 2/2")
        print(f"upgraded and rolled in {time.monotonic() - t0:.1f}s; events {r.reasons('ids')}")
        assert {"RollStarted", "RollCompleted"} <= set(r.reasons("ids")), r.reasons("ids")
        assert st["stormStatus"] == "ACTIVE"
        wait_for(lambda: list(out.glob("spout-*.done")), 300, interval=1, what="every message id acked")
        with ClusterState.connect(hosts, root="/squall", credentials=creds) as owner:
            beats = owner.get_worker_heartbeats(key)
            assert len(beats) == 2, beats
            beat = f"/squall/workerbeats/{key}/{next(iter(beats)).key()}"
        # not submitted again: the topology's nodes made before the upgrade are closed
        for path in ("/squall", f"/squall/storms/{key}", f"/squall/assignments/{key}", beat):
            with pytest.raises(NoAuthError):
                stranger.get(path)
        for path in ("/squall/storms", f"/squall/workerbeats/{key}"):
            with pytest.raises(NoAuthError):
                stranger.get_children(path)
        with pytest.raises(NoAuthError):
            stranger.set(beat, b"{}")
        with pytest.raises(NoAuthError):
            stranger.set(f"/squall/assignments/{key}", b"{}")
        with pytest.raises(NoAuthError):
            stranger.create(f"/squall/workerbeats/{key}/node-9-1", b"{}")
        with pytest.raises(NoAuthError):
            stranger.delete(beat)
        with ClusterState.connect(hosts, root="/squall", credentials=creds) as owner:
            for path in (f"/squall/storms/{key}", f"/squall/assignments/{key}", beat):
                assert owner.client.get_acls(path)[0] == creds.acl(), path

        summary = r.all_ids_acked("ids", out, n, timeout=10)
        print(f"spout summary: acks {summary['acks']}, failed {summary['failed']}, opens {summary['opens']}")
        log = r.kubectl("logs", "deploy/squall-operator").stdout
        closed = [line for line in log.splitlines() if "ZooKeeper ACLs: closed" in line]
        print(f"the operator at start-up: {closed}")
        assert len(closed) == 1 and " closed 0 " not in closed[0], closed
        r.delete_and_wait_gone("ids")
    finally:
        stranger.stop()
        stranger.close()
