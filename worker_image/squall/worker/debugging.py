"""Storm's debugging tools for running workers: every thread's stack (Storm UI's "JStack"), a
short sampled profile, and where a worker's log is (`squall dump-stacks`, `squall logs`).

The channel is ZooKeeper, like the dynamic log levels (squall.loglevels):

- the verb writes a `DebugRequest` at ``<root>/debug/<topo>`` (an id, what to do, which slots;
  the last request replaces the one before);
- every worker runs a `DebugServer`: a thread of its own on the worker's ZooKeeper session
  (started by the worker's process once that session is up, before the worker loads its
  components; kazoo's client is thread-safe and keeps the session on threads of its own, so
  nothing of the worker's own loop is involved: a worker whose engine is stuck still answers,
  and a worker holds one ZooKeeper session, not two). It writes its card (`WorkerDebug`:
  pid, host, the file its output goes to) at ``<root>/debug/<topo>/<node>-<port>`` when it
  starts, watches the request, and answers one meant for it by writing the card again with the
  answer and the request's id;
- the verb reads the answers of the slots it asked (`ask`) until they are all in or its
  timeout passes.

Which worker holds what comes from the topology's plan and assignment (`holders`, pure). On
Kubernetes the verb has no ZooKeeper: it runs this module inside one of the topology's worker
pods (``python -m squall.worker.debugging``, through the API server's pod exec), which asks the
same way and prints the answers as one JSON object; logs come from the pod log endpoint.

A request older than `REQUEST_TTL_SECS` is not answered (a worker that starts later does not
answer an old question); answers are cut at `MAX_ANSWER_CHARS` (a ZooKeeper node holds 1 MiB).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from squall import usermetrics
from squall.models.cluster import WorkerSlot, parse_executor_key
from squall.models.debugging import DebugAction, DebugRequest, WorkerDebug
from squall.stateviews import ForViewers, ForWorker
from squall.topology_keys import TopologyKey

__all__ = [
    "DebugServer",
    "MAX_ANSWER_CHARS",
    "MAX_PROFILE_SECS",
    "REQUEST_TTL_SECS",
    "TargetError",
    "ThreadStack",
    "answer",
    "ask",
    "cut",
    "format_profile",
    "format_stacks",
    "holders",
    "own_log_path",
    "parse_target",
    "resolve",
    "should_answer",
]

log = logging.getLogger(__name__)

REQUEST_TTL_SECS: Final = 60.0
MAX_ANSWER_CHARS: Final = 400_000
MAX_PROFILE_SECS: Final = 30.0
PROFILE_INTERVAL_SECS: Final = 0.01
# the profile's lines at most: the hottest stacks and functions
PROFILE_TOP: Final = 25
# seconds between two reads of the request without a watch firing (a watch is lost with its session)
POLL_SECS: Final = 5.0


class TargetError(ValueError):
    """A target (component or task) the topology does not have, or does not run yet."""


# --- which worker holds what (pure) ----------------------------------------------------------


def parse_target(text: str | None) -> str | int | None:
    """COMPONENT or TASK (a whole number) -> the component's name or the task id; None: all."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    return int(text) if text.isdigit() else text


def holders(component_tasks: Mapping[str, Sequence[int]], executor_slots: Mapping[str, str],
            target: str | int | None) -> dict[str, list[str]]:
    """Slot key -> the components it runs of `target` (a component, a task id, or None: every
    worker with all its components), sorted; `TargetError` for one the topology lacks or has
    not assigned."""
    task_component = {t: c for c, ts in component_tasks.items() for t in ts}
    if isinstance(target, int):
        if target not in task_component:
            tasks = sorted(task_component)
            span = f"tasks {tasks[0]}-{tasks[-1]}" if tasks else "no tasks"
            raise TargetError(f"the topology has no task {target} (it has {span})")
    elif target is not None and target not in component_tasks:
        known = ", ".join(sorted(c for c in component_tasks if not c.startswith("__")))
        raise TargetError(f"the topology has no component {target!r} (it has {known})")
    out: dict[str, set[str]] = {}
    for key, slot in executor_slots.items():
        start, end = parse_executor_key(key)
        comp = task_component.get(start)
        if comp is None:
            continue
        if isinstance(target, int) and not start <= target <= end:
            continue
        if isinstance(target, str) and comp != target:
            continue
        out.setdefault(slot, set()).add(comp)
    if not out:
        what = "the topology" if target is None else (
            f"task {target}" if isinstance(target, int) else f"component {target!r}")
        raise TargetError(f"{what} has no executor assigned to a worker yet")
    return {slot: sorted(comps) for slot, comps in sorted(out.items())}


