"""The web UI: Storm UI's pages and REST API for Squall, over Starlette, Jinja2 and uvicorn.

Pages (server-rendered; a small script polls the JSON API every 2 s and fills the figures in):

    /                              cluster summary and the topologies
    /topology/{id}                 spouts and bolts over 10 min / 3 h / all time, workers and
                                   their slots, the last errors, the config, the action buttons

JSON API (shaped after Storm UI's `/api/v1`):

    GET  /api/v1/cluster/summary
    GET  /api/v1/topology/summary
    GET  /api/v1/topology/{id}[?window=600|10800|:all-time]
    POST /api/v1/topology/{id}/activate
    POST /api/v1/topology/{id}/deactivate
    POST /api/v1/topology/{id}/rebalance/{wait-time}   {"rebalanceOptions": {"numWorkers": N,
                                                          "executors": {"component": P}}}
    POST /api/v1/topology/{id}/kill/{wait-time}

The actions answer 403 unless the UI was started with them enabled (`squall run --ui-actions`,
the chart's `ui.actions`); a POST must say `Content-Type: application/json` (415 otherwise: a
plain cross-site form cannot post to it); bad parameters get 400, an unknown topology 404, an
action its state does not allow 409, and none of them changes anything.

Why this stack: Starlette is the small, well-kept ASGI toolkit under FastAPI (routing, static
files, Jinja2 templates, no framework beyond), uvicorn is its reference server, and
server-rendered pages with one short script need no front-end build.
"""

from __future__ import annotations

import html
import json
import logging
import math
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import uvicorn
from kazoo.exceptions import NoAuthError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from squall.models import Topology
from squall.models.cluster import NimbusRequest
from squall.state import ClusterState
from squall_operator.nimbus import Nimbus, NimbusError
from squall_operator.requests import perform
from squall_operator.ui.data import WINDOWS, UiData
from squall_operator.verbs import EXIT_USAGE, KubernetesTarget, VerbError, _check_executors

__all__ = [
    "ActionRefused",
    "Actions",
    "KubernetesActions",
    "NimbusActions",
    "UiServer",
    "create_app",
    "refused_app",
    "refused_message",
]

log = logging.getLogger("squall.ui")
HERE = Path(__file__).resolve().parent
MAX_WAIT_SECS = 86400.0


class ActionRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Actions(Protocol):
    """What the action buttons do; raise `ActionRefused` (nothing changed) when refused."""

    def act(self, name: str, action: str, *, wait_secs: float | None = None,
            num_workers: int | None = None, executors: Mapping[str, int] | None = None) -> str: ...


def _tasks(state: ClusterState, name: str) -> dict[str, int]:
    base = state.get_storm(name)
    if base is None:
        raise ActionRefused(404, f"no topology named {name!r}")
    return {c.name: c.tasks for c in Topology.model_validate(base.topology).spec.components}


class NimbusActions:
    """The local cluster's nimbus, in process (`squall run --ui`)."""

    def __init__(self, nimbus: Nimbus) -> None:
        self.nimbus = nimbus

    def act(self, name: str, action: str, *, wait_secs: float | None = None,
            num_workers: int | None = None, executors: Mapping[str, int] | None = None) -> str:
        tasks = _tasks(self.nimbus.state, name)
        try:
            _check_executors(name, tasks, executors or {})
        except VerbError as exc:
            raise ActionRefused(400, str(exc)) from None
        req = NimbusRequest(action=action, topology=name, wait_secs=wait_secs,
                            num_workers=num_workers, executors=dict(executors) if executors else None)
        try:
            return perform(self.nimbus, req)
        except NimbusError as exc:
            raise ActionRefused(409, str(exc)) from None
        except ValueError as exc:
            raise ActionRefused(400, str(exc)) from None


