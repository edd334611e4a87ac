"""`python -m squall_operator.operator_main` / `squall operator`: run the operator (nimbus).

Every option also reads an environment variable (shown in --help), so the chart can pass either.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from squall.state import ZkCredentials
from squall_operator import pods
from squall_operator.health import Health
from squall_operator.kube_nimbus import OperatorConfig
from squall_operator.metrics import NimbusMetrics, exposition

__all__ = ["config_from_args", "main", "parser"]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="squall operator",
                                description="Run the Squall operator: nimbus for Topology resources.")
    add = p.add_argument
    add("--zookeeper", default=_env("SQUALL_ZOOKEEPER"), help="ZooKeeper connect string [SQUALL_ZOOKEEPER]")
    add("--zk-root", default=_env("SQUALL_ZK_ROOT", "/squall"), help="ZooKeeper root path [SQUALL_ZK_ROOT]")
    add("--zk-auth-file", default=None,
        help="file holding 'user:password': Squall's ZooKeeper nodes get a digest ACL for that user "
             "alone, and each topology's workers get it in a Secret of their own (default: "
             "$SQUALL_ZK_AUTH, the line itself, else the file $SQUALL_ZK_AUTH_FILE names)")
    add("--namespace", action="append", default=None,
        help="namespace whose Topologies to run (repeat); none: all namespaces [SQUALL_NAMESPACES, comma-separated]")
    add("--worker-image", default=_env("SQUALL_WORKER_IMAGE", "squall-worker:0.1.0"), help="[SQUALL_WORKER_IMAGE]")
    add("--worker-image-pull-policy", default=_env("SQUALL_WORKER_IMAGE_PULL_POLICY", "IfNotPresent"))
    add("--worker-command", default=_env("SQUALL_WORKER_COMMAND", ""),
        help="the worker container's command (split on spaces); empty: the image's entrypoint")
    add("--worker-resources", default=_env("SQUALL_WORKER_RESOURCES", "{}"),
        help="worker container resources, JSON [SQUALL_WORKER_RESOURCES]")
    add("--worker-env", action="append", default=[], metavar="NAME=VALUE", help="extra worker env (repeat)")
    add("--worker-log-level", default=_env("SQUALL_WORKER_LOG_LEVEL", "INFO"))
    add("--worker-run-as-user", type=int, default=int(_env("SQUALL_WORKER_RUN_AS_USER", "10001") or 10001))
    add("--worker-termination-grace-secs", type=int, default=30)
    add("--worker-service-account", default=_env("SQUALL_WORKER_SERVICE_ACCOUNT"))
    add("--worker-metrics-port-offset", type=int,
        default=int(_env("SQUALL_WORKER_METRICS_PORT_OFFSET", "1000") or 1000),
        help="a worker's /readyz, /healthz and /metrics listen on its slot port plus this "
             "[SQUALL_WORKER_METRICS_PORT_OFFSET]")
    add("--worker-scrape-annotations", choices=("true", "false"),
        default=_env("SQUALL_WORKER_SCRAPE_ANNOTATIONS", "true"),
        help="annotate worker pods with prometheus.io/scrape, /port, /path [SQUALL_WORKER_SCRAPE_ANNOTATIONS]")
    add("--worker-curve", choices=["true", "false"], default=_env("SQUALL_WORKER_CURVE", "true"),
        help="seal the transport between each Topology's workers with CURVE (a key pair per Topology, "
             "in a Secret it owns) [SQUALL_WORKER_CURVE]")
    add("--worker-network-policy", choices=["true", "false"], default=_env("SQUALL_WORKER_NETWORK_POLICY", "true"),
        help="make a NetworkPolicy per Topology: only its own workers reach its worker pods "
             "[SQUALL_WORKER_NETWORK_POLICY]")
    add("--search-path", action="append", default=None,
        help="directory (in the worker image) holding component modules, passed to the workers (repeat)"
             " [SQUALL_SEARCH_PATHS, ':'-separated]")
    add("--node-selector", action="append", default=[], metavar="LABEL=VALUE",
        help="only Nodes with these labels offer slots (repeat)")
    add("--slots-per-node", type=int, default=int(_env("SQUALL_SLOTS_PER_NODE", "4") or 4))
    add("--slots-label", default=_env("SQUALL_SLOTS_LABEL", pods.SLOTS_LABEL))
    add("--base-port", type=int, default=int(_env("SQUALL_BASE_PORT", "6700") or 6700))
    add("--monitor-freq-secs", type=float, default=float(_env("SQUALL_MONITOR_FREQ_SECS", "2") or 2))
    add("--task-timeout-secs", type=float, default=float(_env("SQUALL_TASK_TIMEOUT_SECS", "10") or 10))
    add("--launch-timeout-secs", type=float, default=float(_env("SQUALL_LAUNCH_TIMEOUT_SECS", "120") or 120))
    add("--lease-name", default=_env("SQUALL_LEASE_NAME", "squall-operator"))
    add("--lease-namespace", default=_env("SQUALL_LEASE_NAMESPACE") or _env("POD_NAMESPACE") or "default")
    add("--lease-duration-secs", type=float, default=15.0)
    add("--worker-disruption-budget", type=int,
        default=int(_env("SQUALL_WORKER_DISRUPTION_BUDGET", "1") or 1),
        help="a PodDisruptionBudget per Topology: at most this many of its worker pods evicted at "
             "once (a drain moves them one by one); 0: none, and the ones made before are removed "
             "[SQUALL_WORKER_DISRUPTION_BUDGET]")
    add("--liveness-timeout-secs", type=float,
        default=float(_env("SQUALL_LIVENESS_TIMEOUT_SECS", "120") or 120),
        help="/healthz fails (the kubelet restarts the operator) once the leader's reconcile loop "
             "has not begun a round for this long (a round hangs) [SQUALL_LIVENESS_TIMEOUT_SECS]")
    add("--log-level", default=_env("SQUALL_LOG_LEVEL", "INFO"))
    add("--health-address", default=_env("SQUALL_HEALTH_ADDRESS", "0.0.0.0:8080"),
        help="HOST:PORT serving /readyz (ready: the API server and ZooKeeper are reachable), "
             "/healthz and /metrics (Prometheus); empty: none [SQUALL_HEALTH_ADDRESS]")
    add("--ui-address", default=_env("SQUALL_UI_ADDRESS", ""),
        help="HOST:PORT serving the web UI (Storm UI's pages and JSON API); empty: none [SQUALL_UI_ADDRESS]")
    add("--ui-actions", action="store_true", default=_env("SQUALL_UI_ACTIONS", "") == "true",
        help="let the UI activate, deactivate, rebalance and kill (it patches or deletes the "
             "Topology); default read-only [SQUALL_UI_ACTIONS=true]")
    return p


class OperatorUi:
    """The operator's web UI: its own ZooKeeper client (read-only; actions patch or delete the
    Topology resource, as `kubectl squall` does), started on a daemon thread that waits for
    ZooKeeper. `started` is set once it serves; `url` says where."""

    def __init__(self, address: str, zookeeper: str, root: str, actions: bool,
                 credentials: ZkCredentials | None = None) -> None:
        import threading

        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise SystemExit(f"squall operator: --ui-address must be HOST:PORT, got {address!r}")
        self.host, self.port = host or "0.0.0.0", int(port)
        self.zookeeper, self.root, self.actions = zookeeper, root, actions
        self.credentials = credentials  # the operator's, when ZooKeeper has ACLs (zookeeper.auth)
        self.started = threading.Event()
        self.stop_event = threading.Event()
        self.url = ""
        self._server: Any = None
        self._data: Any = None
        self._state: Any = None
        threading.Thread(target=self._run, name="squall-ui", daemon=True).start()

    def _run(self) -> None:
        from kazoo.exceptions import NoAuthError

        from squall.state import ClusterState, StateError
        from squall_operator.ui import KubernetesActions, UiServer, create_app, refused_app, refused_message
        from squall_operator.ui.data import UiData

        log = logging.getLogger("squall.ui")
        refused: str | None = None
        while not self.stop_event.is_set():
            try:
                self._state = ClusterState.connect(self.zookeeper, root=self.root,
                                                   credentials=self.credentials)
                break
            except StateError as exc:
                log.warning("UI: %s; retrying", exc)
                self.stop_event.wait(5)
            except NoAuthError:  # ZooKeeper's ACLs (zookeeper.auth) and not the credentials
                refused = refused_message(f"{self.zookeeper}{self.root}")
                log.error("UI: %s", refused)
                break
        if self.stop_event.is_set():
            return
        if refused is not None:  # serve the reason rather than nothing
            app = refused_app(refused)
        else:
            self._data = UiData(self._state)
            self._data.start()
            app = create_app(self._data, KubernetesActions(self._state), actions_enabled=self.actions,
                             title="Squall")
        try:
            self._server = UiServer(app, self.host, self.port).start()
        except OSError as exc:
            log.error("UI: cannot listen on %s:%d: %s", self.host, self.port, exc)
            return
        self.url = self._server.url
        log.info("UI on %s (%s)", self.url, "actions enabled" if self.actions else "read-only")
        self.started.set()

    def stop(self) -> None:
        self.stop_event.set()
        if self._server is not None:
            self._server.stop()
        if self._data is not None:
            self._data.stop()
        if self._state is not None:
            self._state.close()


def serve_health(address: str, health: Health, metrics: NimbusMetrics | None = None) -> Any:
    """Serve /readyz (200 when `health.ready()`, else 503 with the reason), /healthz (200
    while `health.alive()`: the reconcile loop turns) and /metrics (`metrics`' registry, if given) on `address` in a
    daemon thread; returns the server."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith("/metrics") and metrics is not None:
                code, ctype, data = exposition(metrics.registry, self.headers.get("Accept", ""))
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if self.path.startswith("/readyz"):
                ok, why = health.ready()
            elif self.path.startswith("/healthz"):
                ok, why = health.alive()
            else:
                self.send_error(404)
                return
            body = (why + "\n").encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    host, _, port = address.rpartition(":")
    server = http.server.ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    threading.Thread(target=server.serve_forever, name="squall-health", daemon=True).start()
    return server


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"squall operator: {what} must be NAME=VALUE, got {item!r}")
        out[key] = value
    return out


