"""squall.jvm's plain helpers, shared by the embedded ZooKeeper and Kafka broker: finding java
and reading a log's tail, with plain files and environments (no JVM started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from squall import jvm

pytestmark = pytest.mark.unit


def test_log_tail_is_the_last_bytes_or_says_there_is_no_log(tmp_path: Path) -> None:
    assert jvm.log_tail(None) == "(no log)"
    assert jvm.log_tail(str(tmp_path / "absent.log")) == "(no log)"
    log = tmp_path / "server.log"
    log.write_bytes(b"started\n" + b"x" * 5000 + b"\nfailed: Address already in use\n")
    assert jvm.log_tail(str(log), max_bytes=40).endswith("failed: Address already in use\n")
    assert len(jvm.log_tail(str(log), max_bytes=40)) == 40
    assert jvm.log_tail(str(log)).startswith("x")  # 4000 bytes by default: the start is cut


def test_find_java_on_path_then_java_home(tmp_path: Path) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    assert jvm.find_java({"PATH": ""}) is None
    assert jvm.find_java({"PATH": "", "JAVA_HOME": str(home)}) is None  # not executable
    java.chmod(0o755)
    assert jvm.find_java({"PATH": "", "JAVA_HOME": str(home)}) == str(java)
    assert jvm.find_java({"PATH": str(home / "bin")}) == str(java)
    assert not jvm.java_available({"PATH": ""})


def test_a_server_without_java_names_what_needs_it() -> None:
    class NoServer(RuntimeError):
        pass

    class Server(jvm.JvmServer):
        error = NoServer
        name = "the test server"

    with pytest.raises(NoServer, match=r"^java not found \(not on PATH and no \$JAVA_HOME/bin/java\): "
                                          r"the test server needs Java$"):
        Server(startup_timeout_s=1.0, env={"PATH": os.devnull})._java("the test server needs Java")


class FakeClock:
    """Time that passes only when slept."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_wait_ready_polls_until_ready_with_the_given_clock() -> None:
    clock = FakeClock()
    answers = iter([False, False, True])
    assert jvm.wait_ready(lambda: next(answers), lambda: None, 10.0, clock=clock, sleep=clock.sleep) is None
    assert clock.slept == [0.05, 0.05]


def test_wait_ready_gives_the_exit_status_of_a_server_that_ended_first() -> None:
    clock = FakeClock()
    statuses = iter([None, None, 3])
    assert jvm.wait_ready(lambda: False, lambda: next(statuses), 10.0, clock=clock, sleep=clock.sleep) == 3
    assert len(clock.slept) == 2


def test_wait_ready_times_out_on_the_given_clock() -> None:
    clock = FakeClock()
    polls: list[float] = []

    def ready() -> bool:
        polls.append(clock.now)
        return False

    with pytest.raises(TimeoutError, match=r"^not ready within 2 s$"):
        jvm.wait_ready(ready, lambda: None, 2.0, clock=clock, sleep=clock.sleep, interval_s=0.5)
    assert polls == [1000.0, 1000.5, 1001.0, 1001.5]


def test_a_server_that_never_gets_ready_is_stopped_after_its_timeout_on_the_injected_clock(
        tmp_path: Path) -> None:
    """A real child process that never says it is ready: the 60 s startup timeout passes on the
    injected clock, so the test waits for no real minute; the process is stopped and the error
    carries the log's tail."""
    import sys
    import time

    class NotReady(RuntimeError):
        pass

    class Server(jvm.JvmServer):
        error = NotReady
        stop_timeout_s = 5.0

        def start(self) -> Server:
            self._dir = str(tmp_path / "work")
            os.mkdir(self._dir)
            self._run([sys.executable, "-c", "print('starting', flush=True); import time; time.sleep(60)"],
                      lambda _offset: False, "the server did not come up within 60s")
            return self

        @property
        def port(self) -> int:
            return 0

    clock = FakeClock()
    server = Server(startup_timeout_s=60.0, env=None, clock=clock, sleep=clock.sleep)
    t0 = time.monotonic()
    with pytest.raises(NotReady, match=r"^the server did not come up within 60s\n--- server log \(tail\) ---\n"):
        server.start()
    assert time.monotonic() - t0 < 10
    assert sum(clock.slept) >= 60.0
    assert not server.running and server.pid is None
    assert not (tmp_path / "work").exists()  # its work dir went with it
