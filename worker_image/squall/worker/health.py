"""A worker's HTTP endpoint: `/readyz`, `/healthz` and `/metrics` (see docs/reliability.md).

Readiness is the truth peers depend on: the worker is ready only while its ZooKeeper session is
connected, its endpoint node exists and is owned by that session (peers find it there), its
assignment is loaded with this slot in it, and its receive and transfer loops are alive and
turning. Liveness asks less: the process's loops are alive and turning (a worker cut off from
ZooKeeper is not ready, but restarting it would not help). Both answer `ok` or one line per
failed check, so `kubectl describe pod` says why.

The checks are pure functions of a `Probe` (plain values, an explicit `now`); the server is one
thread serving one request at a time (a probe or a scrape takes milliseconds; a client that
stalls is cut off after `REQUEST_TIMEOUT_SECS`), stopped with the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from squall.worker.threads import NamedThread

log = logging.getLogger("squall.worker.health")

# a loop that has not turned for this long makes the worker not ready (they turn every 0.1 s idle)
STALE_READY_SECS = 10.0
# ... and not alive: the kubelet restarts it after the liveness probe's failure threshold
STALE_LIVE_SECS = 60.0
REQUEST_TIMEOUT_SECS = 5.0


@dataclass(frozen=True)
class Probe:
    """What the checks look at, read from a worker at one moment.

    `endpoint`: whether ZooKeeper holds this worker's endpoint, owned by the current session
    (None: not asked, because the session is not connected; `zk_error` says why an asked
    question got no answer). `loops`: name -> when that loop
    last turned (monotonic seconds), for every thread that must stay alive; `dead`: the names of
    threads that exited."""

    zk_connected: bool
    endpoint: bool | None
    assignment_loaded: bool
    zk_error: str = ""
    loops: Mapping[str, float] = field(default_factory=dict)
    dead: Sequence[str] = ()


def _loop_problems(probe: Probe, now: float, stale_after: float) -> list[str]:
    out = [f"thread {name}: not running" for name in sorted(probe.dead)]
    for name, last in sorted(probe.loops.items()):
        if name not in probe.dead and now - last > stale_after:
            out.append(f"thread {name}: stuck for {now - last:.0f}s")
    return out


def readiness_problems(probe: Probe, now: float, stale_after: float = STALE_READY_SECS) -> list[str]:
    """Why the worker is not ready; empty when it is."""
    out: list[str] = []
    if not probe.zk_connected:
        out.append("zookeeper: session not connected (peers cannot find this worker's endpoint)")
    elif probe.zk_error:
        out.append(f"zookeeper: could not check this worker's endpoint: {probe.zk_error}")
    elif probe.endpoint is False:
        out.append("zookeeper: this worker's endpoint is not registered in the current session")
    if not probe.assignment_loaded:
        out.append("assignment: not loaded, or this slot is not in it")
    return out + _loop_problems(probe, now, stale_after)


def liveness_problems(probe: Probe, now: float, stale_after: float = STALE_LIVE_SECS) -> list[str]:
    """Why the worker's process should be restarted; empty when it should not."""
    return _loop_problems(probe, now, stale_after)


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    timeout = REQUEST_TIMEOUT_SECS
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                status, ctype, body = self.server.metrics(self.headers.get("Accept", ""))
            elif path in ("/readyz", "/healthz"):
                problems = self.server.ready() if path == "/readyz" else self.server.alive()
                status = 503 if problems else 200
                ctype, body = "text/plain; charset=utf-8", ("\n".join(problems) or "ok").encode() + b"\n"
            else:
                status, ctype, body = 404, "text/plain; charset=utf-8", b"not found: /readyz, /healthz, /metrics\n"
        except Exception as exc:  # a check that raised is a failed check, never a dead server
            log.exception("health endpoint %s failed", path)
            status, ctype, body = 500, "text/plain; charset=utf-8", f"{path}: {exc!r}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        pass  # probes every few seconds would flood the worker's log


class HealthServer(HTTPServer):
    """Serves `/readyz`, `/healthz` and `/metrics` on (host, port) from one thread.

    `ready`/`alive` return the failed checks (empty: fine); `metrics(accept)` returns
    (status, content type, body). Port 0 picks a free port (`port` says which)."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: Callable[[], list[str]],
        alive: Callable[[], list[str]],
        metrics: Callable[[str], tuple[int, str, bytes]],
    ) -> None:
        super().__init__((host, port), _Handler)
        self.ready = ready
        self.alive = alive
        self.metrics = metrics
        self.port: int = self.server_address[1]
        self._thread = NamedThread(target=self.serve_forever, args=(0.2,), name="health-http", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.shutdown()
            self._thread.join(5)
        self.server_close()