def config_from_args(args: argparse.Namespace) -> OperatorConfig:
    if not args.zookeeper:
        raise SystemExit("squall operator: --zookeeper (or SQUALL_ZOOKEEPER) is required")
    namespaces = args.namespace
    if namespaces is None:
        namespaces = [n for n in (_env("SQUALL_NAMESPACES") or "").split(",") if n.strip()]
    search = args.search_path
    if search is None:
        search = [p for p in (_env("SQUALL_SEARCH_PATHS") or "").split(":") if p]
    if args.worker_disruption_budget < 0:
        raise SystemExit(f"squall operator: --worker-disruption-budget must be 0 or more, got "
                         f"{args.worker_disruption_budget}")
    if args.liveness_timeout_secs <= args.monitor_freq_secs:
        raise SystemExit(f"squall operator: --liveness-timeout-secs ({args.liveness_timeout_secs:g}) must be "
                         f"more than --monitor-freq-secs ({args.monitor_freq_secs:g}): a round begins that often")
    try:
        resources = json.loads(args.worker_resources or "{}")
    except ValueError as exc:
        raise SystemExit(f"squall operator: --worker-resources is not JSON: {exc}") from None
    try:
        credentials = ZkCredentials.from_file(args.zk_auth_file) if args.zk_auth_file else ZkCredentials.from_env()
    except ValueError as exc:
        raise SystemExit(f"squall operator: --zk-auth-file: {exc}") from None
    worker = pods.WorkerPodConfig(
        image=args.worker_image,
        zookeeper=args.zookeeper,
        zk_root=args.zk_root,
        image_pull_policy=args.worker_image_pull_policy,
        command=tuple(args.worker_command.split()),
        search_paths=tuple(search),
        log_level=args.worker_log_level,
        resources=resources,
        env=_pairs(args.worker_env, "--worker-env"),
        run_as_user=args.worker_run_as_user,
        termination_grace_secs=args.worker_termination_grace_secs,
        service_account=args.worker_service_account,
        metrics_port_offset=args.worker_metrics_port_offset,
        scrape_annotations=args.worker_scrape_annotations == "true",
        zk_auth=credentials is not None,
        curve=args.worker_curve == "true",
        network_policy=args.worker_network_policy == "true",
    )
    return OperatorConfig(
        zookeeper=args.zookeeper,
        zk_root=args.zk_root,
        worker=worker,
        namespaces=tuple(n.strip() for n in namespaces),
        slots=pods.SlotConfig(
            node_selector=_pairs(args.node_selector, "--node-selector"),
            default_slots=args.slots_per_node,
            slots_label=args.slots_label,
            base_port=args.base_port,
        ),
        monitor_freq_secs=args.monitor_freq_secs,
        task_timeout_secs=args.task_timeout_secs,
        launch_timeout_secs=args.launch_timeout_secs,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace,
        lease_duration_secs=args.lease_duration_secs,
        zk_credentials=credentials,
        disruption_budget=args.worker_disruption_budget,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = config_from_args(args)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    import kopf

    from squall_operator import handlers

    health = Health(config.zookeeper, loop_limit=args.liveness_timeout_secs)
    metrics = NimbusMetrics()
    if args.health_address:
        serve_health(args.health_address, health, metrics)
    if args.ui_address:
        OperatorUi(args.ui_address, config.zookeeper, config.zk_root, args.ui_actions,
                   credentials=config.zk_credentials)
    context = handlers.OperatorContext(config=config, health=health, metrics=metrics)
    kopf.run(
        standalone=True,
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        memo=kopf.Memo(context=context),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
