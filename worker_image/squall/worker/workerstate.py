"""The worker's state: one plain holder of what its modules share (Storm's worker-data, the
JStorm seed's WorkerData).

The worker's jobs are functions of it, one module per concern: `acking` (acker traffic),
`receive` (the data port's dispatch and the announcements it makes), `send` (senders and
transfer), `hotupdate` (a new assignment applied), `refresh` (ZooKeeper's view read, the
endpoint kept, leaving), `levels` (dynamic log levels) and `status` (probes, figures,
heartbeats, errors). `runtime.Worker` is this state with the process's life around it: load,
bind, start, the main loop, stop.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from squall import sampling, wire
from squall.acker import AckerLedger
from squall.models.cluster import (
    Assignment,
    Endpoint,
    ExecutorId,
    StormBase,
    WorkerSlot,
)
from squall.models.v1alpha1 import StreamSpec, Topology, TopologySpec
from squall.stateviews import ForWorker
from squall.topology_keys import TopologyKey
from squall.worker import health
from squall.worker.engine import Engine
from squall.worker.errorlog import ErrorThrottle
from squall.worker.executor import Executor
from squall.worker.load import BusyMeter, PeerLoads
from squall.worker.routing import Inbox, Routing
from squall.worker.security import CurveKeys, Sealer
from squall.worker.transport import PeerQueues

# per peer: batches queued for its transfer thread (a full queue is backpressure on the sender)
SEND_QUEUE_BATCHES = 64
# past this many queued batches for one peer, the receive threads stop reading their socket
SEND_QUEUE_HARD_LIMIT = 4096
# batches parked for one full executor inbox before the receive thread stops reading its socket
PARK_LIMIT = 512
# a backpressured task is re-announced this often; peers forget an announcement after BP_TTL_SECS
BP_REFRESH_SECS = 0.5
BP_TTL_SECS = 2.0


class WorkerState:
    """Everything the worker's modules share. Written by the main thread (assignment,
    refresh) and the engine loop (receive, acking); what both touch is said where it is."""

    # set once the topology is loaded and the ports bound (`runtime.Worker.start`)
    base: StormBase
    topology: Topology
    spec: TopologySpec
    classes: dict[str, type]
    streams: dict[str, dict[str, StreamSpec]]
    conf: dict[str, Any]
    endpoint: Endpoint
    data_sock: zmq.Socket[bytes]
    control_sock: zmq.Socket[bytes]
    control_port: int

    def __init__(
        self,
        state: ForWorker,
        topology_id: TopologyKey,
        slot: WorkerSlot,
        host: str = "127.0.0.1",
        bind_host: str | None = None,
        search_paths: tuple[str, ...] = (),
        metrics_port: int | None = None,
        metrics_bind: str | None = None,
        curve: CurveKeys | None = None,
        handover_secs: float = 0.0,
    ) -> None:
        self.state = state
        self.topology_id = topology_id
        self.slot = slot
        self.host = host
        self.bind_host = bind_host or host
        self.search_paths = search_paths
        # the HTTP endpoint (/readyz, /healthz, /metrics): None: none; 0: any free port
        self.metrics_port = metrics_port
        self.metrics_bind = metrics_bind or self.bind_host
        self.http: health.HealthServer | None = None
        # loop name -> when it last turned (monotonic): readiness and liveness read it
        self.loop_turns: dict[str, float] = {}
        self.peer_reconnects = 0
        self.zk_reconnects = 0
        self.zk_sessions_expired = 0
        # task -> seconds its inbox was full (tuples for it parked by the loop's data receive)
        self.bp_secs: dict[int, float] = {}
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        # the ZooKeeper watch of everything the worker reads: wakes the main loop to refresh (one
        # callable for the worker's life: a watch registered again is not registered twice)
        self.watch: Callable[..., None] = lambda *_args: self.wake.set()
        self.started = time.time()
        self.zmq = zmq.Context()
        # CURVE between the topology's workers (squall.worker.security); None: plain TCP
        self.sealer = Sealer(self.zmq, curve) if curve is not None else None
        # backpressure signals refused: from a host that runs none of the assignment's workers
        self.refused_signals = 0
        # signals from a host not known while some worker of the assignment had no endpoint yet
        self.unjudged_signals = 0
        # hosts of the assignment's workers, and the (endpoints, routing) they were read from
        self.peer_hosts: frozenset[str] = frozenset()
        self.peer_hosts_of: tuple[Any, Any] = (None, None)
        self.acker_lock = threading.Lock()
        self.ledgers: dict[int, AckerLedger] = {}
        self.executors: dict[ExecutorId, Executor] = {}
        self.data_peers = PeerQueues(SEND_QUEUE_BATCHES, SEND_QUEUE_HARD_LIMIT)
        self.control_peers = PeerQueues(SEND_QUEUE_BATCHES, SEND_QUEUE_HARD_LIMIT)
        # remote task -> until when it is backpressured (monotonic); written from the control port
        self.remote_bp: dict[int, float] = {}
        # this worker's busy fraction (measured at the data receive) and what its peers announce
        # of theirs (heard on the control port), for the load-aware shuffles
        self.loads = PeerLoads()
        # executors removed by a hot update that are still finishing what they hold
        self.retiring: list[Executor] = []
        # task -> a retiring spout executor of it, for the completions of its pending trees
        self.retiring_spouts: dict[int, Executor] = {}
        # the routing the loop's data receive last dispatched with
        self.recv_routing: Routing | None = None
        # when a stop was requested (SIGTERM), monotonic; see `request_stop`
        self.stop_requested: float | None = None
        # asked to stop, keep serving the slot until its next worker registered, at most this
        # long (squall.worker.handover); 0: stop at once
        self.handover_secs = handover_secs
        # ZooKeeper refuses this worker's credentials (ACLs), warned once per refusal: it cannot
        # see a successor come then
        self.zk_refused = False
        # seconds each step of the start took (logged once registered: where a replacement
        # worker's recovery time goes)
        self.startup: dict[str, float] = {}
        self.endpoints: dict[WorkerSlot, Endpoint] = {}
        self.errors: collections.deque[tuple[str, int, str]] = collections.deque(maxlen=100)
        # the rate of the components' error logs and reports (set from the config by `_load`)
        self.error_throttle = ErrorThrottle()
        self.bad_frames = 0
        self.max_frame = wire.MAX_FRAME_BYTES  # set from the config and environment by `_load`
        self.unsendable = 0
        self.dropped = 0
        self.active = False
        self.storm_active = False
        # the topology was launched again (a graph upgrade) while this worker ran the old launch
        self.relaunched = False
        self.peers_ready = False
        self.threads: list[threading.Thread] = []
        # the engine loop: it steps the executors and reads the ports (squall.worker.engine)
        self.engine: Engine | None = None
        # receive-data's state, kept by the loop: batches parked for a full inbox (in order), the
        # tasks announced backpressured, when last, and this worker's busy meter
        self.parked_batches: dict[Inbox, collections.deque[list[list[Any]]]] = {}
        self.bp_tasks: set[int] = set()
        self.bp_sent_at = 0.0
        self.bp_counted_at = time.monotonic()
        self.busy_meter = BusyMeter(warmup=1)  # its first second is this worker's start, not its load
        self.next_load_announce = 0.0
        self.assignment: Assignment | None = None
        # dynamic log levels (squall.loglevels): the topology's config as last read, the levels
        # its loggers had before this worker first changed them, and when a setting lapses next
        self.log_config: dict[str, dict[str, Any]] = {}
        self.log_originals: dict[str, int] = {}
        self.log_next_check: float | None = None
        self.log_config_problem: str | None = None
        # the event inspector (squall.sampling): the topology's sampling config as last read,
        # when a setting lapses next, the tuples this worker's executors sampled (the newest),
        # and the newest one it published
        self.sampling: dict[str, dict[str, Any]] = {}
        self.sampling_next_check: float | None = None
        self.sampling_problem: str | None = None
        self.samples: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=sampling.KEPT)
        self.samples_published: tuple[Any, ...] | None = None
        self.acker_executors: list[ExecutorId] = []
        self.routing: Routing
        self.exit_code = 0
