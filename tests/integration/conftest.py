"""Fixtures for integration tests: a real ZooKeeper (embedded, one per test session) and a
ClusterState on a fresh root per test, so tests never see each other's nodes."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator

import pytest

from squall.state import ClusterState
from squall.zkserver import EmbeddedZooKeeper, java_available

# ZooKeeper clamps session timeouts to [MIN_SESSION_TIMEOUT_S, 20 * tick]; tests that make
# sessions expire can ask for this short one.
ZK_TICK_MS = 500
MIN_SESSION_TIMEOUT_S = 1.0


def zookeeper_unavailable_reason() -> str | None:
    if not java_available():
        return "no java on PATH (the embedded ZooKeeper needs a Java runtime)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (the embedded ZooKeeper uses its zookeeper jar)"
    return None


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[EmbeddedZooKeeper]:
    """A started EmbeddedZooKeeper shared by the whole test session; stopped (and its temp dir
    deleted) at the end. Connect with ``zookeeper.connect_string``."""
    reason = zookeeper_unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = EmbeddedZooKeeper(
        tick_time_ms=ZK_TICK_MS, min_session_timeout_ms=int(MIN_SESSION_TIMEOUT_S * 1000)
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_root() -> str:
    """A ZooKeeper root path no other test uses."""
    return f"/squall-{uuid.uuid4().hex}"


@pytest.fixture
def cluster_state(zookeeper: EmbeddedZooKeeper, zk_root: str) -> Iterator[ClusterState]:
    """A ClusterState (own client) on a fresh root; its nodes are deleted afterwards."""
    state = ClusterState.connect(zookeeper.connect_string, root=zk_root)
    try:
        yield state
    finally:
        try:
            state.client.delete(zk_root, recursive=True)
        finally:
            state.close()
