"""An embedded, throwaway ZooKeeper server for local runs and tests.

Squall keeps its cluster state in ZooKeeper (see docs/design.md). A local cluster and the
integration tests need a real server without installing one, so this module starts the ZooKeeper
that ships inside the installed ``pyspark`` package (``pyspark/jars/zookeeper-*.jar``) as a child
JVM: standalone mode, a fresh temp dir for ``zoo.cfg``, data and log, a free loopback port.

The child JVM's machinery (tied to this process, its log, start and stop) is `squall.jvm`'s
``JvmServer``. ``stop()`` terminates it (SIGTERM, then SIGKILL) and deletes the temp dir: nothing
is kept. ``stop(keep_data=True)`` keeps the dir and the port, and a later ``start()`` runs the
server again on the same port with the same data (its sessions and nodes), as a restarted
ensemble member would: tests use it to take ZooKeeper away and bring it back.

    with EmbeddedZooKeeper() as zk:
        client = KazooClient(hosts=zk.connect_string)
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import importlib.util
import os
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path

from squall.jvm import LOG4J2_CONSOLE, JvmServer, find_java, java_available
from squall.jvm import free_port as _free_port

__all__ = [
    "EmbeddedZooKeeper",
    "ZooKeeperError",
    "find_java",
    "four_letter_word",
    "java_available",
    "zookeeper_jars",
]

_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# The jars ZooKeeperServerMain needs, by file-name prefix. Loading only these (not all ~280 Spark
# jars) halves the JVM start time.
_JAR_PREFIXES = (
    "zookeeper-",
    "slf4j-api-",
    "log4j-slf4j2-impl-",
    "log4j-api-",
    "log4j-core-",
    "commons-io-",
    "commons-cli-",
    "metrics-core-",
    "snappy-java-",
    "netty-",
)


class ZooKeeperError(RuntimeError):
    """The embedded server cannot be started (no java, no pyspark, or it did not come up)."""


def zookeeper_jars() -> list[str]:
    """The jars to run ZooKeeper with, from the installed pyspark (without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperError(
            "pyspark is not installed: the embedded ZooKeeper runs the zookeeper jar that ships "
            "with pyspark: install Squall's spark extra (pip install 'squall[spark]')"
        )
    jars_dir = Path(next(iter(spec.submodule_search_locations)), "jars")
    jars = sorted(
        p
        for p in glob.glob(str(jars_dir / "*.jar"))
        if os.path.basename(p).startswith(_JAR_PREFIXES)
        and not os.path.basename(p).startswith("netty-all-")
    )
    if not any(os.path.basename(p).startswith("zookeeper-3") for p in jars):
        raise ZooKeeperError(f"no zookeeper-*.jar in {jars_dir}; is pyspark installed completely?")
    return jars


def four_letter_word(port: int, word: str, host: str = "127.0.0.1", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``, ``mntr``, ``cons``) and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class EmbeddedZooKeeper(JvmServer):
    """A standalone ZooKeeper in a child JVM on a free ``127.0.0.1`` port.

    ``tick_time_ms`` bounds session timeouts: ZooKeeper clamps a client's requested session
    timeout into ``[min_session_timeout_ms, max_session_timeout_ms]``, by default
    ``[2, 20] * tick_time_ms``. Tests that need sessions to expire quickly pass a small minimum.

    Start it with ``start()`` or ``with``; ``stop()`` is idempotent and also runs at interpreter
    exit. Not thread-safe: one owner starts and stops it.
    """

    error = ZooKeeperError
    name = "ZooKeeper"
    log_name = "zookeeper"
    stop_timeout_s = 10.0

    def __init__(
        self,
        *,
        port: int | None = None,
        tick_time_ms: int = 500,
        min_session_timeout_ms: int | None = None,
        max_session_timeout_ms: int | None = None,
        startup_timeout_s: float = 60.0,
        heap: str = "256m",
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, env=env)
        self._requested_port = port
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap = heap
        self._port: int | None = None

    # --- properties -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise ZooKeeperError("the embedded ZooKeeper is not started")
        return self._port

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> str | None:
        """The temp dir holding zoo.cfg, the data and the log (deleted on stop)."""
        return self._dir

    def _forget_ports(self) -> None:
        self._port = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> EmbeddedZooKeeper:
        """Start the server: fresh, or after ``stop(keep_data=True)`` on the same port and data."""
        if self._proc is not None:
            raise ZooKeeperError("the embedded ZooKeeper is already started")
        java = self._java(
            "the embedded ZooKeeper needs a Java runtime, 11 or newer "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
        jars = zookeeper_jars()
        if self._dir is not None:
            self._spawn(java, jars)
            return self  # stop(keep_data=True) left it registered at exit
        # a free port found by binding can be taken before ZooKeeper binds it: retry on a new one
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(attempts):
            try:
                self._launch(java, jars, self._requested_port or _free_port())
            except ZooKeeperError as exc:
                if attempt + 1 < attempts and "Address already in use" in str(exc):
                    continue
                raise
            atexit.register(self.stop)
            return self
        raise AssertionError("unreachable")

    def _launch(self, java: str, jars: list[str], port: int) -> None:
        self._dir = tempfile.mkdtemp(prefix="squall-zk-")
        self._port = port
        try:
            data = os.path.join(self._dir, "data")
            os.mkdir(data)
            cfg = [
                f"tickTime={self.tick_time_ms}",
                f"dataDir={data}",
                f"clientPort={port}",
                "clientPortAddress=127.0.0.1",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr,mntr,cons",
                "maxClientCnxns=0",
                # keep the data dir small in long local runs
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
            ]
            if self.min_session_timeout_ms is not None:
                cfg.append(f"minSessionTimeout={self.min_session_timeout_ms}")
            if self.max_session_timeout_ms is not None:
                cfg.append(f"maxSessionTimeout={self.max_session_timeout_ms}")
            Path(self._dir, "zoo.cfg").write_text("\n".join(cfg) + "\n")
            Path(self._dir, "log4j2.properties").write_text(LOG4J2_CONSOLE)
        except BaseException:
            self.stop()
            raise
        self._spawn(java, jars)

    def _spawn(self, java: str, jars: list[str]) -> None:
        assert self._dir is not None
        cmd = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            os.pathsep.join(jars),
            f"-Dzookeeper.log.dir={self._dir}",
            f"-Dlog4j2.configurationFile={os.path.join(self._dir, 'log4j2.properties')}",
            "-Dzookeeper.jmx.log4j.disable=true",
            _MAIN_CLASS,
            os.path.join(self._dir, "zoo.cfg"),
        ]
        self._run(
            cmd,
            lambda _offset: self._serving(),
            f"ZooKeeper did not answer 'ruok' on port {self._port} "
            f"within {self.startup_timeout_s:.0f}s",
        )

    def _serving(self) -> bool:
        with contextlib.suppress(OSError):
            # 'imok' comes as soon as the port is bound; 'srvr' shows a Mode once the
            # database is loaded and requests are served
            return (
                four_letter_word(self.port, "ruok", timeout=0.5) == "imok"
                and "Mode:" in four_letter_word(self.port, "srvr", timeout=0.5)
            )
        return False

    def ruok(self) -> bool:
        try:
            return four_letter_word(self.port, "ruok") == "imok"
        except OSError:
            return False
