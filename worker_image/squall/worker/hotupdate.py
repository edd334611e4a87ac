"""Hot update: a new assignment applied without stopping (as JStorm's hot rebalance): new executors built and
handed to the loop, removed ones retired while they finish what they hold, in-flight trees
handed to their acker's new home, one new routing published. And a new stored spec of the same
graph (JStorm's update_topology; `squall update`, a `kubectl patch`) applied as
`squall.specchange` classifies it: the engine's settings set on the running executors, the
executors of components whose config changed restarted in place. Functions of the worker's state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from squall import specchange, wire
from squall.acker import AckerLedger, Rotator
from squall.models.cluster import (
    Assignment,
    StormBase,
    WorkerSlot,
)
from squall.models.v1alpha1 import ComponentSpec, Topology
from squall.plan import ACKER, CHECKPOINT_COMPONENT, build_plan
from squall.topology_keys import KEY_CONF
from squall.worker import acking
from squall.worker.bolt import BoltExecutor
from squall.worker.executor import Executor, is_isolated
from squall.worker.host import WorkerHost
from squall.worker.routing import Inbox, Routing
from squall.worker.spout import SpoutExecutor
from squall.worker.workerstate import WorkerState

log = logging.getLogger("squall.worker")


def apply_assignment(w: WorkerState, host: WorkerHost, assignment: Assignment) -> None:
    """Hot update: start executors newly assigned here, retire removed ones, keep the rest.

    Runs on the main thread and never waits for an executor: new executors are built
    against the new plan (no routing is published before they exist), one new routing is
    published, and removed executors retire in their own threads (`_reap` collects them)."""
    plan = build_plan(w.topology, w.streams, w.base.component_executors)
    slots = assignment.slots()
    mine = {e for e, s in slots.items() if s == w.slot}
    task_slot: dict[int, WorkerSlot] = {}
    for e, s in slots.items():
        for t in range(e[0], e[1] + 1):
            task_slot[t] = s
    local_tasks = frozenset(t for t, s in task_slot.items() if s == w.slot)
    now = time.monotonic()
    with w.acker_lock:
        for t in plan.acker_tasks:
            if t in local_tasks and t not in w.ledgers:
                w.ledgers[t] = AckerLedger(float(w.spec.message_timeout_secs), now)
        handover = rehome_trees(w, plan.acker_tasks, local_tasks)
    retire_by = now + float(w.spec.message_timeout_secs) + 5.0
    for e in [e for e in w.executors if e not in mine]:
        gone = w.executors.pop(e)
        gone.retire(retire_by)
        w.retiring.append(gone)
        log.info("executor %s of %s leaves %s; it finishes what it holds", e, gone.component, w.slot.key())
    new_execs: list[Executor] = []
    for e in sorted(mine):
        if e in w.executors:
            continue
        comp = plan.task_component[e[0]]
        if comp == ACKER:
            continue
        if comp == CHECKPOINT_COMPONENT:
            from squall.checkpoint import CheckpointSpout

            ex: Executor = SpoutExecutor(host, plan, e, comp, CheckpointSpout, dict(w.conf))
            ex.isolated = is_isolated(CheckpointSpout, w.conf)
            w.executors[e] = ex
            new_execs.append(ex)
            continue
        spec = next(c for c in w.spec.components if c.name == comp)
        conf = {**w.conf, **spec.config}
        cls = w.classes[comp]
        if plan.checkpointing:
            from squall.checkpoint import wrap

            cls, conf = wrap(cls, comp, plan, conf, spout=comp in plan.spouts, spec=spec)
        if comp in plan.spouts:
            ex = SpoutExecutor(host, plan, e, comp, cls, conf)
        else:
            ex = BoltExecutor(host, plan, e, comp, cls, conf, bolt_tick(w, spec, conf))
        ex.isolated = is_isolated(w.classes[comp], conf)
        w.executors[e] = ex
        new_execs.append(ex)
    for ex in new_execs:
        ex.loads = w.loads
    w.acker_executors = [e for e in sorted(mine) if plan.task_component[e[0]] == ACKER]
    task_dest: dict[int, Any] = dict(task_slot)
    spout_inbox: dict[int, Inbox] = {}
    tree_done: dict[int, Inbox] = {}
    inbox_tasks: dict[Inbox, tuple[int, ...]] = {}
    for ex in w.executors.values():
        inbox_tasks[ex.inbox] = tuple(ex.tasks)
        done_q = ex.tree_done if isinstance(ex, BoltExecutor) and ex.windowed else None
        for t in ex.tasks:
            task_dest[t] = ex.inbox
            if ex.kind == "spout":
                spout_inbox[t] = ex.inbox
            elif done_q is not None:
                tree_done[t] = done_q
    for t in w.ledgers:
        task_dest.pop(t, None)
    w.assignment = assignment
    w.routing = Routing(
        plan, local_tasks, task_dest, task_slot, spout_inbox, inbox_tasks, frozenset(slots.values()), tree_done
    )
    index_retiring_spouts(w)
    if handover:
        # in-flight trees go to their acker's new home (a local ledger, or a peer)
        acking.handle_control(w, handover, None)
    assert w.engine is not None
    for ex in new_execs:
        w.engine.add(ex)
    log.info(
        "worker %s: %d executors (%d new, %d retiring), %d ackers",
        w.slot.key(), len(w.executors), len(new_execs), len(w.retiring), len(w.ledgers),
    )


def bolt_tick(w: WorkerState, spec: ComponentSpec, conf: Mapping[str, Any]) -> float | None:
    """A bolt's tick period: its own config's, else the topology's tickTupleFreqSecs."""
    tick = spec.config.get(specchange.TICK_KEY, w.spec.tick_tuple_freq_secs)
    # a windowed bolt in a checkpointed topology fires its time windows on ticks
    tick = conf.get("squall.checkpoint.tick.secs", tick)
    return float(tick) if tick else None


