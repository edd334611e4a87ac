"""A spout's executor and collector: completions first, then `next_tuple` while below
maxSpoutPending, each emit a new tuple tree whose pending entry waits for its acker's verdict."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Mapping, Sequence
from typing import Any

from squall import wire
from squall.acker import Ids, PendingTuples
from squall.counters import _LUT, bucket_of
from squall.models.cluster import ExecutorId
from squall.plan import CHECKPOINT_COMPONENT, SYSTEM, TopologyPlan
from squall.tuples import Tuple
from squall.worker.anchoring import BoltCollector
from squall.worker.context import Context
from squall.worker.errorlog import error_backoff
from squall.worker.executor import (
    HELD_WAIT,
    IDLE_WAIT,
    SPOUT_BATCH,
    Executor,
)
from squall.worker.host import WorkerHost

log = logging.getLogger("squall.executor")
STALL_S = 30.0  # an active spout not asked for tuples this long says why


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
        if ex.sampler is not None:
            ex.sampler.offer(task, stream, values, msg_id)
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
        if ex.sampler is not None:
            ex.sampler.offer(self.task, stream, values, msg_id)
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
        # the checkpoint spout stays active while the topology is deactivated: the checkpoints
        # go on, so the stateful bolts' held acks complete and a drain (a deactivation, a graph
        # upgrade's) ends with everything committed (squall.checkpoint.CheckpointSpout)
        self.always_active = component == CHECKPOINT_COMPONENT
        self.closing = False
        # task -> consecutive calls of its next_tuple that raised, and when it may be called
        # again (monotonic): a spout that only raises is called less and less often, up to once
        # a second (errorlog.error_backoff)
        self.error_streak: dict[int, int] = {}
        self.resume_at: dict[int, float] = {}
        # when an active spout last had its next_tuple called; one not called for `stall_s`
        # (twice the message timeout, 30 s at least) says why, once per `stall_s`: nothing else
        # would (its own checks, such as a Kafka spout's commits, run inside next_tuple)
        self.asked_at = self.now
        self.stall_s = max(STALL_S, 2.0 * timeout)
        self.stall_said = 0.0

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
        # the checkpoint spout, active while the topology is deactivated, still waits like the
        # others for every worker of the assignment to listen (a first round sent before is
        # dropped and fails only after messageTimeoutSecs: nothing was committed for ~20 s after
        # a graph upgrade on the real nodes), and stops in a worker of a replaced launch
        w = self.worker
        checkpoint = self.always_active and w.peers_ready and not w.relaunched
        self._set_active((w.active or checkpoint) and not self.closing and not self.retiring)
        emitted = 0
        if self.active and not self.bufs and not self.out.control:
            emitted = self._emit_batch()
        if self.active and now - self.asked_at >= self.stall_s and now - self.stall_said >= self.stall_s:
            self._say_stalled(now)  # neither output room nor room under maxSpoutPending for that long
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
            if rmap.size < limit:
                self.asked_at = self.now
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

    def _say_stalled(self, now: float) -> None:
        """Log why this active spout's next_tuple has not been called for `stall_s`."""
        self.stall_said = now
        if self.bufs:
            why = (f"its output is held: {sum(len(b) for b in self.bufs.values())} tuples for "
                   f"{len(self.bufs)} destination(s) that did not take them (a full inbox; a slow, "
                   f"backpressured or unregistered peer)")
        elif self.out.control:
            why = f"{len(self.out.control)} messages to its ackers are held"
        else:
            why = (f"maxSpoutPending ({self.max_pending}) tuples are in flight "
                   f"({', '.join(f'task {t}: {len(c.pending)}' for t, c in self.collectors.items())}) "
                   f"and none completed or timed out")
        log.warning("spout %s %s: next_tuple not called for %.0fs: %s", self.component, self.tasks,
                    now - self.asked_at, why)

    def _set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        self.asked_at = self.now  # a deactivated spout is not asked, by design
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
