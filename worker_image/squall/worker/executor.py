"""Executors: the tasks of one [start-task end-task] range, stepped by the worker's engine loop.

An executor never waits: `step(now)` takes what is there (a spout: its completions, then up to
SPOUT_BATCH `next_tuple` calls per task while below maxSpoutPending; a bolt: a few batches of
its inbox), hands its output on without blocking, and says how long until it wants another
turn. Output a full inbox or a slow peer did not take stays in its buffers, and an executor
with output held back takes no new input (a spout emits nothing) until it left: backpressure is
scheduling (squall.worker.engine steps every executor of the worker in one thread). A partial
batch is handed on at the end of every step, so a tuple waits at most one turn for company.

An executor whose component blocks (`isolated`, see `is_isolated`) is stepped the same way by a
thread of its own, which waits on its inbox between steps (`run_thread`).

Output buffers are keyed by destination (a local inbox or a remote slot) under one routing; when
the worker publishes a new routing, an executor re-keys what it still holds at its next step,
so nothing keeps waiting on an inbox that left. Tuples for a remote task its worker announced
as backpressured are held back (a bolt takes no input, a spout stops emitting) while
everything else goes on.
"""

from __future__ import annotations

from array import array
import logging
import queue
import random
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from squall import wire
from squall.components import BasicBolt, FailedException, WindowedBolt
from squall.groupings import (
    EVERYTHING,
    HOST_LOCAL,
    SCOPE_NAMES,
    WORKER_LOCAL,
    Chooser,
    LoadAwareShuffle,
    make_chooser,
)
from squall.models.cluster import ExecutorId, WorkerSlot
from squall.models.v1alpha1 import Grouping
from squall.plan import ACKER, SYSTEM, SYSTEM_TASK, TICK_STREAM, TopologyPlan
from squall.counters import _LUT, Counters, bucket_of
from squall.windowing import WindowConfig, WindowedBoltExecutor
from squall.acker import Ids, PendingTuples
from squall.tuples import Tuple
from squall import usermetrics
from squall.worker.errorlog import error_backoff
from squall.gcpolicy import POLICY as GC_POLICY
from squall.worker.host import WorkerHost
from squall.worker.load import PeerLoads
from squall.worker.routing import Inbox, Routing
from squall.worker.transport import DirectSender

log = logging.getLogger("squall.executor")

SPOUT_BATCH = 256  # next_tuple calls per turn before flushing
FLUSH_SECS = 0.002  # a bolt busy on one batch flushes its output at least this often
INBOX_BATCHES = 64  # bounded executor inbox, in batches
# a window's anchors wait in lists for this many tuples before they are copied into its arrays
SETTLE_AT = 128
TREE_DONE_BATCHES = 1024  # a windowed bolt's completions of its windows' trees, in batches
# how long an executor's sockets still send what they hold once its thread ends
CLOSE_LINGER_MS = 1000
IDLE_WAIT = 0.0005  # an active spout with nothing to emit is called again this much later
HELD_WAIT = 0.001  # output held back (a full inbox, a slow or backpressured peer): try again then
BOLT_BATCHES = 4  # inbox batches a bolt takes per step
STEP_BUDGET = 0.002  # ...unless a step has run this long (seconds): the others' turn comes first
# a component class attribute or config key: the executor gets a thread of its own, for
# components that block (a Spark micro-batch, a call to a slow service)
ISOLATED_KEY = "squall.executor.isolated"
LOAD_REFRESH_SECS = 1.0  # load-aware shuffles re-weigh their targets this often
_getrandbits = random.getrandbits
__all__ = ["BoltExecutor", "Executor", "Inbox", "SpoutExecutor", "is_isolated"]


def is_isolated(cls: type, conf: Mapping[str, Any]) -> bool:
    """Whether a component's executor runs on a thread of its own instead of the engine loop:
    its config says so (`squall.executor.isolated`), or its class does (`isolated = True`, as
    the multilang and Spark components do: they wait on a child process or a batch job)."""
    got = conf.get(ISOLATED_KEY)
    if got is not None:
        return bool(got)
    return bool(getattr(cls, "isolated", False))


class Context:
    """Storm's TopologyContext for one task."""

    def __init__(self, worker: WorkerHost, plan: TopologyPlan, task: int) -> None:
        self.topology_id = plan.topology_id
        self.task_id = task
        self.component_id = plan.task_component[task]
        self.worker_port = worker.slot.port
        self._plan = plan
        self.config = worker.conf
        # the task's own metrics (squall.usermetrics), made by its first register_* call
        self.user_metrics: usermetrics.TaskMetrics | None = None

    def component_tasks(self, component: str) -> list[int]:
        return list(self._plan.component_tasks.get(component, ()))

    def task_component(self, task: int) -> str:
        return self._plan.task_component[task] if task != SYSTEM_TASK else SYSTEM

    def this_component_tasks(self) -> list[int]:
        return self.component_tasks(self.component_id)

    def output_fields(self, stream: str = "default") -> list[str]:
        """The fields this component declares on `stream` (the topology file's win over the
        class's `outputs`); [] for an undeclared stream."""
        spec = self._plan.streams.get(self.component_id, {}).get(stream)
        return list(spec.fields) if spec is not None else []

    # -- Storm's metrics v2 (registerCounter & co.), served on the worker's /metrics -----------
    def _metrics(self) -> usermetrics.TaskMetrics:
        tm = self.user_metrics
        if tm is None:
            tm = self.user_metrics = usermetrics.TaskMetrics(self.topology_id, self.component_id, self.task_id)
        return tm

    def register_counter(self, name: str) -> usermetrics.Counter:
        return self._metrics().counter(name)

    def register_gauge(self, name: str, fn: Callable[[], float]) -> usermetrics.Gauge:
        return self._metrics().gauge(name, fn)

    def register_histogram(self, name: str,
                           buckets: Sequence[float] = usermetrics.VALUE_BUCKETS) -> usermetrics.Histogram:
        return self._metrics().histogram(name, buckets)

    def register_meter(self, name: str) -> usermetrics.Meter:
        return self._metrics().meter(name)

    def register_timer(self, name: str, buckets: Sequence[float] = usermetrics.TIMER_BUCKETS) -> usermetrics.Timer:
        return self._metrics().timer(name, buckets)