def topology_conf(topology: Topology, launch_time_secs: float,
                  state_tasks: Mapping[str, list[int]] | None = None, key: str | None = None) -> dict[str, Any]:
    """The topology's config as every component gets it (before its own config); `key` is its
    key in ZooKeeper (squall.topology_keys; None: its name), what its state and its Kafka
    clients are named by (`squall.topology.key`)."""
    spec = topology.spec
    legacy = {} if state_tasks is None else {"squall.state.legacy.tasks": dict(state_tasks)}
    return {
        "topology.name": topology.name,
        "topology.workers": spec.num_workers,
        "topology.message.timeout.secs": spec.message_timeout_secs,
        "topology.max.spout.pending": spec.max_spout_pending,
        "topology.tick.tuple.freq.secs": spec.tick_tuple_freq_secs,
        # when this deployment was submitted: tells a resubmission under the same name apart
        # (the Kafka spout's EARLIEST/LATEST apply once per deployment, as Storm's)
        "topology.launch.time.secs": launch_time_secs,
        **legacy,
        **spec.config,
        KEY_CONF: key or topology.name,
    }


def _retime(rotator: Rotator, buckets: int, timeout: float, now: float) -> None:
    """A new message timeout for a rotating book: what is pending times out by the new
    period from now on (sooner if the timeout shrank)."""
    rotator.period = timeout / (buckets - 1)
    rotator.next_at = min(rotator.next_at, now + rotator.period)


