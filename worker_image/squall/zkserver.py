"""An embedded, throwaway ZooKeeper server for local runs and tests.

Squall keeps its cluster state in ZooKeeper (see docs/design.md). A local cluster and the
integration tests need a real server without installing one, so this module starts the ZooKeeper
that ships inside the installed ``pyspark`` package (``pyspark/jars/zookeeper-*.jar``) as a child
JVM: standalone mode, a fresh temp dir for ``zoo.cfg``, data and log, a free loopback port.

The JVM is tied to this process: it runs in its own session and, on Linux, gets SIGKILL when the
thread that started it dies (``PR_SET_PDEATHSIG``; note: the *thread*, so start it from a thread
that lives as long as the server should), so a crashed test run leaves no server behind.
``stop()`` terminates it (SIGTERM, then SIGKILL) and deletes the temp dir: nothing is kept.
``stop(keep_data=True)`` keeps the dir and the port, and a later ``start()`` runs the server again
on the same port with the same data (its sessions and nodes), as a restarted ensemble member
would: tests use it to take ZooKeeper away and bring it back.

    with EmbeddedZooKeeper() as zk:
        client = KazooClient(hosts=zk.connect_string)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import glob
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

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
_LOG4J2_CONFIG = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""
_PR_SET_PDEATHSIG = 1


class ZooKeeperError(RuntimeError):
    """The embedded server cannot be started (no java, no pyspark, or it did not come up)."""


def find_java(env: Mapping[str, str] | None = None) -> str | None:
    """Path of the ``java`` executable: on ``PATH``, else ``$JAVA_HOME/bin/java``; None if none.

    ``env`` replaces ``os.environ`` for the lookup (tests pass an empty PATH).
    """
    env = os.environ if env is None else env
    found = shutil.which("java", path=env.get("PATH", ""))
    if found:
        return found
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home, "bin", "java")
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def java_available(env: Mapping[str, str] | None = None) -> bool:
    """Whether a ``java`` executable can be found (see ``find_java``)."""
    return find_java(env) is not None


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, host: str = "127.0.0.1", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``, ``mntr``) and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _die_with_parent(parent_pid: int) -> None:  # runs in the child between fork and exec
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)


class EmbeddedZooKeeper:
    """A standalone ZooKeeper in a child JVM on a free ``127.0.0.1`` port.

    ``tick_time_ms`` bounds session timeouts: ZooKeeper clamps a client's requested session
    timeout into ``[min_session_timeout_ms, max_session_timeout_ms]``, by default
    ``[2, 20] * tick_time_ms``. Tests that need sessions to expire quickly pass a small minimum.

    Start it with ``start()`` or ``with``; ``stop()`` is idempotent and also runs at interpreter
    exit. Not thread-safe: one owner starts and stops it.
    """

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
        self._requested_port = port
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.startup_timeout_s = startup_timeout_s
        self.heap = heap
        # environment for finding java and running it; None = os.environ
        self._env = dict(os.environ if env is None else env)
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

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
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> str | None:
        """The temp dir holding zoo.cfg, the data and the log (deleted on stop)."""
        return self._dir

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> str | None:
        return os.path.join(self._dir, "zookeeper.log") if self._dir else None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> EmbeddedZooKeeper:
        """Start the server: fresh, or after ``stop(keep_data=True)`` on the same port and data."""
        if self._proc is not None:
            raise ZooKeeperError("the embedded ZooKeeper is already started")
        if self._dir is not None:
            return self._restart()
        java = find_java(self._env)
        if java is None:
            raise ZooKeeperError(
                "java not found (not on PATH and no $JAVA_HOME/bin/java): the embedded ZooKeeper "
                "needs a Java runtime, 11 or newer (e.g. apt-get install openjdk-17-jre-headless)"
            )
        jars = zookeeper_jars()
        # a free port found by binding can be taken before ZooKeeper binds it: retry on a new one
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(attempts):
            port = self._requested_port or _free_port()
            try:
                self._launch(java, jars, port)
                self._wait_ready()
                atexit.register(self.stop)
                return self
            except BaseException as exc:
                if not isinstance(exc, ZooKeeperError):
                    self.stop()
                    raise
                tail = self._log_tail()
                self.stop()
                if attempt + 1 < attempts and "Address already in use" in tail:
                    continue
                raise ZooKeeperError(f"{exc}\n--- zookeeper log (tail) ---\n{tail}") from None
        raise AssertionError("unreachable")

    def _restart(self) -> EmbeddedZooKeeper:
        java = find_java(self._env)
        if java is None:
            raise ZooKeeperError("java not found (not on PATH and no $JAVA_HOME/bin/java)")
        try:
            self._spawn(java, zookeeper_jars())
            self._wait_ready()
        except BaseException as exc:
            tail = self._log_tail()
            self.stop()
            if isinstance(exc, ZooKeeperError):
                raise ZooKeeperError(f"{exc}\n--- zookeeper log (tail) ---\n{tail}") from None
            raise
        return self  # stop(keep_data=True) left it registered at exit

    def _launch(self, java: str, jars: list[str], port: int) -> None:
        self._dir = tempfile.mkdtemp(prefix="squall-zk-")
        self._port = port
        data = os.path.join(self._dir, "data")
        os.mkdir(data)
        cfg = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={data}",
            f"clientPort={port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
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
        Path(self._dir, "log4j2.properties").write_text(_LOG4J2_CONFIG)
        self._spawn(java, jars)

    def _spawn(self, java: str, jars: list[str]) -> None:
        assert self._dir is not None
        cfg_path = os.path.join(self._dir, "zoo.cfg")
        log4j_path = os.path.join(self._dir, "log4j2.properties")
        cmd = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            os.pathsep.join(jars),
            f"-Dzookeeper.log.dir={self._dir}",
            f"-Dlog4j2.configurationFile={log4j_path}",
            "-Dzookeeper.jmx.log4j.disable=true",
            _MAIN_CLASS,
            cfg_path,
        ]
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                env=self._env,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
                close_fds=True,
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with status {self._proc.returncode} during startup"
                )
            with contextlib.suppress(OSError):
                # 'imok' comes as soon as the port is bound; 'srvr' shows a Mode once the
                # database is loaded and requests are served
                if (
                    four_letter_word(self.port, "ruok", timeout=0.5) == "imok"
                    and "Mode:" in four_letter_word(self.port, "srvr", timeout=0.5)
                ):
                    return
            time.sleep(0.05)
        raise ZooKeeperError(
            f"ZooKeeper did not answer 'ruok' on port {self._port} "
            f"within {self.startup_timeout_s:.0f}s"
        )

    def _log_tail(self, max_bytes: int = 4000) -> str:
        path = self.log_path
        if not path or not os.path.exists(path):
            return "(no log)"
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace")

    def ruok(self) -> bool:
        try:
            return four_letter_word(self.port, "ruok") == "imok"
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0, *, keep_data: bool = False) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after ``timeout_s``) and delete the temp dir, or,
        with ``keep_data``, keep the dir and the port for a later ``start()``."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    proc.wait()
        if keep_data and self._dir is not None:
            return  # still registered at exit: the kept dir is deleted then at the latest
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._port = None
        atexit.unregister(self.stop)

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self._port}" if self.running else "stopped"
        return f"<EmbeddedZooKeeper {state}>"
