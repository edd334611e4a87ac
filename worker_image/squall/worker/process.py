"""The worker process: `python -m squall.worker`'s arguments, ZooKeeper session, signals and
allocator choice around one `runtime.Worker`."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from squall import metricreporters
from squall.gcpolicy import POLICY as GC_POLICY
from squall.models.cluster import (
    WorkerSlot,
)
from squall.models.v1alpha1 import Topology
from squall.state import ZK_AUTH_ENV, ZK_AUTH_FILE_ENV, ClusterState, ZkCredentials
from squall.stateviews import ForWorker
from squall.topology_keys import TopologyKey
from squall.worker import allocator
from squall.worker.debugging import DebugServer
from squall.worker.runtime import Worker, _process_age
from squall.worker.security import CurveKeyError, keys_from_env, read_keys

log = logging.getLogger("squall.worker")

def has_windows(state: ForWorker, topology: TopologyKey) -> bool:
    """Whether the topology as submitted has a windowed bolt (a bolt with `window`): what the
    worker's allocator goes by under `auto` (squall.worker.allocator). False when it cannot be
    read (the topology is gone, or ZooKeeper is away): the worker then keeps CPython's own."""
    try:
        base = state.get_storm(topology)
        spec = Topology.model_validate(base.topology).spec if base is not None else None
    except Exception as exc:  # a start-up hint only: the worker reads its topology again (`_load`)
        log.info("topology %s not read for the allocator (%s): CPython's own", topology, exc)
        return False
    return spec is not None and any(b.window is not None for b in spec.bolts)


def main(argv: list[str] | None = None) -> int:
    import argparse

    imported = _process_age()  # the interpreter and this module's imports

    p = argparse.ArgumentParser(prog="python -m squall.worker", description="Run one Squall worker slot.")
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string HOST:PORT[,...]")
    p.add_argument("--root", default="/squall", help="ZooKeeper root path")
    # the topology's key (NAMESPACE~NAME, or its name on the local cluster)
    p.add_argument("--topology", required=True, type=TopologyKey)
    p.add_argument("--node", required=True)
    p.add_argument("--port", type=int, required=True, help="slot port: data tuples arrive here")
    p.add_argument("--host", default=os.environ.get("SQUALL_WORKER_HOST", "127.0.0.1"), help="address peers connect to")
    p.add_argument("--bind", default=None, help="address to bind (default: --host)")
    p.add_argument("--search-path", action="append", default=[], help="directory holding component modules")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve /readyz, /healthz and /metrics on this port (0: any free port, published "
                        "in the worker's endpoint in ZooKeeper); default: no HTTP endpoint")
    p.add_argument("--metrics-bind", default=None, help="address the HTTP endpoint binds (default: --bind)")
    p.add_argument("--log-level", default=os.environ.get("SQUALL_LOG_LEVEL", "INFO"))
    p.add_argument("--curve-keys", default=None, metavar="DIR",
                   help="seal the transport with the topology's CURVE pair from DIR (curve.public, curve.secret); "
                        "without it, from $SQUALL_CURVE_PUBLIC_KEY and $SQUALL_CURVE_SECRET_KEY if set")
    p.add_argument("--zk-session-timeout", type=float,
                   default=float(os.environ.get("SQUALL_ZK_SESSION_TIMEOUT", "10")),
                   help="ZooKeeper session timeout asked of the server, seconds (it clamps it)")
    p.add_argument("--handover-secs", type=float,
                   default=float(os.environ.get("SQUALL_HANDOVER_SECS", "0")),
                   help="asked to stop (SIGTERM), keep serving the slot until its next worker has registered, "
                        "for at most this long (default: $SQUALL_HANDOVER_SECS, else 0: stop at once)")
    p.add_argument("--zk-auth-file", default=None,
                   help=f"file holding 'user:password' for ZooKeeper's digest ACLs (default: "
                        f"${ZK_AUTH_ENV}, else the file ${ZK_AUTH_FILE_ENV} names)")
    args = p.parse_args(argv)
    try:
        credentials = ZkCredentials.from_file(args.zk_auth_file) if args.zk_auth_file else ZkCredentials.from_env()
    except ValueError as exc:
        p.error(str(exc))
    import gc

    # Tuples, anchors and acker entries are acyclic: reference counting frees them. The cyclic
    # collector would otherwise run every 700 allocations and rescan every live pending tuple;
    # windowed bolts size its young generation to what they hold (gcpolicy.py)
    GC_POLICY.install()
    allocator.fix_mmap_threshold()
    logging.basicConfig(level=args.log_level, format=f"%(asctime)s worker {args.node}-{args.port} %(levelname)s %(name)s: %(message)s")
    from squall import _native

    log.info("hot path: %s", _native.reason)
    try:
        curve = read_keys(Path(args.curve_keys)) if args.curve_keys else keys_from_env(os.environ)
    except CurveKeyError as exc:
        log.error("worker %s-%s cannot start: %s", args.node, args.port, exc)
        return 2
    t_zk = time.monotonic()
    state = ClusterState.connect(args.zookeeper, root=args.root, session_timeout=args.zk_session_timeout,
                                 credentials=credentials)
    connected = time.monotonic() - t_zk
    if allocator.active is None:
        # `auto`: jemalloc for a topology with windows; re-executed on it before anything starts
        def _before_exec(decision: allocator.Decision) -> None:
            log.info("%s", decision.message)
            state.close()

        try:
            allocator.select(has_windows(state, args.topology), before_exec=_before_exec,
                             argv=None if argv is None else [sys.executable, "-m", "squall.worker", *argv])
        except ValueError as exc:
            log.error("worker %s-%s cannot start: %s", args.node, args.port, exc)
            state.close()
            return 2
    chosen = allocator.active
    assert chosen is not None
    (log.warning if chosen.warn else log.info)("%s", chosen.message)
    # `squall dump-stacks` / `squall logs` answered on a thread of its own beside the worker, on
    # the worker's session, from before the worker loads its components: a worker stuck in its
    # loop or in a component's prepare still shows its stacks
    debugger = DebugServer(state, args.topology, WorkerSlot(args.node, args.port), args.host).start()
    worker = Worker(state, args.topology, WorkerSlot(args.node, args.port), args.host, args.bind, tuple(args.search_path),
                    args.metrics_port, args.metrics_bind, curve, max(0.0, args.handover_secs))
    debugger.user_metrics = lambda: worker.figures().user  # the UI's component page asks for them

    def _stop(_sig: int, _frame: Any) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker.startup.update(imports=imported, zookeeper=connected)
    code = 0
    reporting: metricreporters.Reporting | None = None
    try:
        worker.start()
        # topology.metrics.reporters: the tasks' own metrics to the log or CSV files every period
        reporting = metricreporters.from_conf(worker.conf, args.topology, f"{args.node}-{args.port}",
                                              lambda: worker.figures().user).start()
        gc.freeze()  # what start-up loaded (modules, classes, the plan) is never garbage
        code = worker.run()
    finally:
        if reporting is not None:
            reporting.stop()
        worker.shutdown()
        debugger.stop()
        state.close()
    return code