class Outbox:
    """An executor's output buffers: per local inbox and per remote slot, plus acker messages.

    `acks`: root -> XOR of this turn's acks for it: one acker message per tree per flush,
    however many of the tree's tuples this executor acked (XOR is associative). A bolt's acks
    of one tree mostly follow each other (a sentence's words arrive together), so
    `BoltCollector.ack` XORs a run of acks of one root into `run_x` (an unboxed native
    attribute when compiled: no dict lookup, no int object per ack) and the run goes into the
    dict only when another root's ack comes, or when anyone reads `acks` (the property settles
    it first, so every reader sees all the acks made)."""

    __slots__ = ("bufs", "control", "_acks", "run_root", "run_x", "run_open")

    def __init__(self) -> None:
        # destination (a local executor inbox, or a remote WorkerSlot) -> tuples for it
        self.bufs: dict[Any, list[list[Any]]] = {}
        self.control: list[list[int]] = []
        self._acks: dict[Any, Any] = {}
        # the open run: its root (the object, as the dict's key), the XOR of its acks, and
        # whether there is one (a root may be any int, 0 included)
        self.run_root: Any = None
        self.run_x: int = 0
        self.run_open = False

    def settle(self) -> None:
        """The open run of acks into `acks`."""
        if self.run_open:
            self.run_open = False
            acks = self._acks
            r: Any = self.run_root
            x: int = acks.get(r, 0)
            acks[r] = x ^ self.run_x
            self.run_root = None

    @property
    def acks(self) -> dict[Any, Any]:
        if self.run_open:
            self.settle()
        return self._acks