def apply_spec(w: WorkerState, host: WorkerHost, base: StormBase) -> specchange.SpecChange:
    """A new stored topology of the same graph: the engine's settings (maxSpoutPending, the
    message timeout, ticks) set on the running executors and ackers at once, and the executors
    of the components whose config changed restarted in place: each old one retires as in a
    rebalance (a bolt finishes what it was handed, a spout its pending trees: nothing is lost)
    while a new one, opened with the new config, takes its tasks. A change that needs an
    upgrade is not applied here (nimbus stores none; this is the worker's own guard)."""
    new = Topology.model_validate(base.topology)
    change = specchange.classify(w.spec, new.spec)
    w.base = w.base.model_copy(update={"topology": base.topology})
    if not change.applies_in_place:
        if change.kind is not specchange.Kind.NONE:
            log.warning("worker %s: the stored topology changed in a way a running worker cannot take (%s); "
                        "it keeps the one it runs", w.slot.key(), change.describe())
        return change
    w.topology, w.spec = new, new.spec
    w.conf = topology_conf(new, w.base.launch_time_secs, w.base.state_tasks, w.topology_id)
    now = time.monotonic()
    timeout = float(w.spec.message_timeout_secs)
    with w.acker_lock:
        for led in w.ledgers.values():
            _retime(led.rotator, len(led.pending._buckets), timeout, now)
    specs = {c.name: c for c in w.spec.components}
    for ex in w.executors.values():
        if isinstance(ex, SpoutExecutor):
            ex.max_pending = w.spec.max_spout_pending
            for c in ex.collectors.values():
                _retime(c.pending.rotator, len(c.pending.pending._buckets), timeout, now)
        elif isinstance(ex, BoltExecutor) and ex.component in specs:
            tick = bolt_tick(w, specs[ex.component], ex.conf)
            if tick != ex.tick_secs:
                ex.tick_secs = tick
                ex.next_tick = now + tick if tick else None
    restart = change.restarted
    if restart and w.assignment is not None:
        retire_by = now + timeout + 5.0
        for e in [e for e, ex in w.executors.items() if ex.component in restart]:
            old = w.executors.pop(e)
            old.retire(retire_by)
            w.retiring.append(old)
        # the same assignment: every executor missing from it now is built with the new config
        apply_assignment(w, host, w.assignment)
    if w.engine is not None:
        w.engine.ring()
    log.info("worker %s: spec change applied: %s", w.slot.key(), change.describe())
    return change


def rehome_trees(w: WorkerState, acker_tasks: tuple[int, ...], local_tasks: frozenset[int]) -> list[list[int]]:
    """Hand the trees of acker tasks that leave this worker, and of every tree whose acker
    changes with the acker count (`root % numAckers`), to their new acker as acker messages
    (an init with the tree's XOR and spout task, or an ack for trees only acks have reached
    yet; a fail if one failed). XOR is order-free, so they merge with whatever the new acker
    already got. Drops the ledgers of tasks that left. Called with `acker_lock` held."""
    n = len(acker_tasks)
    count_changed = tuple(w.routing.plan.acker_tasks) != tuple(acker_tasks)
    out: list[list[int]] = []
    for t in list(w.ledgers):
        gone = t not in local_tasks
        if not gone and not count_changed:
            continue
        led = w.ledgers[t]
        for bucket in led.pending._buckets:
            for root, (xor, spout, failed) in list(bucket.items()):
                dest = acker_tasks[root % n] if n else None
                if dest == t and not gone:
                    continue
                del bucket[root]
                led.pending.size -= 1
                if dest is None:
                    continue
                if spout >= 0:
                    out.append([wire.INIT, dest, root, xor, spout])
                elif xor:
                    out.append([wire.ACK, dest, root, xor, 0])
                if failed:
                    out.append([wire.FAIL, dest, root, 0, 0])
        if gone:
            del w.ledgers[t]
    return out


def index_retiring_spouts(w: WorkerState) -> None:
    w.retiring_spouts = {t: ex for ex in w.retiring if ex.kind == "spout" for t in ex.tasks}


def reap(w: WorkerState, now: float) -> None:
    """Collect retired executors that finished; tell the others once every reader of the
    routing (executors, the receive thread) has moved to the current one, after which no
    one can hand them anything new; stop those past their deadline. Never waits."""
    routing = w.routing
    live = list(w.executors.values())
    caught_up = w.recv_routing is routing and all(
        ex.routing is routing or ex.routing is None for ex in live + w.retiring
    )
    changed = False
    for ex in list(w.retiring):
        if caught_up:
            ex.settled = True
        if ex.done:
            w.retiring.remove(ex)
            changed = True
            log.info("executor %s of %s retired from %s", ex.id, ex.component, w.slot.key())
        elif now > ex.retire_by and not ex.stop_event.is_set():
            log.warning("executor %s of %s did not finish in time; stopping it", ex.id, ex.component)
            ex.stop()
    if changed:
        index_retiring_spouts(w)
