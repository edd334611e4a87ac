"""The web UI: Storm UI's pages and REST API for Squall, over Starlette, Jinja2 and uvicorn.

Pages (server-rendered; a small script polls the JSON API every 2 s and fills the figures in):

    /                              cluster summary and the topologies
    /topology/{id}                 spouts and bolts over 10 min / 3 h / all time, workers and
                                   their slots, the last errors, the config, the action buttons
    /topology/{id}/component/{c}   one component: its figures, workers and the metrics its
                                   tasks registered (Storm's metrics v2, squall.usermetrics)

JSON API (shaped after Storm UI's `/api/v1`):

    GET  /api/v1/cluster/summary
    GET  /api/v1/topology/summary
    GET  /api/v1/topology/{id}[?window=600|10800|:all-time]
    POST /api/v1/topology/{id}/activate
    POST /api/v1/topology/{id}/deactivate
    POST /api/v1/topology/{id}/rebalance/{wait-time}   {"rebalanceOptions": {"numWorkers": N,
                                                          "executors": {"component": P}}}
    POST /api/v1/topology/{id}/kill/{wait-time}
    GET  /api/v1/topology/{id}/component/{component}   Storm UI's component page: the component's
                                   figures and `userMetrics`, the metrics its tasks registered
                                   (context.register_*), asked of the workers that run it
    GET  /api/v1/topology/{id}/profiling/dumpjstack/{node-port}   every thread's stack of a worker
                                   (Storm's jstack; `/topology/{id}/stacks/{node-port}`: the same as text)
    GET  /api/v1/topology/{id}/profiling/profile/{node-port}[?secs=S]   a short sampled CPU profile
                                   of a worker (`squall dump-stacks --profile`; as text at
                                   `/topology/{id}/profile/{node-port}`), S from 0.1 to 30, 5 by default
    GET  /api/v1/topology/{id}/events?component=C&n=N   the tuples the event inspector sampled
    POST /api/v1/topology/{id}[/component/{component}]/debug/{enable|disable}/{pct}[?secs=S]
                                   Storm UI's debug switch (`squall debug`; an action)

A stack dump (squall.worker.debugging) asks the worker through ZooKeeper, as `squall
dump-stacks` does: it changes nothing, so it needs no enabled actions, but a browser must ask from
the UI's own pages (403 otherwise: another site's link cannot set workers dumping), one dump at a
time (429 while one runs), and a worker that does not answer in `STACKS_TIMEOUT_SECS` is 504.

The actions answer 403 unless the UI was started with them enabled (`squall run --ui-actions`,
the chart's `ui.actions`), and 403 to a browser that says the request comes from another site
(`Sec-Fetch-Site`); a POST must say `Content-Type: application/json` (415 otherwise: a plain
cross-site form cannot post to it) and carry at most 64 KiB (413); bad parameters get 400, an
unknown topology (or an id no topology can have, answered before ZooKeeper is asked) 404, an
action its state does not allow 409, and none of them changes anything.

What a page shows is escaped (Jinja2's autoescape, every template); every answer carries a
Content-Security-Policy that runs no inline script (the pages' one script is static/ui.js) and
lets no other site frame the pages, with nosniff, X-Frame-Options and Referrer-Policy
(`SecurityHeaders`); on loopback the UI answers only requests naming a loopback host
(`LoopbackHostOnly`, against DNS rebinding).

Why this stack: Starlette is the small, well-kept ASGI toolkit under FastAPI (routing, static
files, Jinja2 templates, no framework beyond), uvicorn is its reference server, and
server-rendered pages with one short script need no front-end build.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

import jinja2
import uvicorn
from kazoo.exceptions import NoAuthError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from squall import sampling
from squall.models.cluster import NimbusRequest
from squall.state import CONNECTION_ERRORS, ClusterState, StateError, TopologyKey, not_found
from squall.stateviews import ForNimbus, ForViewers
from squall.worker import debugging, eventlog
from squall_operator import stored
from squall_operator.nimbus import Nimbus, NimbusError
from squall_operator.requests import perform
from squall_operator.ui.data import WINDOWS, UiData, is_topology_id, latency_text
from squall_operator.verbs import EXIT_USAGE, MAX_WORKERS, KubernetesTarget, VerbError, _check_executors, inspected

__all__ = [
    "ActionRefused",
    "Actions",
    "KubernetesActions",
    "LoopbackHostOnly",
    "NimbusActions",
    "SecurityHeaders",
    "UiServer",
    "create_app",
    "refused_app",
    "refused_message",
]

log = logging.getLogger("squall.ui")
HERE = Path(__file__).resolve().parent
MAX_WAIT_SECS = 86400.0
MAX_BODY_BYTES = 64 * 1024  # a rebalance's options are a few hundred bytes
# seconds a stack dump waits for its worker's answer
STACKS_TIMEOUT_SECS = 15.0
# seconds the component page waits for its workers' metrics
METRICS_TIMEOUT_SECS = 5.0
# how long the UI's profile link samples when not told
PROFILE_SECS = 5.0
# how long the UI's debug switch samples when not told (squall debug's default)
DEBUG_SECS = 300.0


class ActionRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Actions(Protocol):
    """What the action buttons do; raise `ActionRefused` (nothing changed) when refused."""

    def act(self, name: TopologyKey, action: str, *, wait_secs: float | None = None,
            num_workers: int | None = None, executors: Mapping[str, int] | None = None) -> str: ...


def _topology_key(request: Request) -> TopologyKey:
    """The topology a URL names (its `{id}`): its key, as the UI lists it (NAMESPACE~NAME on
    the operator's ZooKeeper, the name on the local cluster)."""
    return TopologyKey(request.path_params["id"])


def _tasks(state: ForViewers | ForNimbus, name: TopologyKey) -> dict[str, int]:
    base = state.get_storm(name)
    if base is None:
        raise ActionRefused(404, f"no topology named {name!r}")
    return {c.name: c.tasks for c in stored.topology(base).spec.components}


class NimbusActions:
    """The local cluster's nimbus, in process (`squall run --ui`)."""

    def __init__(self, nimbus: Nimbus) -> None:
        self.nimbus = nimbus

    def act(self, name: TopologyKey, action: str, *, wait_secs: float | None = None,
            num_workers: int | None = None, executors: Mapping[str, int] | None = None) -> str:
        tasks = _tasks(self.nimbus.state, name)
        try:
            _check_executors(name, tasks, executors or {})
        except VerbError as exc:
            raise ActionRefused(400, str(exc)) from None
        try:
            req = NimbusRequest(action=action, topology=name, wait_secs=wait_secs,
                                num_workers=num_workers, executors=dict(executors) if executors else None)
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

    def act(self, name: TopologyKey, action: str, *, wait_secs: float | None = None,
            num_workers: int | None = None, executors: Mapping[str, int] | None = None) -> str:
        base = self.state.get_storm(name)
        if base is None:
            raise ActionRefused(404, not_found(name, self.state.storm_ids()))
        if action == "rebalance" and num_workers is None and not executors:
            # Storm UI's rebalance of the same numbers reassigns; here the spec is the truth
            # and a spec that does not change asks the operator for nothing
            raise ActionRefused(400, "on Kubernetes a rebalance changes the Topology's numWorkers "
                                     "or a parallelism: give rebalanceOptions.numWorkers or .executors")
        # the resource is the topology's name in the namespace it was submitted from (its key
        # here is NAMESPACE~NAME, or the bare name an older operator stored it under)
        namespace = (base.topology.get("metadata") or {}).get("namespace")
        resource = base.name
        try:
            target = KubernetesTarget(namespace=namespace)
            try:
                if action == "activate":
                    return target.activate(resource)
                if action == "deactivate":
                    return target.deactivate(resource)
                if action == "rebalance":
                    return target.rebalance(resource, num_workers, executors or {}, wait_secs)
                if action == "kill":
                    return target.kill(resource, wait_secs)
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


# -- what every answer carries ---------------------------------------------------------------------

# The pages load one script and one stylesheet, both from /static, and fetch the JSON API: nothing
# inline runs (no <script> body, no on* attribute, no style attribute), and no other site may
# frame the pages (clickjacking the action buttons).
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_SECURITY_NAMES = frozenset(name for name, _ in SECURITY_HEADERS)


class SecurityHeaders:
    """ASGI middleware: `SECURITY_HEADERS` on every HTTP answer (pages, API, static files,
    Starlette's own 404 and 405), replacing any the app set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _SECURITY_NAMES]
                message = {**message, "headers": [*headers, *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_secured)


def _is_loopback_name(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a Host header: `[::1]:8080` -> `::1`, `localhost:8080` -> `localhost`."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LoopbackHostOnly:
    """ASGI middleware for a UI listening on loopback: a request whose Host names anything but
    a loopback address or `localhost` gets 400. A page on another site whose name an attacker
    rebinds to 127.0.0.1 (DNS rebinding) is same-origin with itself, not with the UI, and sends
    its own name as Host; without this it could read the figures and post actions."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if host is not None and not _is_loopback_name(host_of(host)):
                body = b"this UI answers on a loopback address only (the Host header names another host)\n"
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


# -- pages ----------------------------------------------------------------------------------------

def _number(v: object) -> str:
    """A metric's value as the component page prints it: whole numbers with separators, others
    to 6 significant digits."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or (math.isfinite(v) and v == int(v) and abs(v) < 1e15):
        return f"{int(v):,}"
    return f"{v:.6g}"


def _templates() -> Jinja2Templates:
    # autoescape for every template, whatever its name ends with: nothing a request or
    # ZooKeeper holds reaches a page unescaped
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["latency"] = latency_text
    env.filters["count"] = lambda n: f"{n:,}"
    env.filters["number"] = _number
    return Jinja2Templates(env=env)


TEMPLATES = _templates()


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200, *,
          title: str = "Squall", actions_enabled: bool = False) -> Response:
    context = {"title": title, "actions_enabled": actions_enabled, "windows": WINDOWS, **context}
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status)


def _error_page(request: Request, status: int, message: str, *, title: str = "Squall") -> Response:
    return _page(request, "error.html", {"status": status, "reason": HTTPStatus(status).phrase,
                                         "message": message}, status, title=title)


def _shown(name: str) -> str:
    """A name from a request as an answer quotes it: repr (control characters escaped), and
    at most 80 characters of it."""
    return repr(name[:80]) + (f" (and {len(name) - 80} more characters)" if len(name) > 80 else "")


def _refused(request: Request, message: str) -> Response:
    if request.url.path.startswith("/api/"):
        return _error(503, message)
    return _error_page(request, 503, message)


def refused_app(message: str) -> Starlette:
    """Every path 503 with `message`: the UI of an operator whose ZooKeeper refuses it."""

    def handler(request: Request) -> Response:
        return _refused(request, message)

    return Starlette(routes=[Route("/{path:path}", handler, methods=["GET", "POST"])],
                     middleware=[Middleware(SecurityHeaders)])


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "errorMessage": message}, status_code=status)


def _wait(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ActionRefused(400, f"wait-time {_shown(text)} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or value > MAX_WAIT_SECS:
        raise ActionRefused(400, f"wait-time must be between 0 and {MAX_WAIT_SECS:g} seconds, got {_shown(text)}")
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
        raise ActionRefused(400, "rebalanceOptions.numWorkers must be a whole number >= 1, "
                                 f"got {_shown(repr(workers))}")
    if workers is not None and workers > MAX_WORKERS:  # as `squall rebalance -n`: an acker per worker
        raise ActionRefused(400, f"rebalanceOptions.numWorkers must be at most {MAX_WORKERS}, "
                                 f"got {_shown(repr(workers))}")
    executors = opts.get("executors") or {}
    if not isinstance(executors, dict):
        raise ActionRefused(400, "rebalanceOptions.executors must map component -> parallelism")
    for comp, n in executors.items():
        if type(n) is not int or n < 1:
            raise ActionRefused(400, f"rebalanceOptions.executors.{_shown(comp)} must be a whole number >= 1, "
                                     f"got {_shown(repr(n))}")
    return workers, dict(executors)


async def _body(request: Request) -> bytes:
    """The request's body, refused (413) past MAX_BODY_BYTES before more of it is read."""
    too_big = ActionRefused(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_big
    got = bytearray()
    async for chunk in request.stream():
        got += chunk
        if len(got) > MAX_BODY_BYTES:
            raise too_big
    return bytes(got)


def create_app(data: UiData, actions: Actions | None, *, actions_enabled: bool = False,
               title: str = "Squall") -> Starlette:
    """The UI over `data`; a read that ZooKeeper's ACLs refuse answers 503 saying so.

    Every topology id from a path is checked (`is_topology_id`) before anything asks ZooKeeper
    for it: an id no topology can have is 404, like one that is not there."""
    enabled = actions_enabled and actions is not None

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        return _page(request, name, context, status, title=title, actions_enabled=enabled)

    def no_topology(name: str) -> str:
        if not is_topology_id(name):
            return f"no topology named {_shown(name)}"
        try:
            return not_found(name, data.state.storm_ids())
        except CONNECTION_ERRORS:
            return f"no topology named {_shown(name)}"
        except StateError:
            return f"no topology named {_shown(name)}"

    def index(request: Request) -> Response:
        return page(request, "index.html", {"cluster": data.cluster_summary(),
                                            "summary": data.topology_summary()})

    def topology_page(request: Request) -> Response:
        name = _topology_key(request)
        topo = data.topology(name) if is_topology_id(name) else None
        if topo is None:
            return _error_page(request, 404, no_topology(name), title=title)
        return page(request, "topology.html", {"t": topo})

    def cluster_summary(request: Request) -> Response:
        return JSONResponse(data.cluster_summary())

    def topology_summary(request: Request) -> Response:
        return JSONResponse(data.topology_summary())

    def topology(request: Request) -> Response:
        name = _topology_key(request)
        got = data.topology(name, request.query_params.get("window", ":all-time")) if is_topology_id(name) else None
        if got is None:
            return _error(404, no_topology(name))
        got["actionsEnabled"] = enabled
        return JSONResponse(got)

    def refused_action(request: Request, name: str) -> Response | None:
        """What every action checks once its route matched (None: go on): a topology id, actions
        enabled, a request from the UI's own pages, a JSON body."""
        if not is_topology_id(name):
            return _error(404, no_topology(name))
        if not enabled:
            return _error(403, "actions are disabled on this UI (enable them with --ui-actions / ui.actions)")
        # a browser names where a request comes from: only the UI's own pages (or a person
        # typing) may act; curl and the CLI send no Sec-Fetch-Site
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return _error(403, f"actions come from the UI's own pages only (Sec-Fetch-Site: {_shown(site)})")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "send Content-Type: application/json")
        return None

    async def action(request: Request) -> Response:
        name = _topology_key(request)
        op = request.path_params["op"]
        waits = op in ("rebalance", "kill")
        if op not in ("activate", "deactivate", "rebalance", "kill") or (
                "wait" in request.path_params and not waits):
            return _error(404, f"no such action: {_shown(request.url.path)}")
        if (refused := refused_action(request, name)) is not None:
            return refused
        assert actions is not None  # `enabled` says there are some
        try:
            raw = await _body(request)
            try:
                body = json.loads(raw) if raw.strip() else None
            except (ValueError, RecursionError):
                raise ActionRefused(400, "the body is not JSON (or nests too deep)") from None
            wait = _wait(request.path_params["wait"]) if "wait" in request.path_params else None
            workers, executors = _rebalance_options(body) if op == "rebalance" else (None, {})
            message = await run_in_threadpool(
                actions.act, name, op, wait_secs=wait, num_workers=workers, executors=executors or None)
        except ActionRefused as exc:
            return _error(exc.status, str(exc))
        data.wake()
        return JSONResponse({"topologyOperation": op, "topologyId": name, "status": "success",
                             "message": message})

    dumping = threading.Lock()

    async def stacks(request: Request) -> Response:
        return await dump(request, profiling=False)

    async def profile(request: Request) -> Response:
        return await dump(request, profiling=True)

    async def dump(request: Request, *, profiling: bool) -> Response:
        """A worker's stacks or a short profile of it (`squall dump-stacks [--profile S]`)."""
        name, slot = _topology_key(request), request.path_params["slot"]
        text = request.url.path.startswith("/topology/")
        secs = 0.0
        if profiling:
            try:
                secs = float(request.query_params.get("secs", str(PROFILE_SECS)))
                if not 0.1 <= secs <= debugging.MAX_PROFILE_SECS:
                    raise ValueError
            except ValueError:
                return _error(400, f"secs must be a number from 0.1 to {debugging.MAX_PROFILE_SECS:g}")
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return _error(403, f"stack dumps come from the UI's own pages only (Sec-Fetch-Site: {_shown(site)})")
        if not is_topology_id(name):
            return _error(404, no_topology(name))
        if data.state.get_storm(name) is None:
            return _error(404, no_topology(name))
        assignment = data.state.get_assignment(name)
        if assignment is None or slot not in set(assignment.executor_slots.values()):
            return _error(404, f"topology {_shown(name)} has no worker {_shown(slot)}")
        if not dumping.acquire(blocking=False):
            return _error(429, "a stack dump is under way; retry in a moment")
        try:
            got, _ = await run_in_threadpool(debugging.ask, data.state, name,
                                             "profile" if profiling else "stacks", [slot],
                                             seconds=secs, timeout=STACKS_TIMEOUT_SECS)
        finally:
            dumping.release()
        card = got.get(slot)
        if card is None:
            return _error(504, f"worker {_shown(slot)} did not answer within {STACKS_TIMEOUT_SECS:g}s")
        if text:
            return Response(card.answer, media_type="text/plain; charset=utf-8")
        return JSONResponse({"topologyId": name, "worker": slot, "host": card.host, "pid": card.pid,
                             "dump": card.answer})

    def component_view(name: TopologyKey, component: str) -> tuple[int, dict[str, Any]]:
        """Storm UI's component page as data: the component's row of the topology view, its
        workers, and the metrics its tasks registered, asked of those workers through
        ZooKeeper (one question at a time, as stack dumps); (status, body)."""
        topo = data.topology(name) if is_topology_id(name) else None
        if topo is None:
            return 404, {"error": no_topology(name)}
        rows = {**{s["spoutId"]: ("spout", s) for s in topo["spouts"]},
                **{b["boltId"]: ("bolt", b) for b in topo["bolts"]}}
        if component not in rows:
            known = ", ".join(sorted(rows))
            return 404, {"error": f"topology {_shown(name)} has no component {_shown(component)} (it has {known})"}
        kind, row = rows[component]
        out: dict[str, Any] = {"topologyId": name, "name": topo["name"], "componentId": component,
                               "componentType": kind, **{k: v for k, v in row.items() if k not in ("spoutId", "boltId")},
                               "workers": [w for w in topo["workers"] if component in w["components"]],
                               "userMetrics": [], "userMetricsMissing": []}
        try:
            slots = list(debugging.resolve(data.state, name, component))
        except debugging.TargetError as exc:  # not assigned yet: no worker to ask
            out["userMetricsNote"] = str(exc)
            return 200, out
        if not dumping.acquire(timeout=STACKS_TIMEOUT_SECS):
            out["userMetricsNote"] = "a stack dump or profile is under way; reload in a moment"
            return 200, out
        try:
            got, missing = debugging.ask(data.state, name, "metrics", slots, timeout=METRICS_TIMEOUT_SECS)
        finally:
            dumping.release()
        for slot, card in sorted(got.items()):
            try:
                answered = json.loads(card.answer)
            except ValueError:
                missing.append(slot)
                continue
            out["userMetrics"] += [dict(r, worker=slot) for r in answered
                                   if isinstance(r, dict) and r.get("component") == component]
        out["userMetricsMissing"] = sorted(missing)
        return 200, out

    async def component(request: Request) -> Response:
        status, got = await run_in_threadpool(component_view, _topology_key(request),
                                              request.path_params["component"])
        if request.url.path.startswith("/api/"):
            return JSONResponse(got) if status == 200 else _error(status, got["error"])
        if status != 200:
            return _error_page(request, status, got["error"], title=title)
        return page(request, "component.html", {"c": got})

    def events(request: Request) -> Response:
        """The tuples the event inspector sampled (`squall events`), oldest first."""
        name = _topology_key(request)
        if not is_topology_id(name) or data.state.get_storm(name) is None:
            return _error(404, no_topology(name))
        try:
            tail = int(request.query_params.get("n", "100"))
            if not 0 <= tail <= sampling.KEPT:
                raise ValueError
        except ValueError:
            return _error(400, f"n must be a whole number from 0 to {sampling.KEPT}")
        try:
            component = request.query_params.get("component") or None
            rows = inspected(lambda: eventlog.sampled(data.state, name, component, tail))
        except VerbError as exc:
            return _error(404, str(exc))
        return JSONResponse({"topologyId": name, "events": rows})

    async def debug(request: Request) -> Response:
        """Storm UI's debug switch: POST /api/v1/topology/{id}[/component/{component}]/debug/
        {enable|disable}/{pct}[?secs=S]: sample that share of the emits (squall debug)."""
        name, op, spct = _topology_key(request), request.path_params["op"], request.path_params["pct"]
        component = request.path_params.get("component")
        if op not in ("enable", "disable"):
            return _error(404, f"no such action: {_shown(request.url.path)}")
        if (refused := refused_action(request, name)) is not None:
            return refused
        try:
            pct = float(spct) if op == "enable" else None
            secs = float(request.query_params.get("secs", str(DEBUG_SECS)))
        except ValueError:
            return _error(400, f"the sample percentage and secs must be numbers (got {_shown(spct)})")
        try:
            message = await run_in_threadpool(inspected, lambda: eventlog.set_sampling(
                data.state, name, component, pct, secs if secs > 0 else None, time.time()))
        except VerbError as exc:
            return _error(404 if "no topology" in str(exc) or "no component" in str(exc) else 400, str(exc))
        return JSONResponse({"topologyOperation": "debug", "topologyId": name, "status": "success",
                             "message": message})

    routes = [
        Route("/", index),
        Route("/api/v1/topology/{id}/events", events),
        Route("/api/v1/topology/{id}/debug/{op}/{pct}", debug, methods=["POST"]),
        Route("/api/v1/topology/{id}/component/{component}/debug/{op}/{pct}", debug, methods=["POST"]),
        Route("/topology/{id}/stacks/{slot}", stacks),
        Route("/api/v1/topology/{id}/profiling/dumpjstack/{slot}", stacks),
        Route("/topology/{id}/profile/{slot}", profile),
        Route("/api/v1/topology/{id}/profiling/profile/{slot}", profile),
        Route("/topology/{id}/component/{component}", component),
        Route("/api/v1/topology/{id}/component/{component}", component),
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

    async def unreachable(request: Request, exc: Exception) -> Response:
        return _refused(request, f"ZooKeeper is unreachable ({type(exc).__name__}); retry in a moment")

    async def unreadable(request: Request, exc: Exception) -> Response:
        # a node this Squall cannot read: one line in the log, not a traceback per request
        log.error("UI: %s", exc)
        message = f"cannot read the cluster's state: {exc}"
        if request.url.path.startswith("/api/"):
            return _error(500, message)
        return _error_page(request, 500, message, title=title)

    handlers: dict[Any, Any] = {NoAuthError: no_auth, StateError: unreadable}
    handlers.update(dict.fromkeys(CONNECTION_ERRORS, unreachable))
    return Starlette(routes=routes, exception_handlers=handlers, middleware=[Middleware(SecurityHeaders)])


class UiServer:
    """uvicorn serving `app` on a thread, on `host` (loopback by default); `port` 0 picks one.
    On a loopback address it answers only requests that name a loopback host (`LoopbackHostOnly`)."""

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
        app: ASGIApp = LoopbackHostOnly(self.app) if _is_loopback_name(self.host) else self.app
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
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