class Executor:
    """Shared machinery: routing, emitting, flushing, error reports."""

    kind = "executor"

    def __init__(self, worker: WorkerHost, executor: ExecutorId, component: str) -> None:
        self.worker = worker
        self.id = executor
        self.component = component
        self.tasks = list(range(executor[0], executor[1] + 1))
        self.inbox = Inbox(INBOX_BATCHES)
        self.stats = Counters()
        self.out = Outbox()
        self.bufs = self.out.bufs
        self.stop_event = threading.Event()
        # an isolated executor's own thread (`run_thread`); None: the engine loop steps it
        self.thread: threading.Thread | None = None
        self.isolated = False
        # set once it has nothing left to do (a retiring executor that finished), and once it
        # is closed and its last output handed on (or given up on)
        self.finished = False
        self.done = False
        # a batch an isolated executor's thread took from its inbox while waiting: the next step's first
        self.held: list[list[Any]] | None = None
        self.routing: Routing | None = None
        # its batches for remote tasks leave on these sockets, one per peer (the engine loop's,
        # shared by the executors it steps; an isolated executor's own: transport.DirectSender)
        self.direct_data: DirectSender | None = None
        # per task: stream -> choosers; per task: stream -> direct consumer tasks
        self.routes: dict[int, dict[str, list[Chooser]]] = {}
        self.direct: dict[int, dict[str, frozenset[int]]] = {}
        # a dict, not any Mapping: compiled, `.get` on it is a C call, not a method lookup
        self.task_dest: dict[int, Any] = {}
        self.acker_tasks: Sequence[int] = ()
        self.n_ackers = 0
        self.contexts: dict[int, Context] = {}
        # bolts: the input a BasicBolt's emits are anchored to while it processes it
        self.auto_anchor: Tuple | None = None
        # load-aware shuffles of this executor's streams, re-weighed every LOAD_REFRESH_SECS
        self.load_aware: list[LoadAwareShuffle] = []
        self.next_load = 0.0
        # the worker's busy fraction and its peers' announcements (set by the worker; None:
        # queues only, Storm's load)
        self.loads: PeerLoads | None = None
        # topology.localityaware.cpu: whether the shuffles read the workers' busy fractions
        self.cpu_aware = True
        # topology.localityaware.trace: log every re-weighing (scope, weights, loads, busy)
        self.load_trace = False
        # spouts: (root, xor, spout task) of new trees whose acker is in this worker
        self.local_inits: list[tuple[int, int, int]] = []
        # hot update: removed from the worker, finishing what it holds (see `retire`)
        self.retiring = False
        # set by the worker once no one can hand this retiring executor anything new
        self.settled = False
        self.retire_by = 0.0

    # -- routing ---------------------------------------------------------------------------
    def refresh_routing(self) -> None:
        routing = self.worker.routing
        if routing is self.routing:
            return
        plan = routing.plan
        self.routing = routing
        if self.direct_data is not None:
            self.direct_data.prune()  # peers that moved or left the assignment
        td = routing.task_dest
        self.task_dest = td if isinstance(td, dict) else dict(td)
        if self.bufs:
            self._rekey(routing)
        self.acker_tasks = plan.acker_tasks
        self.n_ackers = len(plan.acker_tasks)
        self.load_aware = []
        self.next_load = 0.0
        self.cpu_aware = bool(self.worker.conf.get("topology.localityaware.cpu", True))
        self.load_trace = bool(self.worker.conf.get("topology.localityaware.trace", False))
        scopes: dict[int, int] | None = None
        if not self.worker.conf.get("topology.disable.loadaware.messaging", False):
            # Storm 2's default: shuffle prefers targets in this worker, then on this node
            here = self.worker.slot
            scopes = {
                t: WORKER_LOCAL if s == here else HOST_LOCAL if s.node == here.node else EVERYTHING
                for t, s in routing.task_slot.items()
            }
        for task in self.tasks:
            ctx = self.contexts[task]
            routes: dict[str, list[Chooser]] = {}
            direct: dict[str, frozenset[int]] = {}
            for stream, spec in plan.streams.get(self.component, {}).items():
                if stream.startswith("__"):
                    continue
                choosers: list[Chooser] = []
                direct_tasks: set[int] = set()
                index = {f: i for i, f in enumerate(spec.fields)}
                for sub in plan.subscriptions.get((self.component, stream), ()):
                    chooser = make_chooser(
                        sub.grouping,
                        sub.tasks,
                        field_indexes=[index[f] for f in (sub.fields or ())],
                        local_tasks=sorted(routing.local_tasks),
                        custom_class=sub.custom_class,
                        context=ctx,
                        stream=(self.component, stream),
                        source_task=task,
                        load_aware=scopes,
                    )
                    if isinstance(chooser, LoadAwareShuffle):
                        conf = self.worker.conf
                        chooser.higher_bound = float(conf.get("topology.localityaware.higher.bound", 0.8))
                        chooser.lower_bound = float(conf.get("topology.localityaware.lower.bound", 0.2))
                        self.load_aware.append(chooser)
                    if chooser is None:
                        direct_tasks.update(sub.tasks)
                    else:
                        choosers.append(chooser)
                routes[stream] = choosers
                direct[stream] = frozenset(direct_tasks)
            self.routes[task] = routes
            self.direct[task] = direct
        self.on_routing()

    def refresh_load(self, now: float) -> None:
        """Re-weigh the load-aware shuffles (at most every LOAD_REFRESH_SECS). A target's load:
        how full its executor's inbox is when it is in this worker; when it is in another, 1.0
        while its worker announces it backpressured, else the share of this executor's sends to
        that worker since the last re-weighing that met its socket's high-water mark
        (DirectSender.fill) or the inbox fill its worker last announced, whichever is more
        (Storm: the receive queue's population, or the pending Netty messages). With the worker's loads
        (`self.loads`), a target also carries its worker's busy fraction: this worker's own
        for a local one, the announced one for a remote one (squall.worker.load)."""
        if now < self.next_load or not self.load_aware:
            return
        self.next_load = now + LOAD_REFRESH_SECS
        dest = self.task_dest
        bp = self.worker.remote_bp
        direct = self.direct_data
        # remote slot -> the share of this executor's sends to it that met its high-water mark
        slow: dict[Any, float] = {}
        loads = self.loads if self.cpu_aware else None
        load: dict[int, float] = {}
        cpu: dict[int, float] | None = {} if loads is not None else None
        since: dict[int, float | None] = {}  # when each target's busy measure began
        for chooser in self.load_aware:
            for t in chooser.tasks:
                if t in load:
                    continue
                key = dest.get(t)
                if type(key) is Inbox:
                    load[t] = min(1.0, key.qsize() / (key.maxsize or INBOX_BATCHES))
                    if loads is not None and cpu is not None:
                        cpu[t] = loads.busy_here
                        since[t] = loads.here_since
                    continue
                if bp.get(t, 0.0) > now:
                    load[t] = 1.0
                elif key is not None and direct is not None:
                    f = slow.get(key)
                    if f is None:
                        f = slow[key] = direct.fill(key)
                    load[t] = f
                else:
                    load[t] = 0.0
                if loads is not None and cpu is not None:
                    began = since[t] = loads.since(t, now)
                    if began is not None:  # unknown: not in `cpu` (idle for the scope, and no CPU step)
                        busy, fill = loads.of(t, now)
                        cpu[t] = busy
                        load[t] = max(load[t], fill)
            scope = chooser.scope
            measured = [since.get(t) for t in chooser.tasks]
            oldest = None if cpu is None or None in measured else min(b for b in measured if b is not None)
            chooser.refresh(load, cpu, now, oldest)
            if self.load_trace:
                log.info(
                    "load-aware trace of %s: acked %d executed %d local share %.3f scope %s weights %s "
                    "loads %s busy %s",
                    self.component, self.stats.acked, self.stats.executed,
                    sum(1 for c in chooser.ring if chooser.scope_of[c[0]] == WORKER_LOCAL) / len(chooser.ring),
                    SCOPE_NAMES[chooser.scope],
                    {t: round(chooser.weight[t] * chooser.cpu_factor[t], 1) for t in chooser.tasks},
                    {t: round(load[t], 3) for t in chooser.tasks},
                    {t: round(cpu[t], 3) for t in chooser.tasks if t in cpu} if cpu is not None else None,
                )
            if chooser.scope != scope:
                log.info(
                    "load-aware shuffle of %s to tasks %s: scope %s -> %s (loads %s%s)",
                    self.component, chooser.tasks, SCOPE_NAMES[scope], SCOPE_NAMES[chooser.scope],
                    {t: round(load[t], 2) for t in chooser.tasks},
                    f", busy {({t: round(cpu[t], 2) for t in chooser.tasks if t in cpu})}" if cpu is not None else "",
                )

    def _rekey(self, routing: Routing) -> None:
        """Output held under the old routing -> the destinations the new one names."""
        dest = routing.task_dest
        held = [it for batch in self.bufs.values() for it in batch]
        self.bufs.clear()
        for it in held:
            key = dest.get(it[0])
            if key is None:
                self.stats.dropped += 1
                continue
            buf = self.bufs.get(key)
            if buf is None:
                self.bufs[key] = [it]
            else:
                buf.append(it)

    def on_routing(self) -> None:
        pass

    def route(self, task: int, stream: str, values: Sequence[Any]) -> list[int]:
        try:
            choosers = self.routes[task][stream]
        except KeyError:
            raise ValueError(
                f"{self.component} emitted on undeclared stream {stream!r}"
                f" (declared: {', '.join(s for s in self.routes[task]) or 'none'})"
            ) from None
        if len(choosers) == 1:
            return choosers[0](values)
        out: list[int] = []
        for c in choosers:
            out.extend(c(values))
        return out

    def check_direct(self, task: int, stream: str, target: int) -> None:
        allowed = self.direct.get(task, {}).get(stream)
        if allowed is None:
            raise ValueError(f"{self.component} emitted on undeclared stream {stream!r}")
        if target not in allowed:
            raise ValueError(
                f"emit_direct to task {target} on {self.component}:{stream}: not a direct"
                f" consumer (consumers: {sorted(allowed) or 'none'})"
            )

    def put_tuple(self, dest: int, item: list[Any]) -> None:
        key = self.task_dest.get(dest)
        if key is None:
            self.stats.dropped += 1
            return
        buf = self.bufs.get(key)
        if buf is None:
            self.bufs[key] = [item]
        else:
            buf.append(item)
        self.stats.emitted += 1

    def acker_for(self, root: int) -> int:
        return self.acker_tasks[root % self.n_ackers]

    def flush(self) -> bool:
        """Hand buffered output on without waiting; True when everything left the executor.
        What a full inbox, a slow peer (its socket's frame still pending), a backpressured
        remote task or a peer not registered yet did not take stays for the next step."""
        out = self.out
        if self.local_inits:
            # before any data leaves: an ack can only follow its tree's registration
            inits, self.local_inits = self.local_inits, []
            own = self.worker.init_trees(inits, out.control)
            if own:
                self.on_done(own)
        acks = out.acks  # the open run of acks settled into it
        if acks:
            at = self.acker_tasks
            n = self.n_ackers
            ack = wire.ACK
            out.control.extend([ack, at[r % n], r, v, 0] for r, v in acks.items())
            acks.clear()
        if out.control:
            items, out.control = out.control, []
            own = self.worker.handle_control(items, self)
            if own:
                self.on_done(own)
        bufs = self.bufs
        direct = self.direct_data
        if direct is not None and direct.pending:
            direct.push()  # frames a slow peer did not take yet go before anything else for it
        if not bufs:
            return not out.control
        bp = self.worker.remote_bp
        for key, batch in list(bufs.items()):
            if type(key) is Inbox:
                if key.offer(batch):
                    del bufs[key]
                    self.stats.transferred += len(batch)
                continue
            held: list[list[Any]] | None = None
            if bp:
                # tuples for a backpressured remote task wait here; the rest go on
                now = time.monotonic()
                held = [it for it in batch if bp.get(it[0], 0.0) > now]
                if held:
                    batch = [it for it in batch if bp.get(it[0], 0.0) <= now]
            if batch and (direct is None or not direct.send(key, batch)):
                continue  # kept: the peer is slow or not registered yet
            self.stats.transferred += len(batch)
            if held:
                bufs[key] = held
            else:
                del bufs[key]
        return not bufs and not out.control

    def on_done(self, items: list[list[int]]) -> None:
        pass

    def has_root(self, task: int, root: int) -> bool:
        """Whether `root` is a pending tree of this executor's spout `task`."""
        return False

    def report_error(self, task: int, exc: BaseException, always: bool = False) -> None:
        """Log the error with its traceback and report it to the cluster (ZooKeeper: `squall
        list`, the UI), unless the component's errors are over their rate this interval: then
        it is only counted, for one line per interval (errorlog.ErrorThrottle). `always`: our
        own failure (the executor dies), never left out."""
        if not self.worker.error_throttle.admit(self.component, exc, time.monotonic()) and not always:
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        log.error("%s task %d: %s", self.component, task, text.rstrip())
        self.worker.report_error(self.component, task, text)

    # -- lifecycle: open, steps, close (squall.worker.engine drives them) --------------------
    def open(self) -> None:
        """Open or prepare the component instances, on the thread that steps them."""
        raise NotImplementedError

    def step(self, now: float) -> float:
        """One turn (never waits): returns how long until it wants the next one (0.0: at once).
        A retiring executor sets `finished` once it has nothing left to do."""
        raise NotImplementedError

    def close(self) -> None:
        """Clean up the component instances (a spout fails what is still pending first); what
        that emitted is in the buffers for the caller's last flushes."""
        raise NotImplementedError

    def retire(self, deadline: float) -> None:
        """Removed by a hot update: finish what it holds (bolts: the tuples already handed to
        it; spouts: the trees they have pending), then clean up and leave. The worker stops it
        at `deadline` (monotonic) if it is not done by then."""
        self.retire_by = deadline
        self.retiring = True

    def stop(self) -> None:
        self.stop_event.set()

    def run_thread(self, wake: Callable[[], None], opened: bool = False) -> None:
        """An isolated executor's own thread: the same steps as the engine loop's, waiting on its
        inbox between them (a batch taken while waiting is the next step's first), with sockets
        of its own. `wake` rings the engine loop when a step handed something on (the loop may
        be asleep while its executors' inboxes fill). `opened`: moved here by the loop, which
        opened it already."""
        direct = self.direct_data = self.worker.direct_sender()
        try:
            if not opened:
                self.open()
            stats = self.stats
            while not self.stop_event.is_set() and not self.finished:
                moved = stats.transferred
                wait = self.step(time.monotonic())
                if stats.transferred != moved:
                    wake()
                if wait > 0.0 and self.held is None:
                    try:
                        self.held = self.inbox.get(timeout=wait)
                    except queue.Empty:
                        pass
            self.close()
            # what close emitted, acked or failed still goes out; a retiring executor waits for
            # that (the worker stops it at its deadline)
            while not self.flush() and self.retiring and not self.stop_event.wait(HELD_WAIT):
                pass
            wake()
        except Exception as exc:  # a bug of ours: report it, the worker restarts the executor
            self.report_error(self.tasks[0], exc, always=True)
            self.worker.executor_died(self, exc)
        finally:
            self.direct_data = None
            # what its sockets hold still goes out for a while (a retiring executor's last
            # frames; the worker's zmq term() waits that long at most)
            direct.close(CLOSE_LINGER_MS)
            self.done = True


