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

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from squall import wire
from squall.groupings import (
    EVERYTHING,
    HOST_LOCAL,
    SCOPE_NAMES,
    WORKER_LOCAL,
    Chooser,
    LoadAwareShuffle,
    make_chooser,
)
from squall.models.cluster import ExecutorId
from squall.counters import Counters
from squall.tuples import Tuple
from squall.worker.host import WorkerHost
from squall.worker.load import PeerLoads
from squall.worker.routing import Inbox, Routing
from squall.worker.transport import DirectSender
from squall.worker.context import Context
from squall.sampling import Sampler

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
__all__ = ["Executor", "Inbox", "Outbox", "is_isolated"]


def is_isolated(cls: type, conf: Mapping[str, Any]) -> bool:
    """Whether a component's executor runs on a thread of its own instead of the engine loop:
    its config says so (`squall.executor.isolated`), or its class does (`isolated = True`, as
    the multilang and Spark components do: they wait on a child process or a batch job)."""
    got = conf.get(ISOLATED_KEY)
    if got is not None:
        return bool(got)
    return bool(getattr(cls, "isolated", False))

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
        # the event inspector's sampling of this executor's emits (squall.sampling); None: off
        self.sampler: Sampler | None = None
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