def should_answer(request: DebugRequest | None, slot: str, answered: str | None, now: float) -> bool:
    """Whether the worker at `slot`, which answered request `answered` last, answers `request`."""
    if request is None or request.id == answered:
        return False
    if request.slots and slot not in request.slots:
        return False
    return abs(now - request.time_secs) <= REQUEST_TTL_SECS


def cut(text: str, limit: int = MAX_ANSWER_CHARS) -> str:
    """`text`, cut at `limit` characters with a line saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters left out)\n"


# --- what a worker answers (pure formatting) -----------------------------------------------


@dataclass(frozen=True)
class ThreadStack:
    """One thread's stack, outermost frame first (as a Python traceback)."""

    ident: int
    name: str
    daemon: bool
    frames: Sequence[traceback.FrameSummary]


def format_stacks(stacks: Iterable[ThreadStack], heading: str) -> str:
    """A thread dump: `heading`, then each thread's name and stack, the main thread first, then by
    name; each stack reads as a Python traceback (most recent call last)."""
    ordered = sorted(stacks, key=lambda s: (s.name != "MainThread", s.name, s.ident))
    lines = [heading, f"{len(ordered)} threads (each stack: most recent call last)", ""]
    for s in ordered:
        lines.append(f'"{s.name}" ident={s.ident}{" daemon" if s.daemon else ""}')
        lines.extend(line.rstrip("\n") for line in traceback.format_list(list(s.frames)))
        lines.append("")
    return "\n".join(lines)


def _where(frame: traceback.FrameSummary) -> str:
    return f"{frame.name} ({os.path.basename(frame.filename)}:{frame.lineno})"


