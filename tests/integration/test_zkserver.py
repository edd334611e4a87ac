"""The embedded ZooKeeper: it answers, it leaves nothing behind, it fails clearly."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from childproc import die_with_this_process
from kazoo.client import KazooClient

from squall.zkserver import EmbeddedZooKeeper, ZooKeeperError, four_letter_word, java_available

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie nobody reaped yet) within the deadline."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_ruok_and_srvr(zookeeper: EmbeddedZooKeeper) -> None:
    assert zookeeper.running
    assert zookeeper.ruok()
    assert four_letter_word(zookeeper.port, "ruok") == "imok"
    assert "Mode: standalone" in four_letter_word(zookeeper.port, "srvr")
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"


def test_kazoo_can_use_it(zookeeper: EmbeddedZooKeeper) -> None:
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=10)
    try:
        path = client.create("/zkserver-test-", b"x", sequence=True, ephemeral=True)
        assert client.get(path)[0] == b"x"
    finally:
        client.stop()
        client.close()


def test_stop_leaves_no_process_and_no_temp_dir() -> None:
    if not java_available():
        pytest.skip("no java")
    server = EmbeddedZooKeeper()
    with server:
        pid, tmp, port = server.pid, server.data_dir, server.port
        assert pid is not None and tmp is not None
        assert os.path.isfile(os.path.join(tmp, "zoo.cfg"))
        assert server.ruok()
    assert not server.running
    assert not os.path.exists(tmp)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stop() waited for it, so it is reaped, not a zombie
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with pytest.raises(ZooKeeperError, match="not started"):
        _ = server.connect_string
    server.stop()  # idempotent


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # an empty dir: no java on it, and no JAVA_HOME
    assert not java_available(env)
    server = EmbeddedZooKeeper(env=env)
    with pytest.raises(ZooKeeperError, match="java not found"):
        server.start()
    assert server.data_dir is None and server.pid is None


def test_startup_failure_reports_the_log_tail() -> None:
    if not java_available():
        pytest.skip("no java")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = EmbeddedZooKeeper(port=taken.getsockname()[1], startup_timeout_s=30)
        with pytest.raises(ZooKeeperError) as info:
            server.start()
    message = str(info.value)
    assert "zookeeper log (tail)" in message
    assert "Address already in use" in message
    assert server.data_dir is None and not server.running


def test_jvm_dies_with_its_parent() -> None:
    """PR_SET_PDEATHSIG: a parent killed with SIGKILL (no cleanup) still takes the JVM along."""
    if not java_available():
        pytest.skip("no java")
    if not sys.platform.startswith("linux"):
        pytest.skip("parent-death signal is Linux only")
    script = textwrap.dedent(
        """
        import sys, time
        from squall.zkserver import EmbeddedZooKeeper
        zk = EmbeddedZooKeeper().start()
        print(zk.pid, zk.data_dir, flush=True)
        time.sleep(600)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "worker_image"))
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, preexec_fn=die_with_this_process()
    )
    tmp, jvm = None, None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, "the child did not start ZooKeeper"
        pid_s, tmp = line.split()
        jvm = int(pid_s)
        assert not _gone(jvm, within_s=0.2)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _gone(jvm), "the ZooKeeper JVM outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if jvm is not None and not _gone(jvm, within_s=0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(jvm, signal.SIGKILL)
        if tmp:  # the parent was SIGKILLed, so nobody else removes its temp dir
            shutil.rmtree(tmp, ignore_errors=True)


def test_restart_with_its_data_on_the_same_port() -> None:
    """stop(keep_data=True) then start(): the same port and data, as a restarted server; a
    client that was connected gets its session back."""
    if not java_available():
        pytest.skip("no java")
    server = EmbeddedZooKeeper()
    with server:
        port, tmp = server.port, server.data_dir
        client = KazooClient(hosts=server.connect_string, timeout=10.0)
        client.start(timeout=10)
        try:
            session = client.client_id[0]
            client.create("/kept", b"data")
            client.create("/mine", b"e", ephemeral=True)
            server.stop(keep_data=True)
            assert not server.running and os.path.isdir(str(tmp)) and server.port == port
            server.start()
            assert server.running and server.port == port
            assert client.get("/kept")[0] == b"data"  # waits for the reconnection
            assert client.client_id[0] == session
            assert client.exists("/mine") is not None
        finally:
            client.stop()
            client.close()
    assert not os.path.exists(str(tmp))
