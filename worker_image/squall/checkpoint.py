"""Storm's checkpointing of stateful components: the checkpoint spout and the `$checkpoint`
stream's protocol (prepare, commit, rollback, init-state), run through the topology graph.

Storm's parts and theirs here:

    CheckPointState (tx states and transitions)   `CheckPointState`, `next_action`, `next_state`
    CheckpointSpout (the coordinator)             `Coordinator` (pure) in `CheckpointSpout`
    StatefulBoltExecutor                          `BoltHarness` around a `StatefulBolt`
    CheckpointTupleForwarder                      `BoltHarness` around any other bolt
    (none: beyond Storm)                          `SpoutHarness` around a `StatefulSpout`

The checkpoint spout emits (txid, action, attempt) on `$checkpoint`; each bolt acts when the
barrier has come from every task it reads `$checkpoint` from (Storm counts them the same way),
then forwards it anchored to the last one, so the spout's tuple tree completes once every bolt
acted. PREPARE saves each state's changes as txid's, COMMIT applies them (2-phase: after a crash
a COMMITTING transaction is rolled forward, a PREPARING one rolled back), ROLLBACK returns every
state to the last commit, INITSTATE hands restarted bolts their state. A stateful bolt's acks
wait for the commit that holds their effects; a rollback fails them.

Beyond Storm, for exactly-once state with a `StatefulSpout`: the spout checkpoints its own state
(say, an offset) at PREPARE and forwards the barrier in line with its data; a bolt that has the
barrier from one input holds that input's later tuples until the barrier came from all of them
(barrier alignment), so each checkpoint is a consistent cut: the spout's offset covers exactly the
tuples whose effects the bolts' states hold. Recovery (after any failed checkpoint, and at every
start) always rolls back to the last commit, everywhere: a ROLLBACK round drops, on each input,
the tuples that arrive before its ROLLBACK barrier (they were emitted before the spouts rewound),
and the spouts re-emit from their committed offsets. `attempt` tells rounds apart.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from squall.components import (
    BasicBolt,
    Bolt,
    FailedException,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    StatefulSpout,
    StatefulWindowedBolt,
    Tuple,
    WindowedBolt,
)
from squall.gcpolicy import POLICY as GC_POLICY
from squall.gcpolicy import GcPolicy
from squall.plan import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, TopologyPlan
from squall.statebackend import (
    KeyValueState,
    StateBackendError,
    StateProvider,
    checkpoint_interval_secs,
    legacy_namespace,
    namespace,
    open_provider,
)
from squall.windowing import WindowConfig, WindowedBoltExecutor, WindowManager

log = logging.getLogger("squall.checkpoint")

# the conf key through which the worker tells a harness which components send it `$checkpoint`
SOURCES_KEY = "squall.checkpoint.sources"
# a windowed bolt's window and inputs, and the tick period its time windows fire on
WINDOW_KEY = "squall.checkpoint.window"
WINDOW_INPUTS_KEY = "squall.checkpoint.window.inputs"
TICK_KEY = "squall.checkpoint.tick.secs"
WINDOW_TICK_SECS = 0.1
WINDOW_STATE_KEY = "window"
TX_STATE_KEY = "__state"
# the conf key through which the worker tells a harness each component's task ids in the launch
# before the last graph upgrade (StormBase.state_tasks): where a state kept under Storm's
# `<component>-<task>` names by an older Squall is found (`task_state`)
LEGACY_TASKS_KEY = "squall.state.legacy.tasks"


def task_state(provider: StateProvider, conf: Mapping[str, Any], context: Any, suffix: str = "") -> KeyValueState:
    """The state of this task: `<component>#<index>` (statebackend.namespace), so that it is
    found again after a graph upgrade moved the task ids. A state an older Squall kept under
    `<component>-<task>` is copied there first when the task has none yet: the task id it had
    then is this task's own when no graph upgrade happened since (a roll to this version),
    else the one `LEGACY_TASKS_KEY` lists for this index in the launch before the upgrade."""
    component, task = str(context.component_id), int(context.task_id)
    tasks = list(context.component_tasks(component))
    index = tasks.index(task)
    name = namespace(component, index) + suffix
    before = conf.get(LEGACY_TASKS_KEY)
    legacy: int | None = task
    if isinstance(before, Mapping):
        old = before.get(component)
        legacy = int(old[index]) if old is not None and index < len(old) else None
    if legacy is not None and provider.migrate(name, legacy_namespace(component, legacy) + suffix):
        log.info("state %s: copied from %s (kept there by an older Squall)", name,
                 legacy_namespace(component, legacy) + suffix)
    return provider.state(name)


class Action(str, enum.Enum):
    PREPARE = "PREPARE"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    INITSTATE = "INITSTATE"


class TxState(str, enum.Enum):
    COMMITTED = "COMMITTED"
    COMMITTING = "COMMITTING"
    PREPARING = "PREPARING"


@dataclasses.dataclass(frozen=True)
class CheckPointState:
    """Storm's CheckPointState: COMMITTED(n) -PREPARE-> PREPARING(n+1) -COMMIT-> COMMITTING(n+1)
    -> COMMITTED(n+1); a PREPARING transaction is rolled back in recovery (not every bolt may
    have prepared), a COMMITTING one rolled forward (some may have committed)."""

    txid: int
    state: TxState

    def next_state(self, recovering: bool) -> CheckPointState:
        if self.state is TxState.PREPARING:
            return CheckPointState(self.txid - 1, TxState.COMMITTED) if recovering else \
                CheckPointState(self.txid, TxState.COMMITTING)
        if self.state is TxState.COMMITTING:
            return CheckPointState(self.txid, TxState.COMMITTED)
        return self if recovering else CheckPointState(self.txid + 1, TxState.PREPARING)

    def next_action(self, recovering: bool) -> Action:
        if self.state is TxState.PREPARING:
            return Action.ROLLBACK if recovering else Action.PREPARE
        if self.state is TxState.COMMITTING:
            return Action.COMMIT
        return Action.INITSTATE if recovering else Action.PREPARE


class Coordinator:
    """The checkpoint spout's logic, pure: `poll(now)` says what to emit, `ack` / `fail` move it
    on. `save` persists the tx state (the spout's own KeyValueState).

    One difference from Storm: recovery from a COMMITTED state sends ROLLBACK (to that commit)
    before INITSTATE, so that every state and every stateful spout returns to the same commit,
    not only the restarted ones (Storm sends INITSTATE alone and keeps survivors' uncommitted
    changes, which its at-least-once replay then counts twice)."""

    def __init__(self, tx: CheckPointState, interval: float, save: Callable[[CheckPointState], None],
                 first_attempt: int = 1) -> None:
        self.tx = tx
        self.interval = interval
        self._save = save
        self.recovering = True
        self.rolled_back = False
        self.in_progress: int | None = None  # the attempt awaiting its ack
        self.last_checkpoint = float("-inf")
        self.attempt = first_attempt - 1

    def _action(self) -> Action:
        if self.recovering:
            if self.tx.state is TxState.COMMITTED and not self.rolled_back:
                return Action.ROLLBACK
            return self.tx.next_action(True)
        return self.tx.next_action(False)

    def poll(self, now: float) -> tuple[int, Action, int] | None:
        """(txid, action, attempt) to emit now, or None."""
        if self.in_progress is not None:
            return None
        if not self.recovering:
            if self.tx.state is TxState.COMMITTED:
                if now - self.last_checkpoint < self.interval:
                    return None
                self._set(self.tx.next_state(False))
                self.last_checkpoint = now
        action = self._action()
        self.attempt += 1
        self.in_progress = self.attempt
        return self.tx.txid, action, self.attempt

    def ack(self, attempt: int) -> None:
        if attempt != self.in_progress:
            return  # a late answer to an attempt already given up
        self.in_progress = None
        if not self.recovering:
            self._set(self.tx.next_state(False))
            return
        if self.tx.state is TxState.COMMITTED and not self.rolled_back:
            self.rolled_back = True  # the ROLLBACK to the last commit went through
            return
        nxt = self.tx.next_state(True)
        if self.tx.state is TxState.PREPARING:
            self.rolled_back = True
        if nxt != self.tx:
            self._set(nxt)
        else:
            self.recovering = False  # INITSTATE went through: recovery complete

    def fail(self, attempt: int) -> None:
        if attempt != self.in_progress:
            return
        self.in_progress = None
        if not self.recovering:
            log.info("checkpoint txid %d failed (attempt %d); rolling back", self.tx.txid, attempt)
            self.recovering = True
            self.rolled_back = False

    def _set(self, tx: CheckPointState) -> None:
        self._save(tx)
        self.tx = tx


def save_value(state: KeyValueState, key: str, value: Any) -> None:
    """Puts and commits one value at once (the coordinator's own transactions)."""
    state.put(key, value)
    txid = (state.committed_txid() or 0) + 1
    state.prepare_commit(txid)
    state.commit(txid)


class CheckpointSpout(Spout):
    """Storm's CheckpointSpout: one task, added by the plan; its state lives in the state
    provider under `$checkpointspout#0` (`task_state`). Beyond Storm, it stays active while the
    topology is deactivated (a deactivation, or a graph upgrade's drain): the bolts' held acks
    complete with the next commit, so a drained stateful topology holds nothing uncommitted."""

    def open(self, conf: Mapping[str, Any], context: Any, collector: SpoutOutputCollector) -> None:
        super().open(conf, context, collector)
        self.provider = open_provider(conf)
        self.state = task_state(self.provider, conf, context)
        raw = self.state.get(TX_STATE_KEY)
        tx = CheckPointState(int(raw[0]), TxState(raw[1])) if raw else CheckPointState(-1, TxState.COMMITTED)
        if raw is None:
            self._save(tx)
        # attempts stay unique across restarts of this spout (they tell rounds apart)
        self.coordinator = Coordinator(tx, checkpoint_interval_secs(conf), self._save,
                                       first_attempt=int(time.time() * 1000))

    def _save(self, tx: CheckPointState) -> None:
        save_value(self.state, TX_STATE_KEY, [tx.txid, tx.state.value])

    def next_tuple(self) -> None:
        now = time.monotonic()
        if now < self.retry_at:
            return
        got = self._guard(lambda: self.coordinator.poll(now))
        if got is not None:
            txid, action, attempt = got
            log.debug("checkpoint: %s txid %d attempt %d", action.value, txid, attempt)
            self.collector.emit([txid, action.value, attempt], stream=CHECKPOINT_STREAM, msg_id=attempt)

    def ack(self, msg_id: Any) -> None:
        self._guard(lambda: self.coordinator.ack(int(msg_id)))

    def fail(self, msg_id: Any) -> None:
        self._guard(lambda: self.coordinator.fail(int(msg_id)))

    retry_at = 0.0
    _warned_at = float("-inf")

    def _guard(self, step: Callable[[], Any]) -> Any:
        """A step whose tx state cannot be saved (the store is down) is retried a second
        later, the same step again (each is idempotent); one warning per 30 s, not a flood."""
        try:
            return step()
        except StateBackendError as exc:
            now = time.monotonic()
            self.retry_at = now + 1.0
            if now - self._warned_at > 30:
                self._warned_at = now
                log.warning("checkpoint spout: %s; retrying every second", exc)
            return None


# -- bolts -------------------------------------------------------------------------------------
class _AckTracking:
    """The collector a stateful bolt gets: acks are recorded (the harness acks them after the
    commit), everything else goes through (Storm's AckTrackingOutputCollector)."""

    def __init__(self, delegate: OutputCollector) -> None:
        self.delegate = delegate
        self.acked: list[Tuple] = []
        self.emit = delegate.emit
        self.emit_direct = delegate.emit_direct
        self.fail = delegate.fail
        self.report_error = delegate.report_error

    def ack(self, tup: Tuple) -> None:
        self.acked.append(tup)

    def take(self) -> list[Tuple]:
        out, self.acked = self.acked, []
        return out


class _Anchoring:
    """The collector a BasicBolt gets inside the harness: emits are anchored to the input being
    processed (the executor does this for a BasicBolt it runs itself)."""

    def __init__(self, delegate: Any) -> None:
        self.delegate = delegate
        self.current: Tuple | None = None
        self.ack = delegate.ack
        self.fail = delegate.fail
        self.report_error = delegate.report_error

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> list[int]:
        result: list[int] = self.delegate.emit(values, stream, anchors if anchors is not None else self.current)
        return result

    def emit_direct(self, task: int, values: Any, stream: str = "default", anchors: Any = None) -> None:
        self.delegate.emit_direct(task, values, stream, anchors if anchors is not None else self.current)


class BoltHarness(Bolt):
    """Runs any bolt of a topology with stateful components: a `StatefulBolt` with its state
    and deferred acks (StatefulBoltExecutor), any other bolt forwarding `$checkpoint`
    (CheckpointTupleForwarder). `inner` is the user's class (set by `wrap`)."""

    inner: ClassVar[type]

    def __init__(self) -> None:
        self.bolt = self.inner()
        self.windowed = isinstance(self.bolt, WindowedBolt)
        # state kept for it: its own (a StatefulBolt, a StatefulWindowedBolt), its windows'
        self.has_state = isinstance(self.bolt, (StatefulBolt, StatefulWindowedBolt))
        self.stateful = self.has_state or self.windowed
        self.runner: WindowedBoltExecutor | None = None
        self.window_state: KeyValueState | None = None
        self.initialized = False
        self.round: tuple[str, int, int] | None = None  # (action, txid, attempt) being aligned
        self.arrived: set[int] = set()
        self.held: list[Tuple] = []
        self.before_init: list[Tuple] = []
        self.prepared_acks: list[Tuple] = []
        self.state: KeyValueState | None = None
        # the worker's collector thresholds, told what the windows hold after they fire on a
        # tick (as the executor does for a plain windowed bolt: squall/gcpolicy.py)
        self.gc_policy: GcPolicy = GC_POLICY

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: OutputCollector,
                provider: StateProvider | None = None) -> None:
        super().prepare(conf, context, collector)
        sources = list(conf.get(SOURCES_KEY, ()))
        self.inputs = frozenset(t for c in sources for t in context.component_tasks(c))
        cp = context.component_tasks(CHECKPOINT_COMPONENT) if CHECKPOINT_COMPONENT in sources else []
        self.cp_task: int | None = cp[0] if cp else None
        self.out: Any = collector
        if self.stateful:
            if provider is None:
                provider = open_provider(conf)
            self.state = task_state(provider, conf, context)
            self.out = _AckTracking(collector)
        self.basic: _Anchoring | None = None
        if self.windowed:
            # Storm's persistent windowing: the window contents are checkpointed beside the state
            self.window_config = WindowConfig.from_spec(conf[WINDOW_KEY])
            self.window_inputs = [tuple(i) for i in conf.get(WINDOW_INPUTS_KEY, ())]
            assert provider is not None
            self.window_state = task_state(provider, conf, context, "$window")
            self.runner = WindowedBoltExecutor(self.bolt, self.window_config, self.window_inputs)
            self.runner.prepare(conf, context, self.out)
        elif isinstance(self.bolt, BasicBolt):
            # Storm's BasicBoltExecutor inside the forwarder: anchor, then ack or fail the input
            self.basic = _Anchoring(self.out)
            self.bolt.prepare(conf, context, self.basic)
        else:
            self.bolt.prepare(conf, context, self.out)

    def cleanup(self) -> None:
        if self.runner is not None:
            self.gc_policy.windows_hold(self, 0)
            self.runner.cleanup()
        else:
            self.bolt.cleanup()

    def execute(self, tup: Tuple) -> None:
        if tup.stream == CHECKPOINT_STREAM:
            self._barrier(tup)
            return
        if tup.is_tick():
            if self.initialized or not self.stateful:
                self._call(tup)
            return
        # the input whose barrier orders this tuple: its source, or for a plain spout's tuples
        # the checkpoint spout that stands in for it
        src = tup.source_task
        ch = src if src in self.inputs else self.cp_task
        r = self.round
        if r is not None:
            if ch in self.arrived:
                if r[0] == Action.ROLLBACK or r[0] == Action.PREPARE:
                    self.held.append(tup)  # after the barrier on its input: waits for the others
                    return
            elif r[0] == Action.ROLLBACK:
                self.collector.fail(tup)  # sent before its spout rewound: replayed after the rollback
                return
        if self.stateful and not self.initialized:
            self.before_init.append(tup)  # Storm's pendingTuples: wait for the state
            return
        self._call(tup)

    def _call(self, tup: Tuple) -> None:
        runner = self.runner
        if runner is not None:
            if tup.is_tick():
                runner.on_timer()  # time windows and watermarks fire on the ticks
                self.gc_policy.windows_hold(self, runner.held())
            else:
                runner.execute(tup)
            return
        basic = self.basic
        if basic is None:
            self.bolt.execute(tup)
            return
        basic.current = tup
        try:
            self.bolt.process(tup)
        except FailedException:
            basic.fail(tup)
        except Exception as exc:
            basic.report_error(exc)
            basic.fail(tup)
        else:
            basic.ack(tup)
        finally:
            basic.current = None

    def _run(self, tup: Tuple) -> None:
        """A tuple held back, processed now; its failure stays its own."""
        try:
            self.execute(tup)
        except Exception as exc:
            self.collector.report_error(exc)
            self.collector.fail(tup)

    def _drop(self, tuples: list[Tuple]) -> None:
        for t in tuples:
            self.collector.fail(t)

    def _barrier(self, tup: Tuple) -> None:
        txid, action, attempt = int(tup.values[0]), str(tup.values[1]), int(tup.values[2])
        key = (action, txid, attempt)
        src = tup.source_task
        r = self.round
        if action == Action.ROLLBACK:
            if r != key:
                # a new ROLLBACK round: whatever was held or waits belongs to before it
                self._drop(self.held)
                self._drop(self.before_init)
                self.held, self.before_init = [], []
                self.round, self.arrived = key, set()
                if self.stateful:
                    try:
                        self._rollback_state()
                    except Exception as exc:  # the store is down: this attempt fails, the next retries
                        self.collector.report_error(exc)
                        self.round, self.arrived = None, set()
                        self.collector.fail(tup)
                        return
        elif r is not None and r[0] == Action.ROLLBACK:
            if src in self.arrived:
                self.held.append(tup)
            else:
                self.collector.ack(tup)  # sent before the rollback: stale
            return
        elif r is not None and r != key:
            if attempt < r[2]:
                self.collector.ack(tup)  # an attempt given up already
                return
            held, self.held = self.held, []
            self.round, self.arrived = key, set()
            for t in held:
                self._run(t)
        elif r is None:
            self.round, self.arrived = key, set()
        self.arrived.add(src)
        if not self.inputs <= self.arrived:
            self.collector.ack(tup)  # waiting for the barrier from the other inputs
            return
        self.round, self.arrived = None, set()
        held, self.held = self.held, []
        try:
            ok = self._act(Action(action), txid)
        except Exception as exc:
            self.collector.report_error(exc)
            ok = False
        if ok:
            self.collector.emit([txid, action, attempt], stream=CHECKPOINT_STREAM, anchors=tup)
            self.collector.ack(tup)
        else:
            self.collector.fail(tup)  # the checkpoint spout rolls back
        for t in held:
            self._run(t)

    def _rollback_state(self) -> None:
        assert self.state is not None
        if self.has_state and not self.windowed:
            self.bolt.pre_rollback()
        self.state.rollback()
        self._drop(self.prepared_acks)
        self._drop(self.out.take())
        self.prepared_acks = []
        if self.runner is not None:
            assert self.window_state is not None
            self.window_state.rollback()
            # the tuples in the windows now are replayed after the rollback: fail their trees
            self._drop([t for t in self.runner.manager.items if t.anchors])
            if self.initialized:
                self._restore_windows()

    def _restore_windows(self) -> None:
        assert self.runner is not None and self.window_state is not None
        snap = self.window_state.get(WINDOW_STATE_KEY)
        self.runner.manager = WindowManager(self.window_config, self.runner.clock)
        if snap is not None:
            restore_windows(self.runner, snap)

    def _act(self, action: Action, txid: int) -> bool:
        if action is Action.PREPARE:
            if not self.initialized:
                return False  # restarted since the last rollback: fail fast, recover
            if self.stateful:
                assert self.state is not None
                if self.has_state and not self.windowed:
                    self.bolt.pre_prepare(txid)
                self.state.prepare_commit(txid)
                if self.runner is not None:
                    assert self.window_state is not None
                    self.window_state.put(WINDOW_STATE_KEY, snapshot_windows(self.runner))
                    self.window_state.prepare_commit(txid)
                self.prepared_acks.extend(self.out.take())
        elif action is Action.COMMIT:
            if self.stateful:
                assert self.state is not None
                if self.has_state and not self.windowed:
                    self.bolt.pre_commit(txid)
                self.state.commit(txid)
                if self.window_state is not None:
                    self.window_state.commit(txid)
                acks, self.prepared_acks = self.prepared_acks, []
                for t in acks:
                    self.collector.ack(t)
        else:  # ROLLBACK (the state rolled back when the round began) or INITSTATE
            self._init()
        return True

    def _init(self) -> None:
        if self.initialized:
            return
        self.initialized = True
        if self.runner is not None:
            self._restore_windows()
        if self.stateful:
            if self.has_state:
                self.bolt.init_state(self.state)
            waiting, self.before_init = self.before_init, []
            for t in waiting:
                self._run(t)


class SpoutHarness(Spout):
    """Runs a `StatefulSpout`: its state is checkpointed with the bolts' (beyond Storm). It
    receives `$checkpoint` from the checkpoint spout (the worker hands it to `receive`) and
    forwards it in line with its data."""

    inner: ClassVar[type]

    def __init__(self) -> None:
        self.spout = self.inner()
        self.initialized = False
        self.state: KeyValueState | None = None

    def open(self, conf: Mapping[str, Any], context: Any, collector: SpoutOutputCollector,
             state: KeyValueState | None = None) -> None:
        super().open(conf, context, collector)
        self.state = state if state is not None else \
            task_state(open_provider(conf), conf, context)
        self.spout.open(conf, context, collector)

    def next_tuple(self) -> None:
        if self.initialized:
            self.spout.next_tuple()

    def ack(self, msg_id: Any) -> None:
        self.spout.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.spout.fail(msg_id)

    def activate(self) -> None:
        self.spout.activate()

    def deactivate(self) -> None:
        self.spout.deactivate()

    def close(self) -> None:
        self.spout.close()

    def receive(self, tup: Tuple, collector: OutputCollector) -> None:
        """A `$checkpoint` tuple from the checkpoint spout (the spout's one input)."""
        if tup.stream != CHECKPOINT_STREAM:
            collector.fail(tup)
            return
        txid, action, attempt = int(tup.values[0]), Action(str(tup.values[1])), int(tup.values[2])
        state = self.state
        assert state is not None
        try:
            if action is Action.PREPARE:
                if not self.initialized:
                    collector.fail(tup)
                    return
                state.prepare_commit(txid)
            elif action is Action.COMMIT:
                state.commit(txid)
            elif action is Action.ROLLBACK:
                state.rollback()
                self.spout.init_state(state)  # rewind to the committed position
                self.initialized = True
            elif not self.initialized:
                self.spout.init_state(state)
                self.initialized = True
        except Exception as exc:
            collector.report_error(exc)
            collector.fail(tup)
            return
        collector.emit([txid, action.value, attempt], stream=CHECKPOINT_STREAM, anchors=tup)
        collector.ack(tup)


def wrap(cls: type, component: str, plan: TopologyPlan, conf: Mapping[str, Any],
         spout: bool, spec: Any = None) -> tuple[type, dict[str, Any]]:
    """The class the worker runs for `component` of a topology with stateful components, and
    its conf (with the components it receives `$checkpoint` from; for a windowed bolt, its
    window, inputs and the tick that drives its time windows)."""
    conf = {**conf, SOURCES_KEY: list(plan.checkpoint_sources(component))}
    if not spout and issubclass(cls, WindowedBolt) and spec is not None and getattr(spec, "window", None):
        window = spec.window.model_dump(by_alias=True, exclude_none=True)
        conf[WINDOW_KEY] = window
        conf[WINDOW_INPUTS_KEY] = [(i.component, i.stream) for i in spec.inputs]
        config = WindowConfig.from_spec(window)
        if config.event_time or not (config.length.count and config.sliding.count):
            conf[TICK_KEY] = WINDOW_TICK_SECS
    if spout:
        if not issubclass(cls, StatefulSpout):
            return cls, conf
        return type(f"Checkpointed{cls.__name__}", (SpoutHarness,), {"inner": cls}), conf
    return type(f"Checkpointed{cls.__name__}", (BoltHarness,), {"inner": cls}), conf


def is_stateful_class(cls: type) -> bool:
    return issubclass(cls, (StatefulBolt, StatefulSpout, StatefulWindowedBolt))


# -- persistent windows: a WindowManager's contents as plain values and back ------------------
def _tuple_out(t: Tuple) -> list[Any]:
    return [t.values, t.source_task, t.source_component, t.stream, t.fields]


def _tuple_in(v: list[Any]) -> Tuple:
    values, task, component, stream, fields = v
    # restored tuples have no tree (theirs were failed or timed out): emits from them are unanchored
    return Tuple(list(values), int(task), str(component), str(stream), {f: i for i, f in enumerate(fields)}, None)


def snapshot_windows(runner: WindowedBoltExecutor) -> dict[str, Any]:
    """What a windowed bolt's windows hold now, as values a state can store."""
    m = runner.manager
    snap: dict[str, Any] = {
        "ts": list(m.ts),
        "items": [_tuple_out(t) for t in m.items],
        "seen": m._seen,
        "unreported": [_tuple_out(t) for t in m._unreported],
        "since": m._since, "next_fire": m._next_fire, "last_end": m._last_end,
        "next_index": m._next_index, "watermark": m.watermark_ts,
    }
    gen = runner.watermarks
    if gen is not None:
        snap["max_ts"] = [[list(k) if isinstance(k, tuple) else k, v] for k, v in gen.max_ts.items()]
        snap["last"] = gen.last
    return snap


def restore_windows(runner: WindowedBoltExecutor, snap: Mapping[str, Any]) -> None:
    """Puts a snapshot back into `runner`'s (fresh) window manager."""
    m = runner.manager
    m.ts = [float(ts) for ts in snap["ts"]]
    m.items = [_tuple_in(t) for t in snap["items"]]
    m._seen = int(snap["seen"])
    m._unreported = [_tuple_in(t) for t in snap["unreported"]]
    m._since = int(snap["since"])
    m._next_fire = snap["next_fire"]
    m._last_end = snap["last_end"]
    m._next_index = int(snap["next_index"])
    m.watermark_ts = snap["watermark"]
    gen = runner.watermarks
    if gen is not None and "max_ts" in snap:
        gen.max_ts = {tuple(k) if isinstance(k, list) else k: float(v) for k, v in snap["max_ts"]}
        gen.last = snap["last"]


__all__ = [
    "Action",
    "BoltHarness",
    "CheckPointState",
    "CheckpointSpout",
    "Coordinator",
    "SpoutHarness",
    "TxState",
    "is_stateful_class",
    "wrap",
]
