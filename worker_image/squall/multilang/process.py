"""One multilang subprocess: started, greeted, read and written by threads, and stopped.

Storm's `ShellProcess`: the command runs in its working directory; the first message is the
handshake (`pidDir`, `conf`, `context`); the child creates a file named by its pid in `pidDir`
and answers `{"pid": N}`. After that a reader thread decodes the child's stdout into a bounded
queue (when it is full the reader waits, and so does the child's next write: backpressure), a
writer thread writes what `send` queues (bounded too: `send` waits at most its timeout, so a
child that stops reading is noticed as hung, not waited on forever), and a third thread logs the
child's stderr. When stdout ends, the reader queues a `Died` with the exit code and the last
lines of stderr.

No orphans: the child is its own process group leader and, on Linux, gets SIGKILL when the
worker thread that started it ends (PR_SET_PDEATHSIG); `stop` kills the whole group.
"""

from __future__ import annotations

import collections
import ctypes
import io
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from squall.multilang.serializers import DEFAULT_MAX_BYTES, FrameError, Serializer

__all__ = ["Died", "ShellProcess", "SubprocessError"]

log = logging.getLogger("squall.multilang")

READ_QUEUE: Final = 1024  # decoded messages from the child, waiting for the executor
WRITE_QUEUE: Final = 1024  # encoded messages for the child, waiting for the pipe
STDERR_LINES: Final = 20  # kept for the error that reports the child's death
_PR_SET_PDEATHSIG: Final = 1
EARLY_COMMANDS: Final = frozenset({"log", "error", "metrics"})


class SubprocessError(Exception):
    """The subprocess died, hung, or broke the protocol: reported as the component's error."""


@dataclass(frozen=True)
class Died:
    """The child's stdout ended (or carried something that is not a message)."""

    code: int | None
    stderr: str
    reason: str = ""


def _child_setup() -> None:
    os.setpgid(0, 0)  # a group of its own: stop() kills what it started too
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass


