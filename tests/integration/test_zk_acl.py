"""ZooKeeper ACLs on Squall's nodes, against the real ZooKeeper: with digest
credentials every node Squall creates is readable and writable by that user alone. A client
without them (anonymous, or with a wrong password) gets NoAuthError reading an assignment or
writing a heartbeat; the workers of a local cluster, handed the credentials in a 0600 file, run
a topology to the last ack."""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from helpers import (  # the integration tests' helpers (same directory)
    id_pipeline,
    one_line_error,
    read_spout,
    squall,
    stop_topology,
    wait_running,
    wait_for,
    wait_spout_done,
)

from squall.models.cluster import Assignment, StormBase, TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall.state import ZK_AUTH_FILE_ENV, ClusterState, ZkCredentials
from squall.zkserver import EmbeddedZooKeeper
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration

SLOT = WorkerSlot("node1", 6700)


@pytest.fixture
def other_client(zookeeper: EmbeddedZooKeeper) -> Iterator[Callable[..., KazooClient]]:
    clients: list[KazooClient] = []

    def make(**kwargs: object) -> KazooClient:
        client = KazooClient(hosts=zookeeper.connect_string, **kwargs)  # type: ignore[arg-type]
        client.start(timeout=15)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def secured(zookeeper: EmbeddedZooKeeper) -> Iterator[tuple[ClusterState, ZkCredentials]]:
    creds = ZkCredentials.generate()
    root = f"/squall-acl-{uuid.uuid4().hex}"
    state = ClusterState.connect(zookeeper.connect_string, root=root, credentials=creds)
    try:
        yield state, creds
    finally:
        state.client.delete(root, recursive=True)
        state.close()


def populate(state: ClusterState) -> None:
    state.set_storm("t", StormBase(name="t", status=TopologyStatus.ACTIVE, launch_time_secs=1.0,
                                   num_workers=1, component_executors={"s": 1}, topology={}))
    state.set_assignment("t", Assignment(executor_slots={"1-1": SLOT.key()}))
    state.worker_heartbeat("t", SLOT, WorkerHeartbeat(topology_id="t", time_secs=1.0, uptime_secs=1.0))


@pytest.mark.parametrize("who", ["anonymous", "wrong password"])
def test_a_client_without_the_credentials_can_neither_read_nor_write(
    secured: tuple[ClusterState, ZkCredentials], other_client: Callable[..., KazooClient], who: str
) -> None:
    state, creds = secured
    populate(state)
    root = state.root
    client = other_client() if who == "anonymous" else other_client(
        auth_data=[("digest", f"{creds.user}:not-{creds.password}")])
    for path in (root, f"{root}/assignments", f"{root}/assignments/t", f"{root}/storms/t",
                 f"{root}/workerbeats/t/{SLOT.key()}"):
        with pytest.raises(NoAuthError):
            client.get(path)
    for path in (root, f"{root}/assignments", f"{root}/workerbeats/t"):
        with pytest.raises(NoAuthError):
            client.get_children(path)
    with pytest.raises(NoAuthError):  # overwrite a heartbeat
        client.set(f"{root}/workerbeats/t/{SLOT.key()}", b'{"v": 1}')
    with pytest.raises(NoAuthError):  # add a worker's heartbeat
        client.create(f"{root}/workerbeats/t/node9-1", b"{}")
    with pytest.raises(NoAuthError):  # replace the assignment
        client.delete(f"{root}/assignments/t")
    # nothing changed, as the owner reads it
    assert state.get_assignment("t") == Assignment(executor_slots={"1-1": SLOT.key()})
    assert set(state.get_worker_heartbeats("t")) == {SLOT}


def test_the_same_credentials_read_and_write(
    secured: tuple[ClusterState, ZkCredentials], zookeeper: EmbeddedZooKeeper
) -> None:
    state, creds = secured
    populate(state)
    with ClusterState.connect(zookeeper.connect_string, root=state.root, credentials=creds) as other:
        assert other.get_assignment("t") == state.get_assignment("t")
        other.worker_heartbeat("t", SLOT, WorkerHeartbeat(topology_id="t", time_secs=2.0, uptime_secs=2.0))
        assert state.get_worker_heartbeats("t")[SLOT].time_secs == 2.0
    acl, _ = state.client.get_acls(f"{state.root}/workerbeats/t/{SLOT.key()}")
    assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acl] == [("digest", creds.user, 31)]