class KubernetesActions:
    """The operator's UI: patch or delete the Topology resource (the spec stays the truth; the
    operator reconciles it), in the namespace the topology was submitted from."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def act(self, name: str, action: str, *, wait_secs: float | None = None,
            num_workers: int | None = None, executors: Mapping[str, int] | None = None) -> str:
        base = self.state.get_storm(name)
        if base is None:
            raise ActionRefused(404, f"no topology named {name!r}")
        if action == "rebalance" and num_workers is None and not executors:
            # Storm UI's rebalance of the same numbers reassigns; here the spec is the truth
            # and a spec that does not change asks the operator for nothing
            raise ActionRefused(400, "on Kubernetes a rebalance changes the Topology's numWorkers "
                                     "or a parallelism: give rebalanceOptions.numWorkers or .executors")
        namespace = (base.topology.get("metadata") or {}).get("namespace")
        try:
            target = KubernetesTarget(namespace=namespace)
            try:
                if action == "activate":
                    return target.activate(name)
                if action == "deactivate":
                    return target.deactivate(name)
                if action == "rebalance":
                    return target.rebalance(name, num_workers, executors or {}, wait_secs)
                if action == "kill":
                    return target.kill(name, wait_secs)
            finally:
                target.close()
        except VerbError as exc:
            status = 400 if exc.code == EXIT_USAGE or "tasks" in str(exc) or "no component" in str(exc) else 409
            raise ActionRefused(404 if "no topology named" in str(exc) else status, str(exc)) from None
        raise ActionRefused(400, f"unknown action {action!r}")


def refused_message(where: str) -> str:
    """What the UI answers when ZooKeeper's ACLs refuse it (the chart's zookeeper.auth)."""
    return (f"ZooKeeper refused the UI access to {where}: the UI needs the operator's ZooKeeper "
            "credentials (zookeeper.auth: $SQUALL_ZK_AUTH or --zk-auth-file)")


def _refused(request: Request, message: str) -> Response:
    if request.url.path.startswith("/api/"):
        return _error(503, message)
    return HTMLResponse(f"<h1>503 Service Unavailable</h1><p>{html.escape(message)}</p>", status_code=503)


def refused_app(message: str) -> Starlette:
    """Every path 503 with `message`: the UI of an operator whose ZooKeeper refuses it."""

    def handler(request: Request) -> Response:
        return _refused(request, message)

    return Starlette(routes=[Route("/{path:path}", handler, methods=["GET", "POST"])])


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "errorMessage": message}, status_code=status)


def _wait(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ActionRefused(400, f"wait-time {text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or value > MAX_WAIT_SECS:
        raise ActionRefused(400, f"wait-time must be between 0 and {MAX_WAIT_SECS:g} seconds, got {text}")
    return value


def _rebalance_options(body: Any) -> tuple[int | None, dict[str, int]]:
    if body is None:
        return None, {}
    if not isinstance(body, dict):
        raise ActionRefused(400, "the body must be a JSON object")
    opts = body.get("rebalanceOptions", {})
    if not isinstance(opts, dict) or set(opts) - {"numWorkers", "executors"}:
        raise ActionRefused(400, "rebalanceOptions takes numWorkers and executors only")
    workers = opts.get("numWorkers")
    if workers is not None and (type(workers) is not int or workers < 1):
        raise ActionRefused(400, f"rebalanceOptions.numWorkers must be a whole number >= 1, got {workers!r}")
    executors = opts.get("executors") or {}
    if not isinstance(executors, dict):
        raise ActionRefused(400, "rebalanceOptions.executors must map component -> parallelism")
    for comp, n in executors.items():
        if type(n) is not int or n < 1:
            raise ActionRefused(400, f"rebalanceOptions.executors.{comp} must be a whole number >= 1, got {n!r}")
    return workers, dict(executors)


def create_app(data: UiData, actions: Actions | None, *, actions_enabled: bool = False,
               title: str = "Squall") -> Starlette:
    """The UI over `data`; a read that ZooKeeper's ACLs refuse answers 503 saying so."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    enabled = actions_enabled and actions is not None

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        context = {"title": title, "actions_enabled": enabled, "windows": WINDOWS, **context}
        return templates.TemplateResponse(request, name, context, status_code=status)

    def index(request: Request) -> Response:
        return page(request, "index.html", {"cluster": data.cluster_summary(),
                                            "summary": data.topology_summary()})

    def topology_page(request: Request) -> Response:
        name = request.path_params["id"]
        topo = data.topology(name)
        if topo is None:
            return HTMLResponse(f"<h1>no topology named {name!r}</h1><p><a href='/'>topologies</a></p>",
                                status_code=404)
        return page(request, "topology.html", {"t": topo, "t_json": json.dumps(topo)})

    def cluster_summary(request: Request) -> Response:
        return JSONResponse(data.cluster_summary())

    def topology_summary(request: Request) -> Response:
        return JSONResponse(data.topology_summary())

    def topology(request: Request) -> Response:
        name = request.path_params["id"]
        got = data.topology(name, request.query_params.get("window", ":all-time"))
        if got is None:
            return _error(404, f"no topology named {name!r}")
        got["actionsEnabled"] = enabled
        return JSONResponse(got)

    async def action(request: Request) -> Response:
        name = request.path_params["id"]
        op = request.path_params["op"]
        waits = op in ("rebalance", "kill")
        if op not in ("activate", "deactivate", "rebalance", "kill") or (
                "wait" in request.path_params and not waits):
            return _error(404, f"no such action: {request.url.path}")
        if not enabled or actions is None:
            return _error(403, "actions are disabled on this UI (enable them with --ui-actions / ui.actions)")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "send Content-Type: application/json")
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            return _error(400, "the body is not JSON")
        try:
            wait = _wait(request.path_params["wait"]) if "wait" in request.path_params else None
            workers, executors = _rebalance_options(body) if op == "rebalance" else (None, {})
            message = await run_in_threadpool(
                actions.act, name, op, wait_secs=wait, num_workers=workers, executors=executors or None)
        except ActionRefused as exc:
            return _error(exc.status, str(exc))
        data.wake()
        return JSONResponse({"topologyOperation": op, "topologyId": name, "status": "success",
                             "message": message})

    routes = [
        Route("/", index),
        Route("/topology/{id}", topology_page),
        Route("/api/v1/cluster/summary", cluster_summary),
        Route("/api/v1/topology/summary", topology_summary),
        Route("/api/v1/topology/{id}", topology),
        Route("/api/v1/topology/{id}/{op:str}", action, methods=["POST"]),
        Route("/api/v1/topology/{id}/{op:str}/{wait}", action, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    async def no_auth(request: Request, exc: Exception) -> Response:
        return _refused(request, refused_message(data.state.root))

    return Starlette(routes=routes, exception_handlers={NoAuthError: no_auth})


class UiServer:
    """uvicorn serving `app` on a thread, on `host` (loopback by default); `port` 0 picks one."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> UiServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        sock.listen(64)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="ui", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()
