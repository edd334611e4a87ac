"""The static plan of a running topology: tasks, executors, streams, subscriptions.

Storm computes this twice, in nimbus (to schedule) and in every worker (to route), from the same
inputs, so it must be a pure function of the spec. The plan is the real topology, larger than the
user's: the `__acker` bolt and its streams are added here (Storm's system-topology!).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from squall.models.cluster import ExecutorId
from squall.models.v1alpha1 import Grouping, StreamSpec, Topology

ACKER = "__acker"
SYSTEM = "__system"
ACK_INIT_STREAM = "__ack_init"
ACK_ACK_STREAM = "__ack_ack"
ACK_FAIL_STREAM = "__ack_fail"
TICK_STREAM = "__tick"
# Storm's stateful processing (squall.checkpoint): with a stateful component in the topology the
# plan adds the checkpoint spout (one task) and wires its stream through the graph. Storm's own
# names: no user component or stream can take them (`$` is outside the name patterns).
CHECKPOINT_COMPONENT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = ("txid", "action", "attempt")
# __system's tasks are not scheduled executors; the tick source uses this task id, like Storm's -1
SYSTEM_TASK = -1


@dataclasses.dataclass(frozen=True)
class Subscription:
    """One consumer of a (component, stream)."""

    component: str
    grouping: Grouping
    fields: tuple[str, ...] | None
    custom_class: str | None
    tasks: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class TopologyPlan:
    topology_id: str
    component_tasks: Mapping[str, tuple[int, ...]]
    task_component: Mapping[int, str]
    component_executors: Mapping[str, tuple[ExecutorId, ...]]
    # component -> stream -> declared fields
    streams: Mapping[str, Mapping[str, StreamSpec]]
    # (component, stream) -> subscribers
    subscriptions: Mapping[tuple[str, str], tuple[Subscription, ...]]
    spouts: frozenset[str]
    acker_tasks: tuple[int, ...]

    @property
    def executors(self) -> tuple[ExecutorId, ...]:
        return tuple(sorted(e for es in self.component_executors.values() for e in es))

    def executor_component(self, executor: ExecutorId) -> str:
        return self.task_component[executor[0]]

    @property
    def checkpointing(self) -> bool:
        return CHECKPOINT_COMPONENT in self.component_tasks

    def checkpoint_sources(self, component: str) -> tuple[str, ...]:
        """The components whose `$checkpoint` stream `component` receives (sorted)."""
        return tuple(sorted(
            src for (src, stream), subs in self.subscriptions.items()
            if stream == CHECKPOINT_STREAM and any(s.component == component for s in subs)
        ))

    def fields_index(self, component: str, stream: str) -> dict[str, int]:
        spec = self.streams.get(component, {}).get(stream)
        return {f: i for i, f in enumerate(spec.fields)} if spec else {}


def executor_ranges(tasks: Sequence[int], executors: int) -> tuple[ExecutorId, ...]:
    """Split a component's contiguous task ids into `executors` contiguous ranges, sizes differing
    by at most one and larger ranges first (as Storm's scheduler: 10 tasks, 5 executors -> (1,2)...(9,10))."""
    if not tasks:
        return ()
    executors = max(1, min(executors, len(tasks)))
    base, extra = divmod(len(tasks), executors)
    out: list[ExecutorId] = []
    i = 0
    for n in range(executors):
        size = base + (1 if n < extra else 0)
        out.append((tasks[i], tasks[i + size - 1]))
        i += size
    return tuple(out)


def build_plan(
    topology: Topology,
    streams: Mapping[str, Mapping[str, StreamSpec]],
    executors: Mapping[str, int] | None = None,
) -> TopologyPlan:
    """The plan of `topology`.

    `streams` are the user components' declared output streams (spec merged with class
    declarations, see `squall.validation.declared_streams`). `executors` overrides the executor
    count per component (a rebalance); existing tasks never change for the topology's life.

    One exception adds tasks: with `numAckers` unset (one acker per worker, Storm's default),
    nimbus sets the acker's executor count to the worker count on a rebalance; beyond the
    submitted count, each further acker executor gets a task of its own, numbered after every
    other task so that no existing task id changes (a rebalance back drops them again).
    """
    spec = topology.spec
    task_counts: dict[str, int] = {c.name: c.tasks for c in spec.components}
    executor_counts: dict[str, int] = {c.name: c.parallelism for c in spec.components}
    if spec.ackers > 0:
        task_counts[ACKER] = spec.ackers
        executor_counts[ACKER] = spec.ackers
    stateful = any(c.stateful for c in spec.components)
    if stateful:
        task_counts[CHECKPOINT_COMPONENT] = 1
        executor_counts[CHECKPOINT_COMPONENT] = 1
    for name, count in (executors or {}).items():
        if name in executor_counts:
            executor_counts[name] = count
    extra_ackers = 0
    if spec.num_ackers is None and spec.ackers > 0 and executor_counts[ACKER] > spec.ackers:
        extra_ackers = executor_counts[ACKER] - spec.ackers

    component_tasks: dict[str, tuple[int, ...]] = {}
    next_task = 1
    for name in sorted(task_counts):
        n = task_counts[name]
        component_tasks[name] = tuple(range(next_task, next_task + n))
        next_task += n
    if extra_ackers:
        component_tasks[ACKER] += tuple(range(next_task, next_task + extra_ackers))
    task_component = {t: c for c, ts in component_tasks.items() for t in ts}
    component_executors = {
        c: executor_ranges(component_tasks[c], executor_counts[c]) for c in component_tasks
    }
    if extra_ackers:
        # the acker's tasks are two blocks now: one executor per task keeps every range whole
        component_executors[ACKER] = tuple((t, t) for t in component_tasks[ACKER])

    all_streams: dict[str, dict[str, StreamSpec]] = {c: dict(s) for c, s in streams.items()}
    subs: dict[tuple[str, str], list[Subscription]] = {}
    for bolt in spec.bolts:
        for inp in bolt.inputs:
            subs.setdefault((inp.component, inp.stream), []).append(
                Subscription(
                    component=bolt.name,
                    grouping=inp.grouping,
                    fields=tuple(inp.fields) if inp.fields is not None else None,
                    custom_class=inp.custom_class,
                    tasks=component_tasks[bolt.name],
                )
            )
    spouts = frozenset(s.name for s in spec.spouts)
    if stateful:
        spouts |= {CHECKPOINT_COMPONENT}
        _wire_checkpoints(topology, component_tasks, all_streams, subs)
    if spec.ackers > 0:
        acker_tasks = component_tasks[ACKER]
        # The implicit system topology: every component can talk to the ackers, ackers answer
        # spouts directly. The runtime routes these streams on a fast path; they are declared
        # here so that introspection and routing agree.
        for name in task_counts:
            if name == ACKER:
                continue
            all_streams.setdefault(name, {})
            for s in (ACK_INIT_STREAM, ACK_ACK_STREAM, ACK_FAIL_STREAM):
                all_streams[name][s] = StreamSpec(stream=s, fields=["id", "ack-val"])
                subs.setdefault((name, s), []).append(
                    Subscription(ACKER, Grouping.FIELDS, ("id",), None, acker_tasks)
                )
        all_streams[ACKER] = {
            s: StreamSpec(stream=s, fields=["id"], direct=True)
            for s in (ACK_ACK_STREAM, ACK_FAIL_STREAM)
        }
        for spout in sorted(spouts):  # not the frozenset's order: it follows the hash seed
            for s in (ACK_ACK_STREAM, ACK_FAIL_STREAM):
                subs.setdefault((ACKER, s), []).append(
                    Subscription(spout, Grouping.DIRECT, None, None, component_tasks[spout])
                )
    else:
        acker_tasks = ()
    all_streams[SYSTEM] = {TICK_STREAM: StreamSpec(stream=TICK_STREAM, fields=["rate_secs"])}
    return TopologyPlan(
        topology_id=topology.name,
        component_tasks=component_tasks,
        task_component=task_component,
        component_executors=component_executors,
        streams=all_streams,
        subscriptions={k: tuple(v) for k, v in subs.items()},
        spouts=spouts,
        acker_tasks=acker_tasks,
    )


def _wire_checkpoints(
    topology: Topology,
    component_tasks: Mapping[str, tuple[int, ...]],
    streams: dict[str, dict[str, StreamSpec]],
    subs: dict[tuple[str, str], list[Subscription]],
) -> None:
    """Storm's TopologyBuilder with a stateful bolt: every bolt receives `$checkpoint` (all
    grouping) from each component it reads, a spout standing in for the checkpoint spout, and
    forwards it on (CheckpointTupleForwarder). Beyond Storm, a stateful spout receives it from
    the checkpoint spout and forwards it in line with its data, so bolts downstream of it see
    the barrier in order with the tuples it emitted."""
    spec = topology.spec
    cp = StreamSpec.model_construct(stream=CHECKPOINT_STREAM, fields=list(CHECKPOINT_FIELDS), direct=False)
    stateful_spouts = {s.name for s in spec.spouts if s.stateful}

    def subscribe(source: str, consumer: str) -> None:
        subs.setdefault((source, CHECKPOINT_STREAM), []).append(
            Subscription(consumer, Grouping.ALL, None, None, component_tasks[consumer]))

    streams[CHECKPOINT_COMPONENT] = {CHECKPOINT_STREAM: cp}
    for spout in sorted(stateful_spouts):
        streams.setdefault(spout, {})[CHECKPOINT_STREAM] = cp
        subscribe(CHECKPOINT_COMPONENT, spout)
    for bolt in spec.bolts:
        streams.setdefault(bolt.name, {})[CHECKPOINT_STREAM] = cp
        sources: set[str] = set()
        for inp in bolt.inputs:
            if inp.component in component_tasks and inp.component != bolt.name:
                is_plain_spout = any(s.name == inp.component for s in spec.spouts) and inp.component not in stateful_spouts
                sources.add(CHECKPOINT_COMPONENT if is_plain_spout else inp.component)
        for source in sorted(sources):
            subscribe(source, bolt.name)