def test_workers_authenticate_and_strangers_cannot_read_the_assignment(
    make_cluster: Callable[..., LocalCluster], other_client: Callable[..., KazooClient], tmp_path: Path
) -> None:
    creds = ZkCredentials.generate()
    cluster = make_cluster(nodes=2, slots=1, zk_credentials=creds)
    auth_file = cluster.zk_auth_file
    assert auth_file is not None and stat.S_IMODE(auth_file.stat().st_mode) == 0o600
    assert ZkCredentials.from_file(auth_file) == creds
    out = tmp_path / "out"
    topo = id_pipeline("acl", out, 1000, rate=500)
    cluster.submit(topo)
    wait_running(cluster, topo)  # the workers registered endpoints and heartbeats
    stranger = other_client()
    with pytest.raises(NoAuthError):
        stranger.get(f"{cluster.root}/assignments/{topo.name}")
    with pytest.raises(NoAuthError):
        stranger.set(f"{cluster.root}/workerbeats/{topo.name}/{next(iter(cluster.worker_pids())).key()}", b"{}")
    # Storm's verbs from another shell: refused in one line without the file `squall run` prints
    zk = ["--zookeeper", cluster.connect_string]
    env = {k: v for k, v in os.environ.items() if k != ZK_AUTH_FILE_ENV}
    one_line_error(squall("list", *zk, env=env), 1, "refused access", ZK_AUTH_FILE_ENV)
    wrong = ZkCredentials(creds.user, "wrong").write(tmp_path / "wrong-auth")
    one_line_error(squall("list", *zk, env={**env, ZK_AUTH_FILE_ENV: str(wrong)}), 1, "refused the credentials")
    listed = squall("list", *zk, env={**env, ZK_AUTH_FILE_ENV: str(auth_file)})
    assert listed.returncode == 0 and topo.name in listed.stdout, listed
    wait_spout_done(out, cluster, 120)
    stop_topology(cluster, topo.name)
    assert read_spout(out, cluster)["acked"] == list(range(1000))
    assert not cluster.crashes
    cluster.shutdown()
    assert not auth_file.exists()


def test_nimbus_started_with_credentials_closes_the_nodes_made_without_them(
    zookeeper: EmbeddedZooKeeper, other_client: Callable[..., KazooClient], caplog: pytest.LogCaptureFixture
) -> None:
    """A cluster that ran with ACLs off and is upgraded to on: ZooKeeper keeps a node's ACL when
    it is written again, so the nodes made before stay open until nimbus, started with the
    credentials, closes every one of them (a worker's ephemeral endpoint included); what the
    workers write afterwards with the credentials keeps the closed ACL."""
    from squall.models.cluster import Endpoint, ErrorInfo, NimbusRequest, SupervisorInfo
    from squall_operator.nimbus import Nimbus

    creds = ZkCredentials.generate()
    root = f"/squall-reacl-{uuid.uuid4().hex}"
    worker_slot = WorkerSlot("node1", 6701)
    # before the upgrade: everything made by clients without credentials (open ACL)
    old = ClusterState.connect(zookeeper.connect_string, root=root)
    old_worker = ClusterState.connect(zookeeper.connect_string, root=root)  # owns an ephemeral
    nimbus_state: ClusterState | None = None
    try:
        populate(old)
        old.report_error("t", "s", ErrorInfo(component="s", task=1, time_secs=1.0, error="boom", port=6700))
        old.register_supervisor("node1", SupervisorInfo(host="127.0.0.1", ports=[6700], time_secs=1.0))
        old.post_request(NimbusRequest(action="activate", topology="t"))
        old_worker.register_endpoint("t", worker_slot, Endpoint(host="127.0.0.1", port=40001))
        anonymous = other_client()
        paths: list[str] = []
        stack = [root]
        while stack:
            path = stack.pop()
            paths.append(path)
            stack.extend(f"{path}/{child}" for child in anonymous.get_children(path))
        assert len(paths) >= 19, paths  # the root, its subtrees, every node above
        endpoint = f"{root}/endpoints/t/{worker_slot.key()}"
        assert endpoint in paths and anonymous.exists(endpoint).ephemeralOwner != 0  # type: ignore[union-attr]

        # the upgrade: nimbus starts with the credentials, over the same nodes (no resubmission)
        nimbus_state = ClusterState.connect(zookeeper.connect_string, root=root, credentials=creds)
        nimbus = Nimbus(nimbus_state)
        with caplog.at_level("INFO", logger="squall.nimbus"):
            nimbus.startup()  # what start() (the local cluster) and start_operator() run first
        closed_lines = [r.getMessage() for r in caplog.records if "ACL" in r.getMessage()]
        assert len(closed_lines) == 1 and f"closed {len(paths)} " in closed_lines[0], closed_lines

        for path in paths:
            with pytest.raises(NoAuthError):
                anonymous.get(path)
            with pytest.raises(NoAuthError):
                anonymous.get_children(path)
            with pytest.raises(NoAuthError):
                anonymous.set(path, b"{}")
            with pytest.raises(NoAuthError):
                anonymous.create(f"{path}/intruder", b"{}")
            assert nimbus_state.client.get_acls(path)[0] == creds.acl(), path
        for path in (f"{root}/workerbeats/t/{SLOT.key()}", endpoint):
            with pytest.raises(NoAuthError):
                anonymous.delete(path)
        # the owner still reads everything as it was
        assert nimbus_state.get_assignment("t") == Assignment(executor_slots={"1-1": SLOT.key()})
        assert nimbus_state.get_endpoints("t") == {worker_slot: Endpoint(host="127.0.0.1", port=40001)}
        # a worker on the credentials rewrites its heartbeat and endpoint: both stay closed
        with ClusterState.connect(zookeeper.connect_string, root=root, credentials=creds) as worker:
            worker.worker_heartbeat("t", SLOT, WorkerHeartbeat(topology_id="t", time_secs=2.0, uptime_secs=2.0))
            worker.register_endpoint("t", worker_slot, Endpoint(host="127.0.0.1", port=40002))
            for path in (f"{root}/workerbeats/t/{SLOT.key()}", endpoint):
                assert worker.client.get_acls(path)[0] == creds.acl(), path
                with pytest.raises(NoAuthError):
                    anonymous.get(path)
        # a second start finds nothing left to close
        caplog.clear()
        with caplog.at_level("INFO", logger="squall.nimbus"):
            Nimbus(nimbus_state).startup()
        assert [r.getMessage() for r in caplog.records if "ACL" in r.getMessage()][0].count(" closed 0 ") == 1
    finally:
        old_worker.close()
        old.close()
        if nimbus_state is not None:
            nimbus_state.client.delete(root, recursive=True)
            nimbus_state.close()