def format_profile(samples: Mapping[tuple[str, tuple[str, ...]], int], rounds: int, seconds: float,
                   cpu: Mapping[str, float], heading: str) -> str:
    """A sampled profile: `samples` (thread name, stack outermost first) -> how many of `rounds`
    samples saw it; `cpu`: thread name -> CPU seconds it used meanwhile (where known). Lists the
    threads by CPU, the functions most often on top of a stack, and the hottest stacks in the
    collapsed form flame graph tools read ("thread;outer;...;inner count")."""
    lines = [heading, f"{rounds} samples over {seconds:g}s (wall-clock sampling: a thread waiting "
             "shows where it waits)", ""]
    if cpu:
        lines.append("CPU seconds by thread:")
        lines += [f"  {secs:8.3f}  {name}" for name, secs in sorted(cpu.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines.append("")
    leaves: collections.Counter[tuple[str, str]] = collections.Counter()
    for (thread, stack), n in samples.items():
        if stack:
            leaves[(thread, stack[-1])] += n
    lines.append("on top of the stack (share of samples, thread, function):")
    for (thread, leaf), n in sorted(leaves.items(), key=lambda kv: (-kv[1], kv[0]))[:PROFILE_TOP]:
        lines.append(f"  {100.0 * n / max(1, rounds):6.1f}%  {thread}  {leaf}")
    lines += ["", "hottest stacks (collapsed):"]
    for (thread, stack), n in sorted(samples.items(), key=lambda kv: (-kv[1], kv[0]))[:PROFILE_TOP]:
        lines.append(";".join((thread, *stack)) + f" {n}")
    return "\n".join(lines) + "\n"


# --- what a worker answers (from the running process) ----------------------------------------


def _stacks() -> list[ThreadStack]:
    threads = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        t = threads.get(ident)
        out.append(ThreadStack(ident, t.name if t is not None else f"thread-{ident}",
                               bool(t is not None and t.daemon), traceback.extract_stack(frame)))
    return out


def _thread_cpu() -> dict[str, float]:
    """Thread name -> CPU seconds it used so far (Linux: /proc/self/task); {} elsewhere."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for t in threading.enumerate():
        if t.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{t.native_id}/stat", encoding="ascii") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        out[t.name] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


def _profile(seconds: float, interval: float = PROFILE_INTERVAL_SECS,
             stop: threading.Event | None = None) -> tuple[dict[tuple[str, tuple[str, ...]], int], int, dict[str, float]]:
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    before = _thread_cpu()
    samples: collections.Counter[tuple[str, tuple[str, ...]]] = collections.Counter()
    rounds = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            if ident not in names:
                names = {t.ident: t.name for t in threading.enumerate()}
            stack = tuple(_where(f) for f in traceback.extract_stack(frame))
            samples[(names.get(ident, f"thread-{ident}"), stack)] += 1
        rounds += 1
        time.sleep(interval)
    after = _thread_cpu()
    cpu = {name: round(after[name] - before.get(name, 0.0), 3) for name in after
           if name != threading.current_thread().name}
    return dict(samples), rounds, cpu


def answer(request: DebugRequest, slot: str, stop: threading.Event | None = None,
           user_metrics: Callable[[], Iterable[usermetrics.TaskMetrics]] | None = None) -> str:
    """This process's answer to `request`; for `metrics`, a JSON list of `user_metrics()`'s
    rows (squall.usermetrics.snapshot)."""
    if request.action == "metrics":
        rows = usermetrics.snapshot(user_metrics() if user_metrics is not None else ())
        text = json.dumps(rows)
        return text if len(text) <= MAX_ANSWER_CHARS else json.dumps(_fitting(rows))
    heading = f"worker {slot} (pid {os.getpid()}), {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
    if request.action == "profile":
        seconds = min(max(request.seconds, 0.1), MAX_PROFILE_SECS)
        samples, rounds, cpu = _profile(seconds, stop=stop)
        return cut(format_profile(samples, rounds, seconds, cpu, heading))
    return cut(format_stacks(_stacks(), heading))


def _fitting(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As many of `rows` as fit in an answer (a worker may hold 1,000 metrics a task)."""
    out: list[dict[str, Any]] = []
    size = 2
    for row in rows:
        size += len(json.dumps(row)) + 2
        if size > MAX_ANSWER_CHARS:
            break
        out.append(row)
    return out


def own_log_path() -> str | None:
    """The file this process's output goes to (a local cluster's worker log), or None (a pipe:
    a pod's log)."""
    for fd in (2, 1):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and os.path.isfile(target):
            return target
    return None


# --- the worker's side -----------------------------------------------------------------------


class DebugServer:
    """The thread that answers the topology's debug requests for one worker (see the module doc).

    `state` is the worker's own session: the worker closes it, after `stop()`."""

    def __init__(self, state: ForWorker, topology: TopologyKey, slot: WorkerSlot, host: str,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.topology = topology
        self.slot = slot.key()
        self.host = host
        self.clock = clock
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.armed = False
        self.card = WorkerDebug(slot=self.slot, pid=os.getpid(), host=host, log_path=own_log_path(),
                                started_secs=clock())
        self.thread = threading.Thread(target=self._run, name="squall-debug", daemon=True)
        # the worker's tasks' own metrics, once it has loaded them (process.py sets it)
        self.user_metrics: Callable[[], Iterable[usermetrics.TaskMetrics]] | None = None

    def start(self) -> DebugServer:
        self.state.add_session_listener(self._session)
        self.thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self.stopping.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def _fired(self) -> None:
        self.armed = False
        self.wake.set()

    def _session(self, new: bool) -> None:
        if new:  # the watch went with the old session
            self._fired()

    def _run(self) -> None:
        state = self.state
        written = False
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                if not written:
                    state.put_worker_debug(self.topology, self.card)
                    written = True
                watch = None if self.armed else self._fired
                self.armed = True  # before the read: a watch firing meanwhile disarms it again
                request = state.get_debug_request(self.topology, watch=watch)
                if should_answer(request, self.slot, self.card.answer_id, self.clock()):
                    assert request is not None
                    text = answer(request, self.slot, self.stopping, self.user_metrics)
                    self.card = self.card.model_copy(update={
                        "answer_id": request.id, "answer": text, "answered_secs": self.clock()})
                    state.put_worker_debug(self.topology, self.card)
                    log.info("debugging: answered %s request %s", request.action, request.id)
            except Exception as exc:  # ZooKeeper away, the topology's nodes removed: try again later
                self.armed = False
                if not self.stopping.is_set():
                    log.debug("debugging: %s", exc)
            self.wake.wait(POLL_SECS)


# --- the verb's side ---------------------------------------------------------------------------


def resolve(state: ForViewers, topology: TopologyKey, target: str | None) -> dict[str, list[str]]:
    """`holders` of a running topology, read from its ZooKeeper."""
    from squall.models.v1alpha1 import Topology
    from squall.plan import build_plan

    base = state.get_storm(topology)
    if base is None:
        raise TargetError(f"no topology named {topology!r} is running")
    assignment = state.get_assignment(topology)
    if assignment is None:
        raise TargetError(f"topology {topology!r} has no assignment yet")
    plan = build_plan(Topology.model_validate(base.topology), {}, base.component_executors)
    return holders(plan.component_tasks, assignment.executor_slots, parse_target(target))


def ask(state: ForViewers, topology: TopologyKey, action: DebugAction, slots: Sequence[str], *, seconds: float = 0.0,
        timeout: float = 30.0, clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep) -> tuple[dict[str, WorkerDebug], list[str]]:
    """Ask the workers at `slots` for `action`; (slot -> its answering card, slots that did not
    answer within `timeout` seconds, plus the profile's `seconds`)."""
    request = DebugRequest(id=uuid.uuid4().hex, action=action, slots=sorted(slots), time_secs=clock(),
                           seconds=min(max(seconds, 0.0), MAX_PROFILE_SECS))
    state.set_debug_request(topology, request)
    deadline = monotonic() + timeout + request.seconds
    got: dict[str, WorkerDebug] = {}
    while True:
        for slot in sorted(set(slots) - set(got)):
            card = state.get_worker_debug(topology, slot)
            if card is not None and card.answer_id == request.id:
                got[slot] = card
        if len(got) == len(set(slots)) or monotonic() >= deadline:
            return got, sorted(set(slots) - set(got))
        sleep(0.2)


def in_pod(prog: str, argv: Sequence[str] | None, add_arguments: Callable[[argparse.ArgumentParser], None],
           answer: Callable[[ForViewers, argparse.Namespace], dict[str, Any]]) -> int:
    """What ``python -m MODULE`` does inside a worker pod for the Kubernetes verbs: read
    --zookeeper, --root, --topology and --zk-auth-file (plus `add_arguments`'), connect to the
    topology's ZooKeeper, print `answer(state, args)` as one JSON object ({"error": ...} when
    ZooKeeper cannot be reached); exit 1 when it holds an error."""
    from squall.state import ClusterState, StateError, ZkCredentials

    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--zookeeper", required=True)
    p.add_argument("--root", default="/squall")
    p.add_argument("--topology", required=True)
    p.add_argument("--zk-auth-file", default=None)
    add_arguments(p)
    args = p.parse_args(None if argv is None else list(argv))
    try:
        credentials = ZkCredentials.from_file(args.zk_auth_file) if args.zk_auth_file else ZkCredentials.from_env()
        state = ClusterState.connect(args.zookeeper, root=args.root, credentials=credentials, timeout=10.0)
    except (StateError, ValueError, OSError) as exc:
        print(json.dumps({"error": f"cannot reach the topology's ZooKeeper: {exc}"}))
        return 1
    try:
        out = answer(state, args)
    finally:
        state.close()
    print(json.dumps(out))
    return 1 if "error" in out else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m squall.worker.debugging``: the verbs' side run inside a worker pod (which has
    the topology's ZooKeeper and its credentials); prints one JSON object: {"holders": {slot:
    [component, ...]}, "answers": {slot: card}, "missing": [slot, ...]} or {"error": "..."}."""
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--target", default=None, help="a component or a task id (default: every worker)")
        p.add_argument("--action", choices=("where", "stacks", "profile", "metrics"), default="where")
        p.add_argument("--seconds", type=float, default=0.0)
        p.add_argument("--timeout", type=float, default=30.0)

    def answer(state: ForViewers, args: argparse.Namespace) -> dict[str, Any]:
        try:
            found = resolve(state, args.topology, args.target)
            out: dict[str, Any] = {"holders": found, "cards": {
                s: c.model_dump() for s, c in state.worker_debugs(args.topology).items()
                if s in found and args.action == "where"}}
            if args.action != "where":
                got, missing = ask(state, args.topology, args.action, list(found), seconds=args.seconds,
                                   timeout=args.timeout)
                out.update(answers={s: c.model_dump() for s, c in got.items()}, missing=missing)
            return out
        except TargetError as exc:
            return {"error": str(exc)}

    return in_pod("python -m squall.worker.debugging", argv, add_arguments, answer)

if __name__ == "__main__":
    sys.exit(main())
