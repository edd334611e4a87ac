"""Storm's component contract in Python: what users subclass to write spouts and bolts.

Names follow Storm's ISpout / IBolt / IBasicBolt in snake_case. The worker runtime supplies the
collectors and the context; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

# the input tuple lives in a module of its own, compiled with the hot path (see squall.tuples)
from squall.tuples import TICK_STREAM as TICK_STREAM, Tuple as Tuple

if TYPE_CHECKING:
    from squall import usermetrics

DEFAULT_STREAM = "default"
SYSTEM_COMPONENT = "__system"


class TopologyContext(Protocol):
    """What a task knows about its place in the topology (Storm's TopologyContext)."""

    topology_id: str
    task_id: int
    component_id: str
    worker_port: int

    def component_tasks(self, component: str) -> list[int]: ...
    def task_component(self, task: int) -> str: ...
    def this_component_tasks(self) -> list[int]: ...
    def output_fields(self, stream: str = "default") -> list[str]: ...
    # Storm's getTaskToComponent and getThisStreams
    def task_to_component(self) -> dict[int, str]: ...
    def this_streams(self) -> list[str]: ...

    # Storm's metrics v2 (registerCounter, registerGauge, ...; squall.usermetrics): the task's
    # own metrics, served on its worker's /metrics labelled topology, component, task and name
    def register_counter(self, name: str) -> usermetrics.Counter: ...
    def register_gauge(self, name: str, fn: Callable[[], float]) -> usermetrics.Gauge: ...
    def register_histogram(self, name: str, buckets: Sequence[float] = ...) -> usermetrics.Histogram: ...
    def register_meter(self, name: str) -> usermetrics.Meter: ...
    def register_timer(self, name: str, buckets: Sequence[float] = ...) -> usermetrics.Timer: ...


class SpoutOutputCollector(Protocol):
    def emit(
        self, values: Sequence[Any], stream: str = DEFAULT_STREAM, msg_id: Any = None
    ) -> list[int]: ...
    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM, msg_id: Any = None
    ) -> None: ...
    def report_error(self, exc: BaseException) -> None: ...


class OutputCollector(Protocol):
    def emit(
        self,
        values: Sequence[Any],
        stream: str = DEFAULT_STREAM,
        anchors: Sequence[Tuple] | Tuple | None = None,
    ) -> list[int]: ...
    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        stream: str = DEFAULT_STREAM,
        anchors: Sequence[Tuple] | Tuple | None = None,
    ) -> None: ...
    def ack(self, tup: Tuple) -> None: ...
    def fail(self, tup: Tuple) -> None: ...
    def report_error(self, exc: BaseException) -> None: ...


class Component:
    """Shared by spouts and bolts. `outputs` declares output streams: a list of field names for
    the default stream, or a dict stream -> fields. A topology file's `outputs` overrides it."""

    outputs: ClassVar[Sequence[str] | Mapping[str, Sequence[str]] | None] = None


class Spout(Component):
    """Storm's ISpout. `next_tuple` should emit at most a few tuples and return quickly; it is
    not called while the spout is inactive or `maxSpoutPending` tuples are un-acked."""

    def open(self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def next_tuple(self) -> None:
        raise NotImplementedError

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of `msg_id` completed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of `msg_id` failed or timed out; replaying is the spout's choice."""

    def activate(self) -> None: ...
    def deactivate(self) -> None: ...
    def close(self) -> None: ...


class Bolt(Component):
    """Storm's IRichBolt: the bolt anchors and acks itself through `self.collector`."""

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        raise NotImplementedError

    def cleanup(self) -> None: ...


class BasicBolt(Bolt):
    """Storm's IBasicBolt: every emit in `process` is anchored to the input, the input is acked
    when `process` returns and failed when it raises."""

    def process(self, tup: Tuple) -> None:
        raise NotImplementedError

    # The runtime recognises BasicBolt and calls `process` with anchoring done for it.
    def execute(self, tup: Tuple) -> None:  # pragma: no cover - replaced by the runtime
        self.process(tup)


class FailedException(Exception):
    """Raised from BasicBolt.process to fail the input without reporting an error."""


# -- windowed bolts (squall.windowing) ---------------------------------------------------------
class WindowedBolt(Component):
    """Storm's IWindowedBolt / BaseWindowedBolt: `execute` receives a window of tuples.

    The windows (length, sliding interval, event time) are declared in the topology (a bolt's
    `window` block, or `TopologyBuilder.set_bolt(...).with_window(...)`); see `squall.windowing`.
    The window acks each tuple when it leaves its last window; `self.collector.emit` anchors to
    the window's tuples unless given other anchors."""

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def execute(self, window: Any) -> None:
        """`window`: a `squall.windowing.Window` (get, get_new, get_expired, timestamps)."""
        raise NotImplementedError

    def cleanup(self) -> None: ...


# -- stateful components (Storm's IStatefulBolt; squall.checkpoint runs their protocol) ----------
class StatefulBolt(Bolt):
    """Storm's IStatefulBolt / BaseStatefulBolt: a bolt whose `KeyValueState` the framework
    checkpoints. `init_state(state)` is called once, after `prepare` and before the first tuple,
    with the state of the last commit (`squall.statebackend.KeyValueState`); the bolt updates it
    in `execute`. Tuples it acks are acked only once the checkpoint that holds their effects
    committed; a rollback fails them (the spout replays). Declare the component
    `stateful: true` (the builder does it for you)."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def pre_prepare(self, txid: int) -> None:
        """Storm's prePrepare: called before the state is prepared for `txid`."""

    def pre_commit(self, txid: int) -> None:
        """Storm's preCommit: called before the state commits `txid`."""

    def pre_rollback(self) -> None:
        """Storm's preRollback: called before the state rolls back to the last commit."""


class StatefulSpout(Spout):
    """Beyond Storm: a spout whose state (say, its read offset) is checkpointed together with
    the stateful bolts', so that after a crash the source and every stateful bolt roll back to
    the same checkpoint and the replay updates state exactly once.

    `init_state(state)` is called before the first `next_tuple`, and again after every
    rollback with the state of the last commit: read your position from it there and emit
    from it. Keep the position in the state as you emit (`state.put("offset", n)`). Replays
    come from the rollback, so `fail` should not re-emit. Declare it `stateful: true`."""

    def init_state(self, state: Any) -> None:
        self.state = state


class StatefulWindowedBolt(WindowedBolt):
    """Storm's IStatefulWindowedBolt / BaseStatefulWindowedBolt: a windowed bolt with a
    `KeyValueState` of its own (`init_state(state)`, as a StatefulBolt). In a topology with
    stateful components every windowed bolt's window contents are checkpointed too, so they
    survive a crash (Storm's persistent windowing). Declare it `stateful: true`."""

    def init_state(self, state: Any) -> None:
        self.state = state
