"""A bolt's executor: a few inbox batches per step within a time budget, windows (WindowFeed)
and timers (ticks, window timers); its collector is squall.worker.anchoring's BoltCollector."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping
from typing import Any

from squall.components import BasicBolt, FailedException, WindowedBolt
from squall.gcpolicy import POLICY as GC_POLICY
from squall.models.cluster import ExecutorId
from squall.plan import SYSTEM, SYSTEM_TASK, TICK_STREAM, TopologyPlan
from squall.tuples import Tuple
from squall.windowing import WindowConfig, WindowedBoltExecutor
from squall.worker.anchoring import BoltCollector
from squall.worker.context import Context
from squall.worker.executor import (
    BOLT_BATCHES,
    FLUSH_SECS,
    HELD_WAIT,
    SETTLE_AT,
    STEP_BUDGET,
    TREE_DONE_BATCHES,
    Executor,
)
from squall.worker.host import WorkerHost
from squall.worker.routing import Inbox


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
        # (task, the instance's `idle_step`) for bolts that keep something alive between
        # tuples (squall.multilang.ShellBolt heartbeats its child): called every step with the
        # monotonic time, each answers how long until it wants the next call
        self.idlers: list[tuple[int, Callable[[float], float]]] = []
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
        self.idlers = [(task, fn) for task, bolt in self.instances.items()
                       if callable(fn := getattr(bolt, "idle_step", None))]

    def step(self, now: float) -> float:
        """Output held back from the last step first (while any is, it takes no input: that is
        the backpressure a slow consumer puts on this bolt, and through it on its upstream);
        then due windows and ticks, and the bolts' `idle_step`s; then up to BOLT_BATCHES batches of its inbox within
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
        if self.idlers:
            wait = self._idle(now, wait)
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

    def _idle(self, now: float, wait: float) -> float:
        """The bolts' `idle_step`s; how long until the soonest wants its next call."""
        for task, idle_step in self.idlers:
            try:
                wait = min(wait, idle_step(now))
            except Exception as exc:  # the component's own failure: reported, the executor goes on
                self.report_error(task, exc)
        return wait

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
