"""A test's children die with it (tests/support/childproc.py): a pytest killed with SIGTERM or
SIGKILL runs no teardown, and a `squall run` it had started once ran on after it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from childproc import die_with_this_process

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")]

# a stand-in for pytest: starts a long-lived child as the tests do, prints its pid, waits
PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from childproc import die_with_this_process
    how = sys.argv[1]
    if how == "tied":
        child = subprocess.Popen(["sleep", "600"], preexec_fn=die_with_this_process())
    elif how == "tied-own-session":  # as scripts/k8s-images and the unit tier's squall() start theirs
        child = subprocess.Popen(["sleep", "600"], start_new_session=True,
                                 preexec_fn=die_with_this_process(then=lambda: os.nice(3)))
    else:
        child = subprocess.Popen(["sleep", "600"])
    print(child.pid, flush=True)
    time.sleep(600)
""")


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first); None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return None if fields[0] == "Z" else fields


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _stat(pid) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _start_parent(how: str) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how], stdout=subprocess.PIPE, text=True, env=env,
                              preexec_fn=die_with_this_process())  # noqa: PLW1509 (main thread, by design)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), f"the parent did not start its child (exit {parent.poll()})"
    return parent, int(line)


@pytest.mark.parametrize("how", ["tied", "tied-own-session"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_child_dies_with_its_killed_parent(how: str, sig: signal.Signals) -> None:
    parent, child = _start_parent(how)
    try:
        fields = _stat(child)
        assert fields is not None, "the child is not running"
        if how == "tied-own-session":  # its own session kept, and the site's own preexec_fn ran
            assert fields[3] == str(child) and fields[16] == "3", fields  # session id, nice
        parent.send_signal(sig)
        parent.wait(10)
        assert _gone_within(child, 5), f"child {child} outlived its parent (killed with {sig.name})"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_an_untied_child_outlives_its_killed_parent() -> None:
    """The control: without the helper the same child is still there once its parent is reaped
    (the kernel sends the parent-death signal before that), so the test above can fail."""
    parent, child = _start_parent("untied")
    try:
        parent.kill()
        parent.wait(10)
        assert not _gone_within(child, 0.3), "an untied child died with its parent: the test above proves nothing"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_it_refuses_a_thread_other_than_the_main_one() -> None:
    """PR_SET_PDEATHSIG fires when the starting *thread* ends: a child started from a reader
    thread would die with that thread, long before the test."""
    raised: list[BaseException] = []

    def start() -> None:
        try:
            die_with_this_process()
        except RuntimeError as e:
            raised.append(e)

    t = threading.Thread(target=start, name="reader")
    t.start()
    t.join(10)
    assert len(raised) == 1 and "'reader'" in str(raised[0]), raised