# ------------------------------------------------------------------------------------------
class SpoutCollector:
    """Storm's SpoutOutputCollector for one task."""

    __slots__ = ("ex", "task", "pending", "acking", "_local_ackers", "_ack_now", "_n", "ids")

    def __init__(self, ex: SpoutExecutor, task: int, pending: PendingTuples) -> None:
        self.ex = ex
        self.task = task
        self.pending = pending
        self.acking = False
        self._local_ackers: list[int] = []
        self._ack_now: list[Any] = []
        self._n = 0
        # root and edge ids, made in batches (the executor's thread only)
        self.ids = Ids()

    def _root(self) -> int:
        n = self.ex.n_ackers
        r: int = self.ids.take()
        if self._local_ackers:
            self._n += 1
            r = r - r % n + self._local_ackers[self._n % len(self._local_ackers)]
        return r

    def emit(self, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> list[int]:
        # the hot path of every topology: routing, root ids and buffering are inlined
        ex = self.ex
        task = self.task
        choosers = ex.routes[task].get(stream)
        if choosers is not None and len(choosers) == 1:
            targets = choosers[0](values)
        else:
            targets = ex.route(task, stream, values)
        if type(values) is not list:
            values = list(values)
        if msg_id is not None and self.acking:
            ids = self.ids
            r: int = ids.take()
            local = self._local_ackers
            if local:
                # a root id that hashes to an acker in this worker, so the init never crosses
                # the network (the acker is still chosen by root id, as in Storm)
                self._n += 1
                r = r - r % ex.n_ackers + local[self._n % len(local)]
            xor = 0
            dest = ex.task_dest
            bufs = ex.bufs
            # ids as objects (`Any`), boxed once: see BoltCollector.emit
            ro: Any = r
            src: Any = task
            tl: list[Any] = targets
            for t in tl:
                e: Any = ids.take()
                ei: int = e
                xor ^= ei
                key = dest.get(t)
                if key is None:
                    ex.stats.dropped += 1
                    continue
                buf = bufs.get(key)
                if buf is None:
                    bufs[key] = [[t, src, stream, values, {ro: e}]]
                else:
                    buf.append([t, src, stream, values, {ro: e}])
            ex.stats.emitted += len(targets)
            head: dict[Any, Any] = self.pending.pending._head
            head[ro] = (msg_id, ex.now)  # RotatingMap.put, inlined
            pend = self.pending.pending
            pend.size += 1
            if local:
                # the acker is in this worker: registered straight into its ledger at flush
                ex.local_inits.append((ro, xor, src))
            else:
                ex.out.control.append([wire.INIT, ex.acker_tasks[r % ex.n_ackers], ro, xor, src])
        else:
            for t in targets:
                ex.put_tuple(t, [t, task, stream, values, None])
            if msg_id is not None:
                self._ack_now.append(msg_id)
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> None:
        ex = self.ex
        ex.check_direct(self.task, stream, task)
        values = list(values)
        if msg_id is not None and self.acking:
            root = self._root()
            e: Any = self.ids.take()
            ex.put_tuple(task, [task, self.task, stream, values, {root: e}])
            self.pending.add(root, msg_id, ex.now)
            ex.out.control.append([wire.INIT, ex.acker_for(root), root, e, self.task])
        else:
            ex.put_tuple(task, [task, self.task, stream, values, None])
            if msg_id is not None:
                self._ack_now.append(msg_id)

    def report_error(self, exc: BaseException) -> None:
        self.ex.report_error(self.task, exc)


class SpoutExecutor(Executor):
    kind = "spout"

    def __init__(self, worker: WorkerHost, plan: TopologyPlan, executor: ExecutorId, component: str, cls: type,
                 conf: Mapping[str, Any]) -> None:
        super().__init__(worker, executor, component)
        self.conf = conf
        self.now = time.monotonic()
        self.contexts = {t: Context(worker, plan, t) for t in self.tasks}
        self.instances = {t: cls() for t in self.tasks}
        timeout = float(worker.spec.message_timeout_secs)
        self.collectors = {t: SpoutCollector(self, t, PendingTuples(timeout, self.now)) for t in self.tasks}
        self.max_pending = worker.spec.max_spout_pending
        # a stateful spout's input (`on_tuples`): a bolt's collector per task, made on first use
        self.input_collectors: dict[int, BoltCollector] = {}
        self.auto_anchor: Tuple | None = None
        self.active = False
        self.closing = False
        # task -> consecutive calls of its next_tuple that raised, and when it may be called
        # again (monotonic): a spout that only raises is called less and less often, up to once
        # a second (errorlog.error_backoff)
        self.error_streak: dict[int, int] = {}
        self.resume_at: dict[int, float] = {}

    def on_routing(self) -> None:
        routing = self.routing
        assert routing is not None
        local = [i for i, t in enumerate(self.acker_tasks) if t in routing.local_tasks]
        for c in self.collectors.values():
            c.acking = self.n_ackers > 0
            c._local_ackers = local

    def on_done(self, items: list[list[int]]) -> None:
        if items and isinstance(items[0][2], str):  # tuples, not acker messages
            self.on_tuples(items)
            return
        now = time.monotonic()
        collectors = self.collectors
        instances = self.instances
        stats = self.stats
        hist = stats.hist
        lut = _LUT
        for _kind, task, root, ok, _x in items:
            c = collectors.get(task)
            if c is None:
                continue
            pend = c.pending.pending
            got = pend._head.pop(root, None)  # most trees complete within their first bucket
            if got is not None:
                pend.size -= 1
            else:
                got = pend.pop(root)
                if got is None:
                    continue  # timed out already: fail() was called then
            msg_id, t0 = got
            try:
                if ok:
                    stats.acked += 1
                    if not stats.acked & 3:
                        # complete latency is sampled, 1 tree in 4 (Storm samples 5%)
                        ms = (now - t0) * 1000.0
                        stats.lat_sum += ms
                        stats.lat_n += 1
                        i = int(ms * 100.0)
                        b = lut[i] if 0 <= i < 10000 else bucket_of(max(ms, 0.0))
                        hist[b] = hist.get(b, 0) + 1
                    instances[task].ack(msg_id)
                else:
                    stats.failed += 1
                    instances[task].fail(msg_id)
            except Exception as exc:
                self.report_error(task, exc)

    # -- input of a stateful spout: `$checkpoint` tuples (squall.checkpoint) ------------------
    def on_tuples(self, items: list[list[Any]]) -> None:
        """Tuples for a spout task (only a stateful spout has an input): handed to its
        `receive(tup, collector)` with a collector that anchors and acks like a bolt's."""
        plan = self.routing.plan  # type: ignore[union-attr]
        for dest, src, stream, values, anchors in items:
            receive = getattr(self.instances.get(dest), "receive", None)
            if receive is None:
                self.stats.dropped += 1
                continue
            comp = plan.task_component.get(src, SYSTEM)
            tup = Tuple(values, src, comp, stream, plan.fields_index(comp, stream), anchors)
            collector = self.input_collectors.get(dest)
            if collector is None:
                collector = self.input_collectors[dest] = BoltCollector(self, dest)
            try:
                receive(tup, collector)
            except Exception as exc:
                self.report_error(dest, exc)
                collector.fail(tup)

    def open(self) -> None:
        self.refresh_routing()
        for task, spout in self.instances.items():
            try:
                spout.open(self.conf, self.contexts[task], self.collectors[task])
            except Exception as exc:
                self.report_error(task, exc)
                raise

    def step(self, now: float) -> float:
        """Completions first (they free room under maxSpoutPending), time-outs, then a batch of
        `next_tuple` calls while its output has room, then its output handed on."""
        self.now = now
        self.refresh_routing()
        self.refresh_load(now)
        held = self.held
        if held is not None:
            self.held = None
            self.on_done(held)
        control = self.inbox
        while True:
            try:
                items = control.get_nowait()
            except queue.Empty:
                break
            self.on_done(items)
        for task, c in self.collectors.items():
            expired = c.pending.expire(now)
            for msg_id in expired:
                self.stats.failed += 1
                try:
                    self.instances[task].fail(msg_id)
                except Exception as exc:
                    self.report_error(task, exc)
        if self.retiring and not self.bufs and not self.out.control and not self.pending_count():
            self.finished = True  # moved away: every tree it started has completed (or failed)
            return 0.0
        self._set_active(self.worker.active and not self.closing and not self.retiring)
        emitted = 0
        if self.active and not self.bufs and not self.out.control:
            emitted = self._emit_batch()
        flushed = self.flush()
        if emitted and flushed:
            return 0.0
        if not self.active:
            return 0.1  # completions and activation wake the loop; time-outs can wait that long
        wait = IDLE_WAIT if flushed else HELD_WAIT
        if self.resume_at and len(self.resume_at) == len(self.instances):
            # every task is waiting out its errors: until the first may go on (a completion
            # still gets a turn at once)
            wait = max(wait, min(min(self.resume_at.values()) - now, 0.1))
        return wait

    def close(self) -> None:
        self._shutdown()

    def _emit_batch(self) -> int:
        emitted = 0
        stats = self.stats
        limit = self.max_pending if self.max_pending is not None else 1 << 62
        resume_at = self.resume_at
        for task, spout in self.instances.items():
            if resume_at:
                due = resume_at.get(task)
                if due is not None:
                    if self.now < due:
                        continue
                    del resume_at[task]
            c = self.collectors[task]
            rmap = c.pending.pending
            next_tuple = spout.next_tuple
            before = stats.emitted
            calls = 0
            while calls < SPOUT_BATCH and rmap.size < limit:
                calls += 1
                n0 = stats.emitted
                try:
                    next_tuple()
                except Exception as exc:
                    self.report_error(task, exc)
                    streak = self.error_streak[task] = self.error_streak.get(task, 0) + 1
                    resume_at[task] = self.now + error_backoff(streak)
                    calls = -1
                    break
                if c._ack_now:
                    # acking is off (or no msg id): Storm acks such messages at once
                    acked, c._ack_now = c._ack_now, []
                    for m in acked:
                        stats.acked += 1
                        try:
                            spout.ack(m)
                        except Exception as exc:
                            self.report_error(task, exc)
                elif stats.emitted == n0:
                    break  # nothing to emit right now
            if calls > 0 and self.error_streak:
                self.error_streak.pop(task, None)  # a call returned: the streak of errors ended
            emitted += stats.emitted - before
        return emitted

    def _set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        for task, spout in self.instances.items():
            try:
                spout.activate() if active else spout.deactivate()
            except Exception as exc:
                self.report_error(task, exc)

    def _shutdown(self) -> None:
        self._set_active(False)
        for task, spout in self.instances.items():
            # nothing is forgotten: un-acked messages are failed before the spout closes
            for msg_id in self.collectors[task].pending.drain():
                self.stats.failed += 1
                try:
                    spout.fail(msg_id)
                except Exception as exc:
                    self.report_error(task, exc)
            try:
                spout.close()
            except Exception as exc:
                self.report_error(task, exc)

    def pending_count(self) -> int:
        return sum(len(c.pending) for c in self.collectors.values())

    def has_root(self, task: int, root: int) -> bool:
        c = self.collectors.get(task)
        return c is not None and root in c.pending.pending


# ------------------------------------------------------------------------------------------
class BoltCollector:
    """Storm's OutputCollector for one task."""

    __slots__ = ("ex", "task", "src", "ids")

    def __init__(self, ex: Executor, task: int) -> None:
        self.ex = ex
        self.task = task
        # the task id as an object, for the items emitted (an `int` attribute is boxed anew at
        # every use when compiled)
        self.src: Any = task
        # edge ids, made in batches (the executor's thread only)
        self.ids = Ids()

    def _anchored(self, dest: int, stream: str, values: list[Any], anchors: Any) -> list[Any]:
        if anchors is None:
            return [dest, self.task, stream, values, None]
        if type(anchors) is Tuple:
            a = anchors.anchors
            if not a:
                return [dest, self.task, stream, values, None]
            e: Any = self.ids.take()
            ei: int = e
            anchors.ack_val ^= ei
            if len(a) == 1:
                for r in a:
                    return [dest, self.task, stream, values, {r: e}]
            return [dest, self.task, stream, values, dict.fromkeys(a, e)]
        # Storm's BoltOutputCollectorImpl: a fresh edge id per anchor. One edge shared by two
        # anchors of the same tree would cancel out in that root (e ^ e == 0), and the parents'
        # acks would complete the tree before this tuple is processed.
        out: dict[int, int] = {}
        for t in anchors:
            if t.anchors:
                e2: int = self.ids.take()
                t.ack_val ^= e2
                for r in t.anchors:
                    out[r] = out.get(r, 0) ^ e2
        return [dest, self.task, stream, values, out or None]

    def emit(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> list[int]:
        ex = self.ex
        choosers = ex.routes[self.task].get(stream)
        if choosers is not None and len(choosers) == 1:
            targets = choosers[0](values)
        else:
            targets = ex.route(self.task, stream, values)
        if type(values) is not list:
            values = list(values)
        if anchors is None:
            anchors = ex.auto_anchor
        if len(targets) == 1 and type(anchors) is Tuple and anchors.anchors and len(anchors.anchors) == 1:
            # the common case, inlined: one target, anchored to one input of one tree. The ids
            # are held as objects (`Any`): compiled, an `int` local is unboxed, and boxing it
            # back into the item allocates a new int object for every 62-bit id
            tl: list[Any] = targets
            t: Any = tl[0]
            key = ex.task_dest.get(t)
            if key is None:
                ex.stats.dropped += 1
                return targets
            e: Any = self.ids.take()
            ei: int = e  # unboxing a 62-bit int allocates nothing
            anchors.ack_val ^= ei
            a: dict[Any, Any] = anchors.anchors
            for r in a:
                item = [t, self.src, stream, values, {r: e}]
            buf = ex.bufs.get(key)
            if buf is None:
                ex.bufs[key] = [item]
            else:
                buf.append(item)
            ex.stats.emitted += 1
            return targets
        for t in targets:
            ex.put_tuple(t, self._anchored(t, stream, values, anchors))
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        ex = self.ex
        ex.check_direct(self.task, stream, task)
        if anchors is None:
            anchors = ex.auto_anchor
        ex.put_tuple(task, self._anchored(task, stream, list(values), anchors))

    # -- a windowed bolt's window (squall.windowing drives these) ---------------------------
    def new_tree(self) -> int:
        """A root id for a tree of this task's own (a window's outputs), kept by an acker of
        this worker when there is one, so that its init and completion stay in the process."""
        ex = self.ex
        r = _getrandbits(62) | 1
        routing = ex.routing
        n = ex.n_ackers
        if routing is not None and n:
            local = [i for i, t in enumerate(ex.acker_tasks) if t in routing.local_tasks]
            if local:
                r = (r - r % n + local[r % len(local)]) or n
        return r

    def emit_tree(self, values: Sequence[Any], stream: str, tree: int,
                  task: int | None = None) -> tuple[list[int], int]:
        """Emit anchored to `tree`, a tree of this task's own that stands for a whole window
        (`squall.windowing._WindowAnchoring`): each copy sent carries one fresh edge id of it
        (tree 0: none, the copies are not anchored). Returns the targets and the XOR of those
        edge ids, which `init_tree` registers."""
        ex = self.ex
        if task is None:
            targets = ex.route(self.task, stream, values)
        else:
            ex.check_direct(self.task, stream, task)
            targets = [task]
        if type(values) is not list:
            values = list(values)
        xor = 0
        for t in targets:
            if tree:
                e = _getrandbits(62) | 1  # never 0: a zero entry would not keep its tree open
                xor ^= e
                ex.put_tuple(t, [t, self.task, stream, values, {tree: e}])
            else:
                ex.put_tuple(t, [t, self.task, stream, values, None])
        return targets, xor

    def init_tree(self, tree: int, xor: int) -> None:
        """Register `tree` (its edges' XOR) with its acker, this task as its owner: the acker
        answers with a completion for this task (`DONE`, ok or failed) once every output
        anchored to it was acked downstream, or one failed."""
        ex = self.ex
        ex.out.control.append([wire.INIT, ex.acker_for(tree), tree, xor, self.task])

    def ack_window(self, tuples: list[Tuple], held: dict[int, int] | None) -> None:
        """Ack the tuples that left a windowed bolt's last window: one XOR per root into this
        turn's acks, or into `held` when the window keeps them back (an output of a window
        holding them not acked yet)."""
        ex = self.ex
        acks = ex.out.acks if held is None else held
        for tup in tuples:
            a = tup.anchors
            if a:
                v = tup.ack_val
                for r, edge in a.items():
                    acks[r] = acks.get(r, 0) ^ edge ^ v
        ex.stats.acked += len(tuples)

    def ack_roots(self, roots: array[int], edges: array[int], n: int, held: dict[int, int] | None,
                  tuples: int) -> None:
        """`ack_window` from a windowed bolt's copy of its tuples' anchors: the first `n` (root,
        edge) pairs, which `tuples` tuples that left the windows had (their ack values unset)."""
        ex = self.ex
        acks: dict[Any, Any] = ex.out.acks if held is None else held
        if n:
            # the arrays as lists of int objects in one C call each (indexing an array from
            # here boxes a new int per read), and one dict update per run of a root (a
            # sentence's words arrive together, so its entries mostly follow each other)
            rl: list[Any] = roots[:n].tolist()
            el: list[Any] = edges[:n].tolist()
            prev: Any = rl[0]
            x: int = el[0]
            for i in range(1, n):
                r: Any = rl[i]
                if r == prev:
                    x ^= el[i]
                else:
                    acks[prev] = acks.get(prev, 0) ^ x
                    prev = r
                    x = el[i]
            acks[prev] = acks.get(prev, 0) ^ x
        ex.stats.acked += tuples

    def ack_held(self, held: dict[int, int]) -> None:
        """Send acks a window kept back (`ack_window`'s `held`)."""
        acks = self.ex.out.acks
        for r, x in held.items():
            acks[r] = acks.get(r, 0) ^ x

    def fail_roots(self, roots: Sequence[int]) -> None:
        """Fail these trees (a window's output failed downstream or timed out). Each also gets
        an edge that nothing will ever ack, so that no ack of its tuples still to come (or
        sent before the failure lands) can complete it."""
        ex = self.ex
        acks = ex.out.acks
        control = ex.out.control
        for r in dict.fromkeys(roots):
            acks[r] = acks.get(r, 0) ^ (_getrandbits(62) | 1)
            control.append([wire.FAIL, ex.acker_for(r), r, 0, 0])

    def ack(self, tup: Tuple) -> None:
        ex = self.ex
        a: dict[Any, Any] | None = tup.anchors
        if a:
            # a run of acks of one root XORs into the outbox's unboxed `run_x`; the run goes
            # into the acks dict when another root comes (Outbox). Roots stay objects (`Any`)
            # as the dict's keys: compiled, an `int` root would be boxed anew for each store
            out = ex.out
            v = tup.ack_val
            for r, edge in a.items():
                y: int = edge
                if out.run_open:
                    if r is out.run_root or r == out.run_root:
                        out.run_x ^= y ^ v
                        continue
                    out.settle()
                out.run_root = r
                out.run_x = y ^ v
                out.run_open = True
        ex.stats.acked += 1

    def fail(self, tup: Tuple) -> None:
        ex = self.ex
        if tup.anchors:
            for r in tup.anchors:
                ex.out.acks.pop(r, None)
                ex.out.control.append([wire.FAIL, ex.acker_for(r), r, 0, 0])
        ex.stats.failed += 1

    def report_error(self, exc: BaseException) -> None:
        self.ex.report_error(self.task, exc)


class WindowFeed:
    """`WindowedBoltExecutor._execute_mirrored` in compiled code: a tuple joins a processing-time
    window slid by duration (the manager's timestamp and tuple lists; its anchors go from the
    tuple to the window's lists of roots, edges and counts, which `settle` copies into the
    window's arrays per batch). The executor calls `add` for such a bolt's tuples instead of its interpreted
    `execute`, and `settle` after each batch; same lists, same order, same clock. Holds the
    lists themselves (the window never replaces them while mirrored); `add` answers False, and
    the bolt's own `execute` takes the tuple, for tick tuples and once the window stopped
    mirroring (anchors outside 64 bits, or the bolt needed its tuples' own anchors: the window
    turns `on` off)."""

    __slots__ = ("window", "clock", "stamps", "items", "proot", "pedge", "pn", "on", "now", "per_batch")

    def __init__(self, window: WindowedBoltExecutor, per_batch: bool = False) -> None:
        rooted = window.rooted
        assert rooted is not None and rooted.rts is not None
        self.window = window
        self.clock: Callable[[], float] = window.clock
        # the manager's timestamps, as objects: a batch's tuples share one (`now`)
        self.stamps: list[Any] = window.manager.ts
        self.items: list[Tuple] = window.manager.items
        self.proot: list[Any] = rooted.proot
        self.pedge: list[Any] = rooted.pedge
        self.pn: list[int] = rooted.pn
        self.on = True
        # `per_batch`: the tuples of a batch share its arrival time, read from the clock at its
        # first tuple (`now`; None: not read yet), one float object for the batch rather than
        # one per tuple, which the window would keep for its length and slide and free cold.
        # Whoever adds must then call `end_batch` after each batch and before the window's
        # timer fires (`BoltExecutor` does); without it each tuple reads the clock
        self.per_batch = per_batch
        self.now: Any = None
        window.feed = self

    def add(self, tup: Tuple) -> bool:
        if not self.on or tup.stream == TICK_STREAM:
            return False
        stamps = self.stamps
        now = self.now
        if now is None:
            t = self.clock()
            if stamps and stamps[-1] > t:
                t = stamps[-1]  # a clock stepped back: keep arrival order
            if self.per_batch:
                self.now = t
                now = self.now  # the object just stored (compiled, `t` is a C double boxed per use)
            else:
                now = t
        stamps.append(now)
        self.items.append(tup)
        a = tup.anchors
        if a:
            # the window keeps the tuple for seconds: without its anchors dict (a third of
            # what it weighs); its ids go to the window's arrays at `settle`, once per batch
            # (`_WindowAnchoring.restore` puts the dict back if ever needed)
            proot, pedge = self.proot, self.pedge
            for r, e in a.items():
                proot.append(r)
                pedge.append(e)
            self.pn.append(len(a))
            tup.anchors = None
        else:
            self.pn.append(0)
        return True

    def settle(self) -> None:
        """The batch's anchors into the window's arrays (`_WindowAnchoring.settle`)."""
        if self.pn:
            self.window.settle()

    def end_batch(self) -> None:
        """The batch is in: the next tuple reads the clock again. Called after each batch
        `BoltExecutor.process` hands over, and before the window's timer fires (a tuple added
        after a window fired must not carry a time from before it)."""
        self.now = None


class BoltExecutor(Executor):
    kind = "bolt"

    def __init__(self, worker: WorkerHost, plan: TopologyPlan, executor: ExecutorId, component: str, cls: type,
                 conf: Mapping[str, Any], tick_secs: float | None) -> None:
        super().__init__(worker, executor, component)
        self.conf = conf
        self.contexts = {t: Context(worker, plan, t) for t in self.tasks}
        self.instances = {t: cls() for t in self.tasks}
        self.collectors = {t: BoltCollector(self, t) for t in self.tasks}
        self.basic = issubclass(cls, BasicBolt)
        self.tick_secs = tick_secs
        self.fields_of: dict[tuple[int, str], Mapping[str, int]] = {}
        # windowed bolts: each instance runs inside Storm's WindowedBoltExecutor; time windows
        # and watermarks fire from this loop when `_fire_timers` finds them due
        self.windowed: list[WindowedBoltExecutor] = []
        if issubclass(cls, WindowedBolt):
            spec = next(b for b in worker.spec.bolts if b.name == component)
            if spec.window is None:
                raise ValueError(f"bolt {component!r} is a WindowedBolt without a window")
            config = WindowConfig.from_spec(spec.window.model_dump(by_alias=True, exclude_none=True))
            inputs = [(i.component, i.stream) for i in spec.inputs]
            timeout = float(worker.spec.message_timeout_secs)
            self.windowed = [WindowedBoltExecutor(b, config, inputs, timeout=timeout)
                             for b in self.instances.values()]
            self.instances = dict(zip(self.tasks, self.windowed))
        # completions of the windows' own trees (`_WindowAnchoring`), put here by the worker's
        # control path without waiting: when it is full they are dropped, and the windows time
        # those trees out (failing their spout trees, which are replayed)
        self.tree_done = Inbox(TREE_DONE_BATCHES)
        # task -> its window's compiled per-tuple input, where the window mirrors its anchors
        self.feeds: dict[int, WindowFeed] = {}
        self.next_tick: float | None = None
        # past this (time.perf_counter), `process` leaves the rest of its batch for the next step
        self.deadline = float("inf")
        self.step_budget = STEP_BUDGET
        self.flush_secs = FLUSH_SECS

    def on_routing(self) -> None:
        plan = self.routing.plan  # type: ignore[union-attr]
        idx: dict[tuple[str, str], Mapping[str, int]] = {}
        for (comp, stream) in plan.subscriptions:
            idx[(comp, stream)] = plan.fields_index(comp, stream)
        idx[(SYSTEM, TICK_STREAM)] = {"rate_secs": 0}
        self._fields_by_comp = idx
        self._task_component = plan.task_component

    def open(self) -> None:
        self.refresh_routing()
        for task, bolt in self.instances.items():
            try:
                bolt.prepare(self.conf, self.contexts[task], self.collectors[task])
            except Exception as exc:
                self.report_error(task, exc)
                raise
        for task, w in zip(self.tasks, self.windowed):
            if w.rooted is not None and w.rooted.rts is not None:
                self.feeds[task] = WindowFeed(w, per_batch=True)
        self.next_tick = time.monotonic() + self.tick_secs if self.tick_secs else None

    def step(self, now: float) -> float:
        """Output held back from the last step first (while any is, it takes no input: that is
        the backpressure a slow consumer puts on this bolt, and through it on its upstream);
        then due windows and ticks; then up to BOLT_BATCHES batches of its inbox within
        STEP_BUDGET; then its output handed on."""
        self.refresh_routing()  # an idle executor moves to a new routing too
        if not self.flush():
            return HELD_WAIT
        self.deadline = float("inf")  # a tick's batch is processed whole
        wait = 0.1
        if self.windowed:
            wait = self._fire_timers(wait)
        next_tick = self.next_tick
        if next_tick is not None:
            if now >= next_tick:
                self.next_tick = next_tick = now + self.tick_secs  # type: ignore[operator]
                self.process([[t, SYSTEM_TASK, TICK_STREAM, [self.tick_secs], None] for t in self.tasks])
            wait = min(wait, next_tick - now)
        inbox = self.inbox
        taken = 0
        batch = self.held
        if batch is not None:
            self.held = None
        else:
            try:
                batch = inbox.get_nowait()
            except queue.Empty:
                pass
        if batch is not None:
            if self.load_aware:
                self.refresh_load(now)
            perf = time.perf_counter
            t0 = perf()
            budget = self.step_budget
            self.deadline = t0 + budget
            self.process(batch)
            taken = 1
            # keep going while input is queued, within the step's budget
            while taken < BOLT_BATCHES and self.held is None and perf() - t0 < budget:
                try:
                    batch = inbox.get_nowait()
                except queue.Empty:
                    break
                self.process(batch)
                taken += 1
        elif self.retiring and self.settled and not self.bufs and not self.out.control and inbox.empty():
            self.finished = True  # moved away: nothing more can arrive, everything handed on
            return 0.0
        flushed = self.flush()
        if taken:
            return 0.0
        return wait if flushed else HELD_WAIT

    def close(self) -> None:
        for task, bolt in self.instances.items():
            try:
                bolt.cleanup()
            except Exception as exc:
                self.report_error(task, exc)
        if self.windowed:
            GC_POLICY.windows_hold(self, 0)

    def _fire_timers(self, wait: float) -> float:
        """Fire the windowed bolts' due time windows and watermarks; how long until the next."""
        fired = False
        done = self.tree_done
        if not done.empty():
            by_task = dict(zip(self.tasks, self.windowed))
            while True:
                try:
                    items = done.get_nowait()
                except queue.Empty:
                    break
                for _kind, task, root, ok, _x in items:
                    w = by_task.get(task)
                    if w is not None:
                        w.tree_done(root, bool(ok))
            fired = True
        timed = False
        for task, w in zip(self.tasks, self.windowed):
            due = w.seconds_to_next()
            if due is None:
                continue
            if due <= 0:
                feed = self.feeds.get(task)
                if feed is not None:
                    feed.end_batch()
                try:
                    w.on_timer()
                except Exception as exc:
                    self.report_error(task, exc)
                fired = timed = True
                due = w.seconds_to_next() or 0.0
            wait = min(wait, max(due, 0.0005))
        if timed:
            # size the collector's young generation to what the windows hold (gcpolicy.py)
            GC_POLICY.windows_hold(self, sum([w.held() for w in self.windowed]))
        if fired:
            self.flush()
        return wait

    def _fail_input(self, task: int, tup: Tuple) -> None:
        try:
            self.collectors[task].fail(tup)
        except Exception as exc:  # a tuple whose ids are broken: it times out at its spout
            self.report_error(task, exc)

    def process(self, batch: list[list[Any]]) -> None:
        comp_of = self._task_component
        fields = self._fields_by_comp
        instances = self.instances
        feeds = self.feeds
        basic = self.basic
        stats = self.stats
        perf = time.perf_counter
        # execute latency is sampled (1 tuple in 16): timing every tuple costs more than a no-op bolt
        n = stats.executed
        last_src: Any = None
        last_stream: Any = None
        comp = SYSTEM
        fidx: Mapping[str, int] = {}
        flushed_at = perf()
        deadline = self.deadline
        flush_secs = self.flush_secs
        for i, (dest, src, stream, values, anchors) in enumerate(batch):
            if not n & 7 and perf() - flushed_at > flush_secs:
                # a slow bolt in a big batch: hand its acks and output on as it goes, and past
                # its step's deadline leave the rest for its next step (the others' turn)
                stats.executed = n
                self.flush()
                flushed_at = perf()
                if flushed_at > deadline and i:
                    self.held = batch[i:]
                    break
            bolt = instances.get(dest)
            if bolt is None:
                stats.dropped += 1
                continue
            if (src is not last_src or stream is not last_stream) and (src != last_src or stream != last_stream):
                # batches mostly come from one source task: look its stream up once (a local
                # emitter's items share its task id and stream objects: compared by identity
                # first, by value only when they differ, as items decoded from a frame do)
                comp = comp_of.get(src, SYSTEM)
                fidx = fields.get((comp, stream), {})
                last_src, last_stream = src, stream
            tup = Tuple(values, src, comp, stream, fidx, anchors)
            n += 1
            timed = not n & 15
            if timed:
                t0 = perf()
            if basic:
                self.auto_anchor = tup
                try:
                    bolt.process(tup)
                except FailedException:
                    self._fail_input(dest, tup)
                except Exception as exc:
                    self.report_error(dest, exc)
                    self._fail_input(dest, tup)
                else:
                    self.collectors[dest].ack(tup)
                self.auto_anchor = None
            else:
                try:
                    feed = feeds.get(dest) if feeds else None
                    if feed is None or not feed.add(tup):
                        bolt.execute(tup)
                except Exception as exc:
                    # a bolt that raises fails its input (the spout replays it) and keeps running
                    self.report_error(dest, exc)
                    self._fail_input(dest, tup)
            if timed:
                stats.latency((perf() - t0) * 1000.0)
        stats.executed = n
        if feeds:
            # the windows copy the anchors into their arrays while they are hot, a few batches
            # at a time (a copy costs ~0.6 us plus ~90 ns a tuple; batches may be small)
            for feed in feeds.values():
                feed.end_batch()  # the next batch reads the clock again
                if len(feed.pn) >= SETTLE_AT:
                    feed.settle()
