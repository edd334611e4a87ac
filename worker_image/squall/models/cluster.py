"""Cluster-state payloads stored in ZooKeeper (see docs/design.md for the node layout).

Pure data: nimbus builds them, the state layer (`squall.state`) stores them as versioned JSON,
workers read them. Every payload carries `v`; a reader refuses a version it does not know rather
than misreading it.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

PAYLOAD_VERSION = 1
# the "component" under which a worker reports that it cannot load the topology's classes (a
# module missing from its image): the operator shows it on the Topology
LOAD_ERROR_COMPONENT = "__load"


class WorkerSlot(NamedTuple):
    """A slot a node offers: one worker process (locally) or one worker pod (on Kubernetes).

    A NamedTuple rather than a dataclass: it keys the per-destination buffers on the tuple hot
    path, and a tuple's hash is computed in C."""

    node: str
    port: int

    def key(self) -> str:
        return f"{self.node}-{self.port}"

    @classmethod
    def from_key(cls, key: str) -> WorkerSlot:
        node, _, port = key.rpartition("-")
        return cls(node, int(port))


ExecutorId = tuple[int, int]


def executor_key(executor: ExecutorId) -> str:
    return f"{executor[0]}-{executor[1]}"


def parse_executor_key(key: str) -> ExecutorId:
    start, _, end = key.partition("-")
    return (int(start), int(end))


class TopologyStatus(str, enum.Enum):
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    REBALANCING = "REBALANCING"
    KILLED = "KILLED"


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = PAYLOAD_VERSION


class StormBase(_Payload):
    """What nimbus knows about a running topology (Storm's StormBase)."""

    name: str
    status: TopologyStatus
    launch_time_secs: float
    num_workers: int
    # component name -> number of executors (changes on rebalance)
    component_executors: dict[str, int]
    # the whole Topology resource as submitted (by alias), so workers need nothing else
    topology: dict[str, Any]
    # status to restore after a rebalance
    prev_status: TopologyStatus | None = None
    # when a delayed action (kill's remove, rebalance's do-rebalance) is due, wall-clock seconds;
    # stored so that a restarted nimbus resumes the countdown
    delayed_action: str | None = None
    delayed_due_secs: float | None = None
    # rebalance targets while REBALANCING
    rebalance_num_workers: int | None = None
    rebalance_executors: dict[str, int] | None = None
    # a graph upgrade in progress (squall_operator.upgrade): the topology to launch once the
    # spouts have drained, and when they were deactivated (wall-clock seconds); the workers run
    # `topology` until then
    upgrade_topology: dict[str, Any] | None = None
    upgrade_since_secs: float | None = None
    # after a graph upgrade of a stateful topology: each component's task ids in the launch
    # before it, where a state an older Squall kept under `<component>-<task>` is found
    # (squall.checkpoint.task_state; the workers get it as conf squall.state.legacy.tasks)
    state_tasks: dict[str, list[int]] | None = None


class Assignment(_Payload):
    """Executor placement (Storm's Assignment): executor key "start-end" -> slot key "node-port"."""

    executor_slots: dict[str, str] = Field(default_factory=dict)
    # node -> host other workers connect to when no endpoint is registered
    node_host: dict[str, str] = Field(default_factory=dict)
    # executor key -> when it was (re)assigned, wall-clock seconds
    executor_start_time_secs: dict[str, float] = Field(default_factory=dict)

    def slots(self) -> dict[ExecutorId, WorkerSlot]:
        return {
            parse_executor_key(e): WorkerSlot.from_key(s) for e, s in self.executor_slots.items()
        }

    def executors_of(self, slot: WorkerSlot) -> list[ExecutorId]:
        key = slot.key()
        return sorted(parse_executor_key(e) for e, s in self.executor_slots.items() if s == key)


class ExecutorStats(_Payload):
    """Counters one executor reports in each heartbeat (cumulative since the executor started)."""

    component: str
    emitted: int = 0
    transferred: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    # complete latency (spouts) or execute latency (bolts), milliseconds
    latency_ms_mean: float = 0.0
    latency_ms_p50: float = 0.0
    latency_ms_p99: float = 0.0
    latency_samples: int = 0
    # cumulative latency histogram: squall.stats bucket -> count
    latency_hist: dict[int, int] = Field(default_factory=dict)
    # tuples dropped (no route, undeliverable); the spouts replay them after the timeout
    dropped: int = 0
    # spouts: messages emitted and not yet acked or failed
    pending: int = 0
    # seconds its tasks' inboxes were full and backpressure announced (the autoscaler's
    # `backpressure` signal; /metrics' squall_backpressure_seconds_total)
    backpressure_secs: float = 0.0
    # spouts that report one (KafkaSpout): records in their partitions not yet processed for
    # good, the end offsets less the committed ones (Storm's totalSpoutLag), over the executor's
    # tasks; None: no figure (the autoscaler's `lag` signal; /metrics' squall_kafka_spout_lag)
    lag: int | None = None


class WorkerHeartbeat(_Payload):
    time_secs: float
    uptime_secs: float
    # executor key -> stats
    executors: dict[str, ExecutorStats] = Field(default_factory=dict)
    # frames received on the data and control ports that were dropped as malformed
    bad_frames: int = 0
    # peers refused: handshakes without the topology's CURVE key (squall.worker.security), and
    # backpressure signals from a host running none of the assignment's workers
    refused: int = 0


class Endpoint(_Payload):
    """Where a worker listens: data tuples on `port` (the slot port), acker traffic on
    `control_port`, so acks keep flowing while data is backpressured."""

    host: str
    port: int
    control_port: int = 0
    pid: int = 0
    # the worker's HTTP endpoint (/readyz, /healthz, /metrics); 0: none
    metrics_port: int = 0
    # the launch (StormBase.launch_time_secs) the worker runs: after a graph upgrade a peer
    # still registered by the old launch is not yet the new launch's (0: not said, an older worker)
    launch_secs: float = 0.0


class ErrorInfo(_Payload):
    component: str
    task: int
    time_secs: float
    error: str
    host: str = ""
    port: int = 0


class SupervisorInfo(_Payload):
    host: str
    ports: list[int]
    time_secs: float
    labels: dict[str, str] = Field(default_factory=dict)


class LogSetting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    # Storm's (log4j's) level name: TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF, ALL
    level: str
    # when it lapses (Unix time); None: until removed
    expires: float | None = None


class LogConfig(_Payload):
    """A topology's dynamic log levels (`squall set-log-level`, Storm's `set_log_level`): logger
    (`ROOT` for the root logger) -> setting; every worker of the topology applies it (squall
    .loglevels)."""

    loggers: dict[str, LogSetting] = Field(default_factory=dict)


class NimbusRequest(_Payload):
    """A lifecycle verb for the local cluster's nimbus (`squall activate ... --zookeeper`),
    written under ``<root>/requests``; nimbus answers in the same node (``answered``, ``ok``,
    ``message``) and the asker deletes it. Storm's CLI reaches nimbus over Thrift; here
    ZooKeeper is the only channel, as between nimbus and the supervisors."""

    # activate | deactivate | rebalance | kill | update
    action: str
    topology: str
    # rebalance / kill: seconds to wait (None: the topology's rebalanceWaitSecs / killWaitSecs)
    wait_secs: float | None = None
    # rebalance: new worker count and component -> executors (None: unchanged)
    num_workers: int | None = None
    executors: dict[str, int] | None = None
    # update: the Topology resource to apply to the running one (`squall update FILE`)
    resource: dict[str, Any] | None = None
    answered: bool = False
    ok: bool = False
    message: str = ""
    answered_at: float | None = None
