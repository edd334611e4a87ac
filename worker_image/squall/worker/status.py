"""What the worker says about itself: readiness and liveness probes, /metrics figures, the
heartbeat written to ZooKeeper, and the components' errors reported there. Functions of the
worker's state.
"""

from __future__ import annotations

import logging
import threading
import time

from squall.models.cluster import (
    ErrorInfo,
    ExecutorStats,
    WorkerHeartbeat,
    executor_key,
)
from squall.kafka.lag import PartitionOffsets, ReportsOffsets, total_lag
from squall.plan import ACKER
from squall.worker import health, metrics
from squall.worker.spout import SpoutExecutor
from squall.worker.workerstate import WorkerState

log = logging.getLogger("squall.worker")


def probe(w: WorkerState) -> health.Probe:
    zk = w.state.ready
    endpoint: bool | None = None
    zk_error = ""
    if zk and hasattr(w, "endpoint"):
        try:
            endpoint = w.state.owns_endpoint(w.topology_id, w.slot, w.endpoint)
        except Exception as exc:  # ZooKeeper did not answer in time: not ready, say so
            endpoint, zk_error = False, f"{type(exc).__name__} {exc}".strip()
    a = w.assignment
    threads = threads_of(w)
    return health.Probe(
        zk_connected=zk,
        endpoint=endpoint,
        zk_error=zk_error,
        assignment_loaded=a is not None and w.slot in set(a.slots().values()),
        loops=dict(w.loop_turns),
        dead=[t.name for t in threads if t.ident is not None and not t.is_alive()],
    )


def not_ready(w: WorkerState) -> list[str]:
    return health.readiness_problems(probe(w), time.monotonic())


def threads_of(w: WorkerState) -> list[threading.Thread]:
    """The worker's threads: the loop, the transfers, isolated executors' own."""
    return [*w.threads, *(ex.thread for ex in list(w.executors.values()) if ex.thread is not None)]


def not_alive(w: WorkerState) -> list[str]:
    threads = threads_of(w)
    probe = health.Probe(zk_connected=True, endpoint=True, assignment_loaded=True, loops=dict(w.loop_turns),
                         dead=[t.name for t in threads if t.ident is not None and not t.is_alive()])
    return health.liveness_problems(probe, time.monotonic())


def offsets(ex: object) -> dict[int, list[PartitionOffsets]]:
    """The partitions' offsets of a spout executor's tasks that report them (KafkaSpout):
    task -> offsets; a task whose report raises is left out (logged)."""
    if not isinstance(ex, SpoutExecutor):
        return {}
    out: dict[int, list[PartitionOffsets]] = {}
    for task, spout in list(ex.instances.items()):
        if isinstance(spout, ReportsOffsets):
            try:
                out[task] = spout.offset_metrics()
            except Exception:  # noqa: BLE001 - a figure missing, not a worker stopped
                log.exception("%s[%d]: reading its offsets", ex.component, task)
    return out


def lag_of(ex: object) -> int | None:
    """A spout executor's lag over its tasks' partitions (None: none reports one)."""
    lags = [lag for parts in offsets(ex).values() if (lag := total_lag(parts)) is not None]
    return sum(lags) if lags else None


def figures(w: WorkerState) -> metrics.WorkerFigures:
    bp = w.bp_secs
    execs = [
        metrics.ExecutorFigures(
            component=ex.component, tasks=ex.id, kind=ex.kind, stats=ex.stats,
            inbox_batches=ex.inbox.qsize(),
            pending=ex.pending_count() if isinstance(ex, SpoutExecutor) else 0,
            backpressure_secs=sum(bp.get(t, 0.0) for t in ex.tasks),
            offsets=offsets(ex),
        )
        for ex in list(w.executors.values())
    ]
    send: dict[str, int] = {}
    for peers in (w.data_peers, w.control_peers):
        for slot, q in list(peers.queues.items()):
            send[slot.key()] = send.get(slot.key(), 0) + len(q)
    # frames held for a slow peer, by the loop's sockets and isolated executors' own
    senders = {id(d): d for ex in list(w.executors.values()) if (d := ex.direct_data) is not None}
    for direct in senders.values():
        for slot, n in direct.held().items():
            send[slot.key()] = send.get(slot.key(), 0) + n
    return metrics.WorkerFigures(
        topology=w.topology_id, worker=w.slot.key(), executors=execs, send_queue_batches=send,
        bad_frames=w.bad_frames, refused=refused(w), dropped=w.dropped, unsendable=w.unsendable,
        peer_reconnects=w.peer_reconnects, zk_reconnects=w.zk_reconnects,
        zk_sessions_expired=w.zk_sessions_expired, errors_not_logged=w.error_throttle.suppressed_total,
        user=[c.user_metrics for ex in list(w.executors.values()) for c in list(ex.contexts.values())
              if c.user_metrics is not None],
    )


def report_error(w: WorkerState, component: str, task: int, text: str) -> None:
    w.errors.append((component, task, text))


def heartbeat(w: WorkerState) -> WorkerHeartbeat:
    execs: dict[str, ExecutorStats] = {}
    for e, ex in list(w.executors.items()):
        s = ex.stats
        hist = dict(s.hist)
        from squall.stats import percentile

        execs[executor_key(e)] = ExecutorStats(
            component=ex.component,
            emitted=s.emitted,
            transferred=s.transferred,
            executed=s.executed,
            acked=s.acked,
            failed=s.failed,
            dropped=s.dropped,
            latency_ms_mean=(s.lat_sum / s.lat_n) if s.lat_n else 0.0,
            latency_ms_p50=percentile(hist, 0.5),
            latency_ms_p99=percentile(hist, 0.99),
            latency_samples=s.lat_n,
            latency_hist=hist,
            pending=ex.pending_count() if isinstance(ex, SpoutExecutor) else 0,
            backpressure_secs=max((w.bp_secs.get(t, 0.0) for t in ex.tasks), default=0.0),
            lag=lag_of(ex),
        )
    for e in w.acker_executors:
        execs[executor_key(e)] = ExecutorStats(component=ACKER)
    now = time.time()
    return WorkerHeartbeat(time_secs=now, uptime_secs=now - w.started, executors=execs, bad_frames=w.bad_frames,
                           refused=refused(w))


def refused(w: WorkerState) -> int:
    return w.refused_signals + (w.sealer.refused if w.sealer is not None else 0)


def flush_errors(w: WorkerState) -> None:
    latest: dict[str, tuple[int, str]] = {}
    while w.errors:
        comp, task, text = w.errors.popleft()
        latest[comp] = (task, text)
    for comp, (task, text) in latest.items():
        try:
            w.state.report_error(
                w.topology_id,
                comp,
                ErrorInfo(component=comp, task=task, time_secs=time.time(), error=text[-4000:], host=w.host, port=w.slot.port),
            )
        except Exception:
            log.exception("could not report an error to ZooKeeper")
