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
