"""Fixtures for integration tests: a real ZooKeeper (embedded, one per test session) and a
ClusterState on a fresh root per test, so tests never see each other's nodes."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.state import ClusterState
from squall.zkserver import EmbeddedZooKeeper, java_available
from squall_operator.local import LocalCluster
from kafka_fixtures import kafka_broker  # noqa: F401  (one Kafka broker per session)
from helpers import browser_missing, headless_chromium
from childproc import die_with_this_process

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


# -- a real Redis on loopback (Debian's redis-server, installed by scripts/setup) ----------------
class RedisServer:
    def __init__(self, port: int, proc: Any) -> None:
        self.host = "127.0.0.1"
        self.port = port
        self.proc = proc

    def client(self) -> Any:
        import redis

        return redis.Redis(host=self.host, port=self.port)

    def provider_config(self) -> dict[str, object]:
        return {"host": self.host, "port": self.port}


def _free_port() -> int:
    """A loopback port free now, below the ephemeral range (squall.ports.free_ports)."""
    from squall.ports import free_ports

    return free_ports(1)[0]


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """redis-server on a free loopback port in a temp dir, no persistence; killed at teardown."""
    import shutil
    import subprocess
    import time

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (scripts/setup installs Debian's)")
    workdir = tmp_path_factory.mktemp("redis")
    for _ in range(5):
        port = _free_port()
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_this_process())
        server = RedisServer(port, proc)
        deadline = time.monotonic() + 10
        up = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                server.client().ping()
                up = True
                break
            except Exception:
                time.sleep(0.05)
        if up:
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("redis-server did not start")
    try:
        yield server
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def make_cluster(zookeeper: Any, tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Start LocalClusters on the session's ZooKeeper (own root each); shut down afterwards."""
    clusters: list[LocalCluster] = []

    def make(**kwargs: Any) -> LocalCluster:
        workdir = tmp_path / f"cluster{len(clusters)}"
        workdir.mkdir()
        kwargs.setdefault("search_paths", [str(Path(__file__).resolve().parent / "topologies")])
        cluster = LocalCluster(zookeeper=zookeeper.connect_string, workdir=str(workdir), **kwargs)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.shutdown()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium (helpers.headless_chromium) for a test of the UI's pages; skipped where
    Debian's chromium and chromium-driver are not installed."""
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    with headless_chromium() as driver:
        yield driver
