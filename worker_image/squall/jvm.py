"""A child JVM tied to this process: what the embedded ZooKeeper and Kafka broker share.

Local runs and the integration tests need a real ZooKeeper (``squall.zkserver``) and a real
Kafka broker (``squall.kafka.broker``) without installing either, so both run the server's jars
as a child JVM. `JvmServer` is their common part: finding ``java``, a work dir holding the
server's config and its log file, starting the JVM and waiting until it serves, and stopping it.

The JVM is tied to this process: it runs in its own session and, on Linux, gets SIGKILL when the
thread that started it dies (``PR_SET_PDEATHSIG``; the *thread*, so start it from a thread that
lives as long as the server should), so a crashed test run leaves no server behind. ``stop()``
sends SIGTERM, then SIGKILL after a grace period, and deletes the work dir; ``stop(keep_data=True)``
keeps the dir (and the ports) so that a later ``start()`` brings the same server back with its
data. A subclass says how to prepare, launch and recognise a ready server.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from squall.ports import free_ports

__all__ = ["LOG4J2_CONSOLE", "JvmServer", "find_java", "free_port", "java_available", "log_tail", "wait_ready"]

# log4j2 to the console (the JVM's stdout goes to the server's log file); a server adds loggers
LOG4J2_CONSOLE = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""
_PR_SET_PDEATHSIG = 1
_NO_JAVA = "java not found (not on PATH and no $JAVA_HOME/bin/java)"


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


def free_port() -> int:
    """A loopback port free now, below the ephemeral range (see `squall.ports.free_ports`)."""
    return free_ports(1)[0]


def log_tail(path: str | None, max_bytes: int = 4000) -> str:
    """The last ``max_bytes`` of a log file, or ``(no log)``."""
    if not path or not os.path.exists(path):
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        return f.read().decode("utf-8", "replace")


def wait_ready(
    ready: Callable[[], bool],
    exit_status: Callable[[], int | None],
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval_s: float = 0.05,
) -> int | None:
    """Poll until ``ready()``: None then; the process's status if ``exit_status()`` says it ended
    first; ``TimeoutError`` once ``timeout_s`` have passed on ``clock``."""
    deadline = clock() + timeout_s
    while clock() < deadline:
        status = exit_status()
        if status is not None:
            return status
        if ready():
            return None
        sleep(interval_s)
    raise TimeoutError(f"not ready within {timeout_s:g} s")


def die_with_parent(parent_pid: int) -> None:  # runs in the child between fork and exec
    """Own session, and SIGKILL when the starting thread dies (Linux)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)


class JvmServer:
    """One server in a child JVM: its work dir and log, start, wait for ready, stop.

    A subclass sets the class attributes and implements ``start`` (with `_java`, `_run`) and
    ``port``. Start it with ``start()`` or ``with``; ``stop()`` is idempotent and also runs at
    interpreter exit. Not thread-safe: one owner starts and stops it.
    """

    error: ClassVar[type[RuntimeError]] = RuntimeError  # what a failed start raises
    name: ClassVar[str] = "the server"  # in messages: "{name} exited with status 1 ..."
    log_name: ClassVar[str] = "server"  # the log file is <work dir>/<log_name>.log
    stop_timeout_s: ClassVar[float] = 10.0  # SIGTERM's grace before SIGKILL

    def __init__(
        self,
        *,
        startup_timeout_s: float,
        env: Mapping[str, str] | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.startup_timeout_s = startup_timeout_s
        # what waiting for the server to come up counts and sleeps with (tests pass their own)
        self._clock = clock
        self._sleep = sleep
        # environment for finding java and running it; None = os.environ
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

    # --- what a subclass provides ---------------------------------------------------------
    def start(self) -> Self:
        raise NotImplementedError

    @property
    def port(self) -> int:
        raise NotImplementedError

    def _forget_ports(self) -> None:
        """Drop the ports when the work dir goes (a fresh ``start()`` picks new ones)."""

    # --- properties -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> str | None:
        return os.path.join(self._dir, f"{self.log_name}.log") if self._dir else None

    # --- lifecycle ------------------------------------------------------------------------
    def _java(self, needs: str) -> str:
        """The ``java`` to run; the error says what ``needs`` it when there is none."""
        java = find_java(self._env)
        if java is None:
            raise self.error(f"{_NO_JAVA}: {needs}")
        return java

    def _run(self, cmd: list[str], ready: Callable[[int], bool], timeout_message: str) -> None:
        """Launch ``cmd`` in the work dir, its output appended to the log, and wait until
        ``ready(log offset at launch)``. On failure the JVM is stopped (the work dir too, unless
        kept) and the error carries the log's tail."""
        assert self._dir is not None and self.log_path is not None
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        try:
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self._dir,
                    env=self._env,
                    preexec_fn=functools.partial(die_with_parent, os.getpid()),
                    close_fds=True,
                )
            self._wait_ready(lambda: ready(offset), timeout_message)
        except BaseException as exc:
            tail = log_tail(self.log_path)
            self.stop()
            if isinstance(exc, self.error):
                raise self.error(f"{exc}\n--- {self.log_name} log (tail) ---\n{tail}") from None
            raise

    def _wait_ready(self, ready: Callable[[], bool], timeout_message: str) -> None:
        assert self._proc is not None
        try:
            status = wait_ready(ready, self._proc.poll, self.startup_timeout_s,
                                clock=self._clock, sleep=self._sleep)
        except TimeoutError:
            raise self.error(timeout_message) from None
        if status is not None:
            raise self.error(f"{self.name} exited with status {status} during startup")

    def _log_tail(self, max_bytes: int = 4000) -> str:
        return log_tail(self.log_path, max_bytes)

    def stop(self, timeout_s: float | None = None, *, keep_data: bool = False) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after ``timeout_s``, by default
        ``stop_timeout_s``) and delete the work dir, or, with ``keep_data``, keep the dir and
        the ports for a later ``start()`` (still registered at exit: the kept dir is deleted
        then at the latest)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        if not keep_data:
            self._cleanup()

    def kill(self) -> None:
        """SIGKILL, keeping the data and ports: a crash; ``start()`` brings it back."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def _cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._forget_ports()
        atexit.unregister(self.stop)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self.port}" if self.running else "stopped"
        return f"<{type(self).__name__} {state}>"
