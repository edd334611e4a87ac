"""The worker's engine loop: one thread steps every executor, reads the ports, and sleeps.

A worker used to be a thread per executor plus receive and transfer threads handing batches to
each other through queues and taking turns at the GIL (docs/performance.md measured 17,600
context switches a second and a third of a word's cost in the hand-overs). The engine loop is
Storm's executor model run the way Bytewax and Heron's instance run theirs: one thread that,
each turn,

1. reads the data and control ports without blocking (at most FRAMES_PER_TURN frames each:
   data into the executors' inboxes, acker messages into the ackers inline), the data port only
   while no inbox is past its parking bound (`EngineHost.data_turn`);
2. steps every executor once, bolts furthest from the spouts first (`step_order`), so that a
   turn drains the topology's tail before its head adds to it: a bolt takes a few batches of
   its inbox, a spout calls `next_tuple` while it is below maxSpoutPending and its output has
   room; an executor whose output is held back (a full inbox, a slow or backpressured peer)
   takes nothing new until it left, which is backpressure as scheduling;
3. sends what the executors staged for each peer as one frame per peer (`DirectSender` shared
   by all of them, `push_staged`);
4. when no executor has more to do now, sleeps in one `zmq.Poller` on both ports, the sockets
   of slow peers, and a wake pipe (`ring`) that other threads use (a new assignment, activation,
   a stop, an isolated executor's output), for as long as the soonest executor asked (a tick,
   a window's timer, an idle spout's next call).

The main thread keeps ZooKeeper (refresh, heartbeats) and hands the loop new executors
(`add`) and immutable routing snapshots (`worker.routing`, which every executor re-reads at its
step). An executor whose component blocks (`executor.is_isolated`) gets a thread of its own,
which steps it the same way (`Executor.run_thread`). One the loop finds slow (ISOLATE_AFTER
steps of more than `worker.loop.isolate.secs` within ISOLATE_WINDOW_SECS, `too_slow`; its quick
steps in between, with nothing to do, do not count for it) is moved to a thread of its own then,
with one log line naming it; a step that held the loop longer than `worker.loop.warn.secs` is
logged with the component's name, since every other executor of the worker waited that long.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import zmq

from squall import wire
from squall.plan import TopologyPlan
from squall.worker.executor import CLOSE_LINGER_MS, Executor
from squall.worker.routing import Routing
from squall.worker.threads import NamedThread, executor_thread_name
from squall.worker.transport import DirectSender, PeerQueues

log = logging.getLogger("squall.engine")

FRAMES_PER_TURN = 64  # frames read from each port per turn
IDLE_SECS = 0.1  # the longest sleep of an idle loop (retiring executors and time-outs are checked)
WARN_STEP_SECS = 1.0  # a step that held the loop this long is logged (worker.loop.warn.secs)
# an executor whose steps take this long ISOLATE_AFTER times within ISOLATE_WINDOW_SECS moves to
# a thread of its own (worker.loop.isolate.secs; 0: never): a bolt that sleeps or calls a slow
# service would otherwise make every other executor of the worker wait
ISOLATE_STEP_SECS = 0.05
ISOLATE_AFTER = 3
ISOLATE_WINDOW_SECS = 10.0
LOOP_NAME = "engine"

__all__ = ["Engine", "EngineHost", "LOOP_NAME", "step_order", "too_slow"]


def too_slow(slow_steps: list[float], now: float) -> bool:
    """Whether an executor whose slow steps began at `slow_steps` (the loop's clock, oldest
    first; trimmed here to the window) has been slow often enough to leave the loop: at least
    ISOLATE_AFTER of them within the last ISOLATE_WINDOW_SECS. Quick steps do not count: a slow
    bolt with nothing to do between its inputs steps quickly then, and a rule of slow steps in a
    row would never move it however long each input held the loop."""
    while slow_steps and now - slow_steps[0] > ISOLATE_WINDOW_SECS:
        slow_steps.pop(0)
    return len(slow_steps) >= ISOLATE_AFTER


def step_order(executors: Iterable[Executor], plan: TopologyPlan) -> list[Executor]:
    """The order of a turn: bolts by their distance from the spouts, furthest first, then the
    spouts; ties by task. A turn then drains the topology's tail before its head adds to it, and
    a tuple emitted early in a turn waits for the next turn at most once per hop backwards. The
    distance is the longest path from a spout (cycles are cut: a component is counted once per
    path)."""
    downstream: dict[str, set[str]] = {}
    for (src, _stream), subs in plan.subscriptions.items():
        for sub in subs:
            downstream.setdefault(src, set()).add(sub.component)
    depth: dict[str, int] = {}

    def visit(comp: str, d: int, path: frozenset[str]) -> None:
        if depth.get(comp, -1) >= d:
            return
        depth[comp] = d
        for nxt in sorted(downstream.get(comp, ())):
            if nxt not in path:
                visit(nxt, d + 1, path | {nxt})

    for spout in sorted(plan.spouts):
        visit(spout, 0, frozenset({spout}))
    return sorted(executors, key=lambda ex: (ex.kind == "spout", -depth.get(ex.component, 0), ex.id))


class EngineHost(Protocol):
    """What the loop needs from its worker (runtime.Worker)."""

    @property
    def routing(self) -> Routing: ...

    stop_event: threading.Event
    loop_turns: dict[str, float]
    conf: dict[str, Any]
    control_peers: PeerQueues

    def data_turn(self, now: float) -> tuple[bool, int]: ...
    def dispatch_data(self, items: list[Any]) -> None: ...
    def receive_control(self, items: list[list[int]], peer: str | None) -> None: ...
    def bad_frame(self, exc: Exception) -> None: ...
    def executor_died(self, ex: Any, exc: BaseException) -> None: ...
    def loop_failed(self, exc: BaseException) -> None: ...
    def shared_sender(self) -> DirectSender: ...


class Engine:
    """The loop of one worker (see the module's docstring). `sockets`: the data and control
    ports (bound by the worker); `peer_addresses`: whether the control port's frames carry the
    sender's address (plain TCP: the worker checks who may send backpressure signals)."""

    def __init__(self, host: EngineHost, data_sock: zmq.Socket[bytes], control_sock: zmq.Socket[bytes],
                 peer_addresses: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.data_sock = data_sock
        self.control_sock = control_sock
        self.peer_addresses = peer_addresses
        self.clock = clock
        self.sender: DirectSender | None = None
        self.executors: list[Executor] = []
        # executors handed over by the main thread, opened by the loop at its next turn
        self.new: deque[Executor] = deque()
        # closed executors whose last output is still going out: executor -> give up after (monotonic)
        self.draining: dict[Executor, float] = {}
        self.warn_secs = float(host.conf.get("worker.loop.warn.secs", WARN_STEP_SECS))
        self.isolate_secs = float(host.conf.get("worker.loop.isolate.secs", ISOLATE_STEP_SECS))
        # executor -> when its recent slow steps began (`too_slow`)
        self.slow: dict[Executor, list[float]] = {}
        self.routing: Routing | None = None
        # the wake pipe: a byte written by any thread ends the loop's sleep
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.thread = NamedThread(target=self.run, name=LOOP_NAME, daemon=True)

    def _dispatch(self, items: list[Any], _peer: str | None) -> None:
        self.host.dispatch_data(items)

    # -- from other threads --------------------------------------------------------------------
    def ring(self) -> None:
        """Wake the loop (any thread; never blocks: a full pipe already wakes it)."""
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass

    def add(self, ex: Executor) -> None:
        """A new executor (the main thread, applying an assignment): opened and stepped by the
        loop, or started on a thread of its own when isolated."""
        if ex.isolated:
            self._start_thread(ex, opened=False)
            return
        self.new.append(ex)
        self.ring()

    def _start_thread(self, ex: Executor, opened: bool) -> None:
        ex.isolated = True
        thread = NamedThread(
            target=ex.run_thread, args=(self.ring, opened), daemon=True,
            name=f"executor-{ex.component}-{ex.id[0]}-{ex.id[1]}",
            os_name=executor_thread_name(ex.component, ex.id[0], ex.id[1]),
        )
        ex.thread = thread
        thread.start()

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def close(self) -> None:
        """Close the wake pipe (the worker, once the loop and every thread that rings it ended)."""
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        host = self.host
        stop = host.stop_event
        turns = host.loop_turns
        self.sender = host.shared_sender()
        try:
            while not stop.is_set():
                now = self.clock()
                turns[LOOP_NAME] = now
                if self.new:
                    self._open_new()
                if self.draining:
                    self._drain(now)
                read_data, wait_ms = host.data_turn(now)
                got = self._read(self.data_sock, wire.unpack_data, self._dispatch, False) if read_data else 0
                read_control = not host.control_peers.over_hard_limit()
                if read_control:
                    got += self._read(self.control_sock, wire.unpack_control, host.receive_control,
                                      self.peer_addresses)
                wait = self._step_all(now)
                self.sender.push_staged()
                if self.slow:
                    self._isolate_slow(now)
                if got or wait <= 0.0:
                    continue
                self._sleep(min(wait, wait_ms / 1000.0), read_data, read_control)
        except Exception as exc:  # a bug of ours outside any executor: the worker exits to be restarted
            self.host.loop_failed(exc)
        finally:
            self._close_all()

    def _open_new(self) -> None:
        routing_changed = False
        while self.new:
            ex = self.new.popleft()
            ex.direct_data = self.sender
            try:
                ex.open()
            except Exception as exc:
                ex.report_error(ex.tasks[0], exc, always=True)
                self.host.executor_died(ex, exc)
                ex.done = True
                continue
            self.executors.append(ex)
            routing_changed = True
        if routing_changed:
            self._reorder()

    def _reorder(self) -> None:
        self.routing = self.host.routing
        self.executors = step_order(self.executors, self.routing.plan)

    def _step_all(self, now: float) -> float:
        """Step every executor once; the soonest any of them wants its next step (0.0: at once)."""
        wait = IDLE_SECS
        perf = time.perf_counter
        warn = self.warn_secs
        gone: list[Executor] = []
        for ex in self.executors:
            if ex.finished or ex.stop_event.is_set():
                gone.append(ex)
                continue
            t0 = perf()
            try:
                w = ex.step(now)
            except Exception as exc:  # a bug of ours: report it, the worker exits to be restarted
                ex.report_error(ex.tasks[0], exc, always=True)
                self.host.executor_died(ex, exc)
                gone.append(ex)
                continue
            held = perf() - t0
            if held > warn:
                log.warning("%s %s held the worker's loop for %.2fs in one step: every other executor of "
                            "the worker waited", ex.kind, ex.component, held)
            if 0.0 < self.isolate_secs < held:
                self.slow.setdefault(ex, []).append(now)
            if w < wait:
                wait = w
        if gone:
            for ex in gone:
                self.executors.remove(ex)
                self.slow.pop(ex, None)
                self._close(ex, now)
        elif self.routing is not self.host.routing and self.executors:
            self._reorder()
        return wait

    def _isolate_slow(self, now: float) -> None:
        """Executors slow often enough (`too_slow`) leave the loop for a thread of their own
        (after the turn's frames left, so that what they staged goes out first)."""
        for ex, times in list(self.slow.items()):
            if not too_slow(times, now):
                if not times:
                    del self.slow[ex]
                continue
            del self.slow[ex]
            if ex not in self.executors:
                continue
            self.executors.remove(ex)
            log.info("%s %s (tasks %d-%d) takes more than %.0f ms a step: it runs on a thread of its own from now "
                     "on, so that the worker's other executors do not wait for it (set squall.executor.isolated: "
                     "true in its config to start it there)", ex.kind, ex.component, ex.id[0], ex.id[1],
                     self.isolate_secs * 1000)
            self._start_thread(ex, opened=True)

    def _close(self, ex: Executor, now: float) -> None:
        """Close a finished or stopped executor; a retiring one's last output still goes out
        (until its retirement deadline)."""
        try:
            ex.close()
            flushed = ex.flush()
        except Exception as exc:
            ex.report_error(ex.tasks[0], exc, always=True)
            flushed = True
        if flushed or not ex.retiring or ex.stop_event.is_set():
            ex.done = True
        else:
            self.draining[ex] = ex.retire_by

    def _drain(self, now: float) -> None:
        for ex, deadline in list(self.draining.items()):
            try:
                flushed = ex.flush()
            except Exception:
                flushed = True
            if flushed or now > deadline or ex.stop_event.is_set():
                del self.draining[ex]
                ex.done = True

    def _read(self, sock: zmq.Socket[bytes], unpack: Callable[[bytes], Any],
              handle: Callable[[Any, str | None], None], with_peer: bool) -> int:
        """Up to FRAMES_PER_TURN frames of a port, each decoded and handed on (with the sender's
        address when `with_peer`); a frame that does not decode is counted and dropped."""
        host = self.host
        n = 0
        while n < FRAMES_PER_TURN:
            peer = None
            try:
                if with_peer:
                    msg = sock.recv(zmq.NOBLOCK, copy=False)
                    got = msg.get("Peer-Address")
                    frame, peer = msg.bytes, got if isinstance(got, str) else None
                else:
                    frame = sock.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            n += 1
            try:
                items = unpack(frame)
            except wire.WireError as exc:
                host.bad_frame(exc)
                continue
            handle(items, peer)
        return n

    def _sleep(self, secs: float, read_data: bool, read_control: bool) -> None:
        poller = zmq.Poller()
        if read_data:
            poller.register(self.data_sock, zmq.POLLIN)
        if read_control:
            poller.register(self.control_sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        sender = self.sender
        if sender is not None:
            for slot in sender.pending:
                have = sender.socks.get(slot)
                if have is not None:
                    poller.register(have[1], zmq.POLLOUT)
        for sock, _ev in poller.poll(max(0, int(secs * 1000.0 + 0.999))):
            if sock == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass

    def _close_all(self) -> None:
        """The worker stops: every executor closed, spouts first (they fail what is pending, so
        nothing is forgotten), their last output handed on once, the shared sockets closed with
        CLOSE_LINGER_MS for what they still hold."""
        now = self.clock()
        for ex in sorted(self.executors, key=lambda e: e.kind != "spout"):
            self._close(ex, now)
        for ex in self.executors:
            ex.done = True
        for ex in self.draining:
            ex.done = True
        self.draining.clear()
        sender = self.sender
        if sender is not None:
            sender.close(CLOSE_LINGER_MS)

