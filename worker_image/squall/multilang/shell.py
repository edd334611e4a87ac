"""ShellBolt and ShellSpout: Storm's multilang components, on Squall's component API.

A shell component runs a command (`node splitsentence.js`, `python3 spout.py`) per task and
speaks Storm's multilang protocol with it over stdin/stdout (see `squall.multilang.process`
for the pipes, `squall.multilang.serializers` for the framing). The topology file declares it
with a `shell` block instead of a `class` (docs/topology.md, "Components in other languages");
the model fills in `class: squall.multilang:ShellBolt` (or ShellSpout) and hands the block to
the component as its config key `squall.multilang.shell`.

Everything the collector is asked to do happens on the executor's thread, as for a Python
component. A bolt's `execute` sends the tuple and then a `__heartbeat` tuple, and handles the
child's messages (emits, acks, fails, logs, errors, metrics, answering `need_task_ids`) until
the child answers the heartbeat with `sync`: by then the child has handled the tuple (Storm's
adapters read their input in order). A child that acks later (an async JavaScript callback, a
bolt that batches) has those acks handled at the next tuple, or the next tick if the bolt asks
for ticks. Between tuples the executor calls the bolt's `idle_step` (squall.worker.bolt): as
Storm's ShellBolt heartbeat timer, a child that has not synced for `HEARTBEAT_SECS` gets a
heartbeat tuple, and the late acks and emits of an idle child are handled then. A spout's `next_tuple`, `ack`, `fail`, `activate` and `deactivate` send Storm's
command and handle messages until `sync`, exactly as Storm's ShellSpout.

When the child dies, hangs (no answer within `topology.subprocess.timeout.secs`, to a tuple or
to an idle heartbeat) or breaks the protocol, the component reports it as its error (with the exit code and the last lines of the
child's stderr), fails every input the child held (their spouts replay them), and starts the
command again, as a Python bolt that raises reports the error, fails its input and goes on.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from squall.components import (
    TICK_STREAM,
    Bolt,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
    Tuple,
)
from squall.multilang import adapters
from squall.multilang.process import ShellProcess, SubprocessError
from squall.multilang.serializers import CONFIG_KEY as SERIALIZER_KEY
from squall.multilang.serializers import Serializer, serializer_for
from squall.usermetrics import MetricError

__all__ = ["SHELL_CONFIG", "TIMEOUT_CONFIG", "ShellBolt", "ShellError", "ShellSpout", "find_file"]

SHELL_CONFIG: Final = "squall.multilang.shell"  # {"command": [...], "files": [...]}
TIMEOUT_CONFIG: Final = "topology.subprocess.timeout.secs"  # Storm's key
DEFAULT_TIMEOUT: Final = 30.0  # Storm's default is supervisor.worker.timeout.secs: 30
HEARTBEAT_STREAM: Final = "__heartbeat"
SYSTEM_COMPONENT: Final = "__system"
SYSTEM_TASK: Final = -1
MAX_METRICS: Final = 1000  # refused metric names remembered (each reported once)
MAX_RESTART_DELAY: Final = 5.0
# an idle bolt's child gets a heartbeat tuple this long after its last sync (Storm's ShellBolt
# heartbeat timer runs every second)
HEARTBEAT_SECS: Final = 1.0
# Storm's log levels (storm.py / storm.js) -> Python's
LOG_LEVELS: Final = {0: 5, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}

log = logging.getLogger("squall.multilang")


class ShellError(Exception):
    """An error the subprocess reported (`{"command": "error", "msg": ...}`)."""


def find_file(name: str, paths: Sequence[str | Path] = ()) -> Path | None:
    """`name` (a relative path) in the first of `paths`, then of `sys.path`'s directories, that
    has it: where component modules are found too (the topology file's directory under
    `squall run`, the image's code directories on Kubernetes)."""
    for base in [*paths, *sys.path]:
        if not base:
            continue
        candidate = Path(base) / name
        if candidate.exists():
            return candidate
    return None


class _Shell:
    """What ShellBolt and ShellSpout share: the child's start, restart and stop, and the
    messages both kinds of component may send (log, error, metrics)."""

    conf: Mapping[str, Any]
    context: TopologyContext
    kind = "component"
    # each step waits for the child's answer: the executor runs on a thread of its own, not in
    # the worker's engine loop (squall.worker.engine)
    isolated = True

    def _report(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _shell_setup(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        spec = conf.get(SHELL_CONFIG)
        if not isinstance(spec, Mapping) or not spec.get("command"):
            raise ValueError(f"{type(self).__name__} needs its command: declare the component with "
                             f"`shell: {{command: [...]}}` (config key {SHELL_CONFIG})")
        self.command: list[str] = [str(c) for c in spec["command"]]
        self.files: list[str] = [str(f) for f in spec.get("files") or ()]
        self.serializer: Serializer = serializer_for(conf.get(SERIALIZER_KEY) or "json")
        raw = conf.get(TIMEOUT_CONFIG)
        self.timeout = float(raw) if isinstance(raw, (int, float)) and raw > 0 else DEFAULT_TIMEOUT
        self.name = f"{context.component_id} task {context.task_id}"
        self.user_log = logging.getLogger(f"squall.multilang.{context.component_id}")
        # the last value the child sent for each metric name, read by the task's gauge of that
        # name (`storm.rpcMetrics(name, value)`); names the task's metrics refused
        self.metrics: dict[str, Any] = {}
        self.refused_metrics: set[str] = set()
        self.restarts = 0
        self.workdir = Path(tempfile.mkdtemp(prefix=f"squall-multilang-{context.component_id}-{context.task_id}-"))
        self.pid_dir = self.workdir / ".pids"
        self.pid_dir.mkdir()
        self.proc: ShellProcess | None = None
        try:
            self._stage_files()
            self._start()
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)  # prepare/open failed: no cleanup comes
            raise

    def _stage_files(self) -> None:
        """Storm's resources directory: the component's files and Storm's adapters, copied (a
        Python child resolves a symlinked script to its target's directory for its imports)."""
        for name, path in adapters.find().items():
            shutil.copy2(path, self.workdir / name)
        for name in self.files:
            src = find_file(name)
            if src is None:
                raise FileNotFoundError(f"{self.name}: file {name!r} of shell.files is in none of "
                                        "the worker's code directories (sys.path)")
            dest = self.workdir / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest)

    def _storm_context(self) -> dict[str, Any]:
        """Storm's TopologyContext.toJSONString: task ids and component mappings."""
        ctx = self.context
        task_component = {str(t): c for t, c in ctx.task_to_component().items()}
        streams = {s: ctx.output_fields(s) for s in ctx.this_streams()}
        return {
            "taskid": ctx.task_id,
            "componentid": ctx.component_id,
            "task->component": task_component,
            "streams": sorted(streams),
            "stream->outputfields": streams,
        }

    def _start(self) -> None:
        proc = ShellProcess(self.command, self.workdir, self.serializer, self.name)
        storm_conf = {k: v for k, v in self.conf.items() if k != SHELL_CONFIG}
        try:
            pid = proc.launch(storm_conf, self._storm_context(), self.pid_dir, self.timeout)
        except SubprocessError:
            proc.stop(0)
            raise
        self.proc = proc
        log.info("%s: started %s (pid %d) in %s", self.name, " ".join(self.command), pid, self.workdir)
        for msg in proc.early:
            self._common(msg["command"], msg, self._report)

    def _restart(self, exc: BaseException, report: Any) -> None:
        """The child died, hung or broke the protocol: report it, stop it, start it again
        (after a delay that grows with consecutive restarts, at most 5 s)."""
        report(ShellError(f"{self.name}: {exc}"))
        if self.proc is not None:
            self.proc.stop(0)
            self.proc = None
        delay = min(0.1 * (2 ** self.restarts) - 0.1, MAX_RESTART_DELAY)
        self.restarts += 1
        if delay > 0:
            time.sleep(delay)
        try:
            self._start()
        except (SubprocessError, OSError) as again:
            report(ShellError(f"{self.name}: restarting the subprocess failed: {again}"))

    def _ensure_running(self) -> ShellProcess:
        if self.proc is None:
            self._start()
        assert self.proc is not None
        return self.proc

    def _common(self, command: Any, msg: Mapping[str, Any], report: Any) -> bool:
        """log, error, metrics; False for another command."""
        if command == "log":
            level = msg.get("level", 2)
            self.user_log.log(LOG_LEVELS.get(level, logging.INFO) if isinstance(level, int) else logging.INFO,
                              "%s: %s", self.name, msg.get("msg"))
        elif command == "error":
            report(ShellError(str(msg.get("msg"))))
        elif command == "metrics":
            name = msg.get("name")
            if not isinstance(name, str):
                raise SubprocessError(f"a metrics message without a name: {msg!r}")
            if name not in self.metrics:
                if name in self.refused_metrics:
                    return True
                try:  # the task's gauge of that name: on /metrics, the UI and the reporters
                    self.context.register_gauge(name, self._gauge(name))
                except MetricError as exc:  # a bad name, too many: said once per name, then ignored
                    if len(self.refused_metrics) < MAX_METRICS:
                        self.refused_metrics.add(name)
                        report(ShellError(f"{self.name}: metric from the subprocess refused: {exc}"))
                    return True
            self.metrics[name] = msg.get("params")
        else:
            return False
        return True

    def _gauge(self, name: str) -> Callable[[], float]:
        """The gauge of metric `name`: the last value the child sent (a non-number: left out of
        /metrics, said once in the log)."""
        return lambda: float(self.metrics[name])

    def _shell_close(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
        shutil.rmtree(self.workdir, ignore_errors=True)


class ShellBolt(_Shell, Bolt):
    """Storm's ShellBolt: a bolt whose `execute` runs in a subprocess."""

    kind = "bolt"

    def _report(self, exc: BaseException) -> None:
        self.collector.report_error(exc)

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        self.inputs: dict[str, Tuple] = {}  # tuples the child holds, by the id it was given
        self.ids = itertools.count(1)
        self.clock = time.monotonic  # the executor's clock, which `idle_step` is given
        self._shell_setup(conf, context)
        self.last_sync = self.clock()

    def execute(self, tup: Tuple) -> None:
        tid = str(next(self.ids))
        self.inputs[tid] = tup
        try:
            proc = self._ensure_running()
            self._drain(proc)
            system = tup.stream == TICK_STREAM
            msg = {"id": tid, "comp": SYSTEM_COMPONENT if system else tup.source_component,
                   "stream": tup.stream, "task": SYSTEM_TASK if system else tup.source_task,
                   "tuple": list(tup.values)}
            self._heartbeat(proc, msg)
        except (SubprocessError, OSError) as exc:
            self._fail_held()
            self._restart(exc, self.collector.report_error)
        if tup.stream == TICK_STREAM:
            self.inputs.pop(tid, None)  # nothing to ack: ticks are not anchored

    def idle_step(self, now: float) -> float:
        """Between tuples (the executor calls it every step with `now` from its monotonic
        clock): a heartbeat tuple when the child has not synced for `HEARTBEAT_SECS`, its
        messages handled until it syncs. No sync within `topology.subprocess.timeout.secs`:
        the child is hung, and is reported, killed and started again, what it held failed.
        How long until the next heartbeat is due."""
        due = self.last_sync + HEARTBEAT_SECS
        if now < due:
            return due - now
        try:
            proc = self._ensure_running()
            self._drain(proc)
            self._heartbeat(proc)
        except (SubprocessError, OSError) as exc:
            self._fail_held()
            self._restart(exc, self.collector.report_error)
            self.last_sync = self.clock()  # the new child's first heartbeat a period from now
        return HEARTBEAT_SECS

    def _heartbeat(self, proc: ShellProcess, before: dict[str, Any] | None = None) -> None:
        """Send `before` (a tuple, if any) and a heartbeat tuple after it, and handle the
        child's messages until its `sync`."""
        beat = {"id": f"hb{next(self.ids)}", "comp": SYSTEM_COMPONENT, "stream": HEARTBEAT_STREAM,
                "task": SYSTEM_TASK, "tuple": []}
        proc.send_many((beat,) if before is None else (before, beat), self.timeout)
        while not self._handle(proc, proc.receive(self.timeout)):
            pass
        self.restarts = 0
        self.last_sync = self.clock()

    def _drain(self, proc: ShellProcess) -> None:
        while (msg := proc.receive_nowait()) is not None:
            self._handle(proc, msg)

    def _fail_held(self) -> None:
        held, self.inputs = self.inputs, {}
        for tup in held.values():
            if tup.stream != TICK_STREAM:
                self.collector.fail(tup)

    def _handle(self, proc: ShellProcess, msg: Any) -> bool:
        """One message from the child; True for `sync`."""
        if not isinstance(msg, dict):
            raise SubprocessError(f"expected a command (a map), got {msg!r}")
        command = msg.get("command")
        collector = self.collector
        if command == "sync":
            return True
        if command == "emit":
            anchors = []
            raw = msg.get("anchors") or []
            for a in [raw] if isinstance(raw, str) else raw:
                t = self.inputs.get(str(a))
                if t is None:
                    raise SubprocessError(f"anchored onto {a!r} after ack/fail (or an id never sent)")
                anchors.append(t)
            stream = msg.get("stream") or "default"
            values = msg.get("tuple")
            if not isinstance(values, list):
                raise SubprocessError(f"an emit without a tuple (a list): {msg!r}")
            task = msg.get("task")
            if task:
                collector.emit_direct(int(task), values, stream, anchors)
            else:
                ids = collector.emit(values, stream, anchors)
                if msg.get("need_task_ids", True) is not False:
                    proc.send(list(ids), self.timeout)
        elif command in ("ack", "fail"):
            t = self.inputs.pop(str(msg.get("id")), None)
            if t is None:
                raise SubprocessError(f"{command}ed a non-existent or already acked/failed id: {msg.get('id')!r}")
            (collector.ack if command == "ack" else collector.fail)(t)
        elif not self._common(command, msg, collector.report_error):
            raise SubprocessError(f"unknown command {command!r} from a bolt's subprocess: {msg!r}")
        return False

    def cleanup(self) -> None:
        try:
            proc = self.proc
            if proc is not None and proc.proc is not None and proc.proc.poll() is None:
                self._drain(proc)  # what it acked meanwhile still counts
        except SubprocessError:
            pass
        self._shell_close()


class ShellSpout(_Shell, Spout):
    """Storm's ShellSpout: a spout whose `next_tuple`, `ack` and `fail` run in a subprocess."""

    kind = "spout"

    def _report(self, exc: BaseException) -> None:
        self.collector.report_error(exc)

    def open(self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        super().open(conf, context, collector)
        self._shell_setup(conf, context)

    def _command(self, msg: dict[str, Any]) -> None:
        try:
            proc = self._ensure_running()
            proc.send(msg, self.timeout)
            while not self._handle(proc, proc.receive(self.timeout)):
                pass
            self.restarts = 0
        except (SubprocessError, OSError) as exc:
            self._restart(exc, self.collector.report_error)

    def _handle(self, proc: ShellProcess, msg: Any) -> bool:
        if not isinstance(msg, dict):
            raise SubprocessError(f"expected a command (a map), got {msg!r}")
        command = msg.get("command")
        if command == "sync":
            return True
        if command == "emit":
            values = msg.get("tuple")
            if not isinstance(values, list):
                raise SubprocessError(f"an emit without a tuple (a list): {msg!r}")
            stream = msg.get("stream") or "default"
            msg_id = msg.get("id")
            task = msg.get("task")
            if task:
                self.collector.emit_direct(int(task), values, stream, msg_id)
            else:
                ids = self.collector.emit(values, stream, msg_id)
                if msg.get("need_task_ids", True) is not False:
                    proc.send(list(ids), self.timeout)
        elif not self._common(command, msg, self.collector.report_error):
            raise SubprocessError(f"unknown command {command!r} from a spout's subprocess: {msg!r}")
        return False

    def next_tuple(self) -> None:
        self._command({"command": "next"})

    def ack(self, msg_id: Any) -> None:
        self._command({"command": "ack", "id": msg_id})

    def fail(self, msg_id: Any) -> None:
        self._command({"command": "fail", "id": msg_id})

    def activate(self) -> None:
        self._command({"command": "activate"})

    def deactivate(self) -> None:
        self._command({"command": "deactivate"})

    def close(self) -> None:
        self._shell_close()