class ShellProcess:
    def __init__(self, command: Sequence[str], cwd: str | Path, serializer: Serializer, name: str,
                 env: Mapping[str, str] | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.command = list(command)
        self.cwd = str(cwd)
        self.serializer = serializer
        self.name = name  # "component task N", for the logs
        self.env = dict(env) if env is not None else None
        self.max_bytes = max_bytes
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.inbox: queue.Queue[Any] = queue.Queue(READ_QUEUE)
        self.outbox: queue.Queue[bytes | None] = queue.Queue(WRITE_QUEUE)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.threads: list[threading.Thread] = []
        self.early: list[dict[str, Any]] = []  # log/error/metrics sent before the pid

    # -- start ----------------------------------------------------------------------------------
    def launch(self, conf: Mapping[str, Any], context: Mapping[str, Any], pid_dir: str | Path,
               timeout: float) -> int:
        """Start the child and do the handshake; the child's pid. SubprocessError if it cannot
        start, dies, or does not answer within `timeout` seconds."""
        try:
            self.proc = subprocess.Popen(
                self.command, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=self.env, preexec_fn=_child_setup, bufsize=0)
        except OSError as exc:
            raise SubprocessError(f"cannot start {self.command!r} in {self.cwd}: {exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        for target, args, what in ((self._read, (self.proc.stdout,), "read"),
                                   (self._write, (self.proc.stdin,), "write"),
                                   (self._stderr, (self.proc.stderr,), "stderr")):
            t = threading.Thread(target=target, args=args, name=f"multilang-{what} {self.name}", daemon=True)
            t.start()
            self.threads.append(t)
        self.send({"pidDir": str(pid_dir), "conf": dict(conf), "context": dict(context)}, timeout)
        while True:
            msg = self.receive(timeout)
            if isinstance(msg, dict) and msg.get("command") in EARLY_COMMANDS and len(self.early) < READ_QUEUE:
                # storm.js lets `initialize` log before it sends the pid: kept for the component
                self.early.append(msg)
                continue
            break
        if not isinstance(msg, dict) or not isinstance(msg.get("pid"), int):
            raise SubprocessError(f"the handshake's answer should be {{\"pid\": N}}, got {msg!r}")
        self.pid = msg["pid"]
        return self.pid

    # -- the pipes ------------------------------------------------------------------------------
    def send(self, msg: Any, timeout: float) -> None:
        """Queue `msg` for the child; SubprocessError when the child has not taken what was
        queued before within `timeout` seconds (it stopped reading)."""
        self.send_many((msg,), timeout)

    def send_many(self, msgs: Sequence[Any], timeout: float) -> None:
        """`send` for several messages, written to the pipe together (one write, one wake-up
        of the writer thread)."""
        encode = self.serializer.encode
        data = b"".join(encode(m) for m in msgs)
        try:
            self.outbox.put(data, timeout=timeout)
        except queue.Full:
            raise SubprocessError(f"the subprocess read nothing for {timeout:g} s "
                                  "(topology.subprocess.timeout.secs)") from None

    def receive(self, timeout: float) -> Any:
        """The child's next message; SubprocessError when it died or said nothing for
        `timeout` seconds."""
        try:
            msg = self.inbox.get(timeout=timeout)
        except queue.Empty:
            raise SubprocessError(f"the subprocess sent nothing for {timeout:g} s "
                                  "(topology.subprocess.timeout.secs)") from None
        if isinstance(msg, Died):
            self.inbox.put(msg)  # every later receive says so too
            raise SubprocessError(self.death_message(msg))
        return msg

    def receive_nowait(self) -> Any:
        """The child's next message if one is there, else None (a Died raises, as `receive`)."""
        try:
            msg = self.inbox.get_nowait()
        except queue.Empty:
            return None
        if isinstance(msg, Died):
            self.inbox.put(msg)
            raise SubprocessError(self.death_message(msg))
        return msg

    def death_message(self, died: Died) -> str:
        code = died.code
        if code is None:
            how = "closed its stdout"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        text = f"the subprocess {self.command!r} (pid {self.pid}) {how}"
        if died.reason:
            text += f": {died.reason}"
        if died.stderr:
            text += "; its last stderr lines:\n" + died.stderr
        return text

    def _read(self, out: IO[bytes]) -> None:
        decoder = self.serializer.decoder(self.max_bytes)
        reason = ""
        try:
            while True:
                data = out.read(65536)  # a raw pipe (bufsize=0): what is there, one system call
                if not data:
                    break
                for msg in decoder.feed(data):
                    self.inbox.put(msg)
        except FrameError as exc:
            reason = f"it wrote something that is not a {self.serializer.name} message: {exc}"
        except (OSError, ValueError):
            pass
        code: int | None = None
        proc = self.proc
        if proc is not None:
            if reason:
                self._kill_group()
            try:
                code = proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                code = None
        # let the stderr thread finish its last lines (it ends at EOF, soon after the exit)
        for t in self.threads[2:]:
            t.join(1.0)
        self.inbox.put(Died(code, "\n".join(self.stderr_tail), reason))

    def _write(self, stdin: IO[bytes]) -> None:
        try:
            while True:
                data = self.outbox.get()
                if data is None:
                    break
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError):
            pass  # the child is gone: the reader reports it
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def _stderr(self, err: IO[bytes]) -> None:
        for raw in io.BufferedReader(err, 8192):  # type: ignore[type-var]
            line = raw.decode(errors="replace").rstrip()
            self.stderr_tail.append(line)
            log.info("%s stderr: %s", self.name, line)

    # -- stop -----------------------------------------------------------------------------------
    def _kill_group(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float = 1.0) -> None:
        """Close the child's stdin, give it `grace` seconds, then kill its process group."""
        proc = self.proc
        if proc is None:
            return
        try:
            self.outbox.put_nowait(None)
        except queue.Full:
            pass
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        self._kill_group()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
        # the writer may wait on a full pipe of a dead child: the closed pipe ends it
        for f in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(2.0)
