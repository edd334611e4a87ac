"""ClusterState across ZooKeeper sessions, on the real server: a session
expired with the standard trick (a second client on the same session id and password closes
it) loses its ephemeral nodes; the state registers them again in its new session."""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient

from squall.models.cluster import Endpoint, SupervisorInfo, WorkerSlot
from squall.state import ClusterState
from squall.zkserver import EmbeddedZooKeeper

pytestmark = pytest.mark.integration

SLOT = WorkerSlot("node-a", 6700)


def expire_session(zookeeper: EmbeddedZooKeeper, state: ClusterState) -> None:
    session_id, password = state.client.client_id
    other = KazooClient(hosts=zookeeper.connect_string, client_id=(session_id, password))
    other.start(timeout=10)
    other.stop()
    other.close()


def test_ephemerals_come_back_in_a_new_session(zookeeper: EmbeddedZooKeeper,
                                               cluster_state: ClusterState) -> None:
    worker = ClusterState.connect(zookeeper.connect_string, root=cluster_state.root)
    try:
        resumed: list[bool] = []
        done = threading.Event()
        worker.add_session_listener(lambda new: (resumed.append(new), done.set()))
        endpoint = Endpoint(host="127.0.0.1", port=40001, pid=1)
        worker.register_endpoint("wc", SLOT, endpoint)
        worker.register_supervisor("node-a", SupervisorInfo(host="h", ports=[6700], time_secs=0.0))
        worker.register_endpoint("gone", SLOT, endpoint)
        worker.remove_endpoint("gone", SLOT)  # removed: not registered again
        first = worker.client.client_id[0]
        assert worker.ready and worker.sessions == 1
        expire_session(zookeeper, worker)
        assert done.wait(15), "no session listener call after the session expired"
        assert resumed == [True]
        assert worker.ready and worker.sessions == 2
        assert worker.client.client_id[0] != first
        assert cluster_state.get_endpoints("wc") == {SLOT: endpoint}
        assert set(cluster_state.supervisors()) == {"node-a"}
        assert cluster_state.get_endpoints("gone") == {}
        # owned by the new session: closing it removes them
        worker.close()
        assert cluster_state.get_endpoints("wc") == {}
        assert cluster_state.supervisors() == {}
    finally:
        worker.close()