def test_closing_leaves_another_users_node_as_it_is(
    zookeeper: EmbeddedZooKeeper, other_client: Callable[..., KazooClient]
) -> None:
    """A node under the root closed to another digest user (no ADMIN for ours) is counted and
    left as it is; the walk goes on with the rest."""
    creds, stranger = ZkCredentials.generate(), ZkCredentials.generate("stranger")
    root = f"/squall-reacl-{uuid.uuid4().hex}"
    old = ClusterState.connect(zookeeper.connect_string, root=root)
    theirs = other_client(auth_data=stranger.auth_data())
    theirs.create(f"{root}/storms/theirs", b"{}", acl=stranger.acl())
    try:
        with ClusterState.connect(zookeeper.connect_string, root=root, credentials=creds) as state:
            closed, refused = state.close_open_nodes()
            assert (closed, refused) == (1 + 6, 1)  # the root and its subtrees; theirs refused
            assert theirs.get_acls(f"{root}/storms/theirs")[0] == stranger.acl()
            with pytest.raises(NoAuthError):
                other_client().get(f"{root}/storms")
            state.client.delete(f"{root}/storms/theirs")  # DELETE on the parent suffices
            state.client.delete(root, recursive=True)
    finally:
        old.close()


def _set_acls_below(client: KazooClient, root: str, acl: list[Any]) -> int:
    """`acl` on `root` and every node below it (as the owner of their ACLs); how many."""
    n, stack = 0, [root]
    while stack:
        path = stack.pop()
        client.set_acls(path, acl)
        n += 1
        stack.extend(f"{path}/{child}" for child in client.get_children(path))
    return n


def test_a_worker_refused_by_zookeeper_logs_one_line_per_change_not_a_traceback_per_poll(
    make_cluster: Callable[..., LocalCluster], zookeeper: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    """During the ACLs-on upgrade the workers not yet rolled onto the credentials are refused by
    ZooKeeper (NoAuthError) on every heartbeat and poll for the tens of seconds the roll takes:
    each worker says so in one line when it starts being refused and in one when it is accepted
    again, with no traceback; its tuples flow throughout and every id is acked."""
    from kazoo.security import OPEN_ACL_UNSAFE

    cluster = make_cluster(nodes=1, slots=1)  # no credentials: the nodes are open
    out = tmp_path / "out"
    topo = id_pipeline("refused", out, 3000, workers=1, rate=300)
    cluster.submit(topo)
    wait_running(cluster, topo)
    (log_name,) = (n for n in cluster.worker_logs() if "refused" in n)

    def log_text() -> str:
        return cluster.worker_logs()[log_name]

    creds = ZkCredentials.generate()
    with ClusterState.connect(zookeeper.connect_string, root=cluster.root, credentials=creds) as upgraded:
        closed, refused = upgraded.close_open_nodes()  # what nimbus does, started with credentials
        assert closed >= 10 and refused == 0, (closed, refused)
        t0 = time.monotonic()
        # refused on every heartbeat (1 s) for several of them
        wait_for(lambda: "ZooKeeper refuses" in log_text() and time.monotonic() - t0 > 5, 60,
                 "the worker to say ZooKeeper refuses it", cluster)
        _set_acls_below(upgraded.client, cluster.root, OPEN_ACL_UNSAFE)  # accepted again
    wait_for(lambda: "accepted again" in log_text(), 60, "the worker accepted again", cluster)
    wait_spout_done(out, cluster, 120)
    stop_topology(cluster, topo.name)
    assert read_spout(out, cluster)["acked"] == list(range(3000))
    text = log_text()
    assert "Traceback" not in text, text
    refused_lines = [line for line in text.splitlines() if "ZooKeeper refuses" in line]
    accepted_lines = [line for line in text.splitlines() if "accepted again" in line]
    assert len(refused_lines) == 1 and len(accepted_lines) == 1, text
    assert "credentials" in refused_lines[0], refused_lines
