"""`check_topology` with its imports in a child process, under a time limit.

Checking a topology's classes imports the user's modules (`squall.classload`), and a module may
do anything at import: hang on a network call, `sys.exit()`, `os._exit()`, start threads.
`squall validate`, `squall run` and `squall build` must refuse such a topology, not hang or vanish
with it, so they run the check here (the operator imports no user code: it checks the spec with
`resolve_classes=False`): a child process (forked when the caller has a single thread, as the commands
do; otherwise a new `python -m squall.classcheck`) imports the classes and reports each import
before it starts, then the outcome; the parent reads that with a deadline. On
timeout, or if the child ends without an outcome, the problem names the module and the field
(`spec.bolts[0].class`) whose import was under way, and the child's process group is killed (so
nothing a module started outlives the check). The worker, which needs the classes themselves,
imports in-process with `check_topology`.

Protocol: the parent hands over the topology, `sys.path` and the search paths (a JSON line on a
spawned child's stdin) and keeps a pipe open that the child watches: it exits when the pipe
closes (the parent died). The child answers with JSON lines on a pipe of its own (its stdout
goes to stderr, so what a module prints does not mix in): `{"importing": [path, class]}` before
each import, then `{"streams": ...}` or `{"problems": [...]}`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from squall.errors import NO_VALUE, Problem, TopologyError
from squall.models.v1alpha1 import StreamSpec, Topology
from squall.validation import ResolvedTopology, check_topology

__all__ = ["DEFAULT_IMPORT_TIMEOUT", "check_topology_isolated"]

# Seconds for importing every component class of a topology. Generous: importing pyspark alone
# takes several seconds on a busy machine.
DEFAULT_IMPORT_TIMEOUT = 60.0
# What the child may write to the protocol channel (a topology is at most 1 MiB).
_MAX_REPLY_BYTES = 16 << 20


def check_topology_isolated(
    topo: Topology,
    *,
    search_paths: Iterable[str | Path] = (),
    source: str | None = None,
    timeout: float = DEFAULT_IMPORT_TIMEOUT,
) -> ResolvedTopology:
    """`check_topology(topo, resolve_classes=True, ...)` with the imports in a child process.

    Raises `TopologyError` as `check_topology` does, plus a problem at the field whose import
    did not finish within `timeout` seconds or ended the child process. The result's `classes`
    is empty (the classes live in the child); its `streams` are those the classes declare.
    """
    request = {
        "topology": topo.model_dump(mode="json", by_alias=True),
        "sys_path": list(sys.path),
        "search_paths": [str(p) for p in search_paths],
    }
    child = _fork(request) if _can_fork() else _spawn(request)
    try:
        reply = _read_reply(child, timeout)
    finally:
        child.kill()
    if "streams" in reply:
        streams = {
            comp: {name: StreamSpec.model_validate(spec) for name, spec in by_name.items()}
            for comp, by_name in reply["streams"].items()
        }
        return ResolvedTopology(topo, {}, streams)
    problems = [
        Problem(path, value if has_value else NO_VALUE, message)
        for path, has_value, value, message in reply["problems"]
    ]
    raise TopologyError(problems, source)


def _can_fork() -> bool:
    # A fork starts in milliseconds with everything already imported, where a new interpreter
    # takes about half a second; but forking a process with threads (the operator) can copy a
    # lock another thread held, so those spawn.
    return hasattr(os, "fork") and threading.active_count() == 1


@dataclasses.dataclass
class _Child:
    pid: int
    channel: int  # the child's replies
    keepalive: int  # the child exits when this closes
    wait: Callable[[float], int | None]  # the exit code, or None if still running after that

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # its own group: whatever a module started too
        except ProcessLookupError:
            pass
        self.wait(10.0)
        for fd in (self.channel, self.keepalive):
            try:
                os.close(fd)
            except OSError:
                pass


def _spawn(request: dict[str, Any]) -> _Child:
    proc = subprocess.Popen(
        [sys.executable, "-m", "squall.classcheck"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    keepalive, channel = os.dup(proc.stdin.fileno()), os.dup(proc.stdout.fileno())
    proc.stdout.close()
    try:
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
    except BrokenPipeError:  # the child is gone already: the reader says how
        pass
    proc.stdin.close()  # the dup keeps the pipe open

    def wait(timeout: float) -> int | None:
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    return _Child(proc.pid, channel, keepalive, wait)


def _fork(request: dict[str, Any]) -> _Child:
    channel_r, channel_w = os.pipe()
    alive_r, alive_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # else the child would hold a copy of the buffers
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.setsid()
            os.close(channel_r)
            os.close(alive_w)
            _check_in_child(request, os.fdopen(channel_w, "w", encoding="utf-8"),
                            os.fdopen(alive_r, "rb"))
        finally:
            os._exit(70)
    os.close(channel_w)
    os.close(alive_r)

    def wait(timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return -1
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    return _Child(pid, channel_r, alive_w, wait)


def _read_reply(child: _Child, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    importing: tuple[str, str] | None = None
    buf = b""
    total = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return _cut_off(importing, f"did not finish within {timeout:g} s (the import "
                            "timeout; `--import-timeout` changes it)")
        ready, _, _ = select.select([child.channel], [], [], left)
        if not ready:
            continue
        chunk = os.read(child.channel, 65536)
        if not chunk:
            # closed its end of the channel and went on (a module's doing) or ended
            code = child.wait(5.0)
            return _cut_off(importing, f"ended the process (exit code {code})")
        total += len(chunk)
        if total > _MAX_REPLY_BYTES:
            return _cut_off(importing, "wrote too much to the check's channel")
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:  # only a module writing to the channel's descriptor does this
                return _cut_off(importing, "wrote into the check's channel")
            if "importing" in message:
                importing = (message["importing"][0], message["importing"][1])
            else:
                reply: dict[str, Any] = message
                return reply


def _cut_off(importing: tuple[str, str] | None, what: str) -> dict[str, Any]:
    if importing is None:
        return {"problems": [["", False, None, f"checking the component classes {what}"]]}
    path, class_path = importing
    module = class_path.partition(":")[0]
    return {"problems": [[path, True, class_path, f"importing module '{module}' {what}"]]}


# -- the child ------------------------------------------------------------------------------------


def _exit_when_orphaned(alive: IO[bytes]) -> None:
    alive.read()  # returns at EOF: the parent closed the pipe or died
    os._exit(3)


def _check_in_child(request: dict[str, Any], channel: IO[str], alive: IO[bytes]) -> None:
    os.dup2(2, 1)  # what modules print goes to stderr, not into the protocol
    threading.Thread(target=_exit_when_orphaned, args=(alive,), daemon=True).start()
    sys.path[:] = request["sys_path"]

    def send(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message, default=str) + "\n")
        channel.flush()

    def before_import(path: str, class_path: str) -> None:
        send({"importing": [path, class_path]})

    try:
        topo = Topology.model_validate(request["topology"])
        resolved = check_topology(topo, resolve_classes=True,
                                  search_paths=request["search_paths"],
                                  before_import=before_import)
    except TopologyError as exc:
        send({"problems": [[p.path, p.value is not NO_VALUE,
                            None if p.value is NO_VALUE else p.value, p.message]
                           for p in exc.problems]})
    except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
        send({"problems": [["", False, None,
                            f"checking the component classes failed: {type(exc).__name__}: {exc}"]]})
    else:
        send({"streams": {comp: {name: spec.model_dump(mode="json") for name, spec in by.items()}
                          for comp, by in resolved.streams.items()}})
    # no interpreter shutdown: threads a module started, or its atexit hooks, could hang it
    os._exit(0)


if __name__ == "__main__":
    _request = json.loads(sys.stdin.buffer.readline())
    _check_in_child(_request, os.fdopen(os.dup(1), "w", encoding="utf-8"), sys.stdin.buffer)
