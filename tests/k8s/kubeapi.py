"""A small Kubernetes API client on the standard library (http.client + ssl).

Enough for the process kubelet and the tests: JSON requests with a client
certificate, and watches streamed line by line. No third-party package.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        reason = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {reason}")

    @property
    def reason(self) -> str:
        return self.body.get("reason", "") if isinstance(self.body, dict) else ""


@dataclass
class KubeConfig:
    host: str
    port: int
    ca_file: str
    cert_file: str
    key_file: str


class KubeClient:
    """JSON over HTTPS to one API server, one connection per thread."""

    def __init__(self, cfg: KubeConfig, timeout: float = 30.0) -> None:
        self.cfg = cfg
        self.timeout = timeout
        ctx = ssl.create_default_context(cafile=cfg.ca_file)
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._ctx = ctx
        self._local = threading.local()
        self._watch_lock = threading.Lock()
        self._watches: set[http.client.HTTPSConnection] = set()

    def _conn(self, timeout: float | None = None, fresh: bool = False) -> http.client.HTTPSConnection:
        if fresh:
            return http.client.HTTPSConnection(
                self.cfg.host, self.cfg.port, context=self._ctx, timeout=timeout
            )
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self.cfg.host, self.cfg.port, context=self._ctx, timeout=self.timeout
            )
            self._local.conn = conn
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        if params:
            path = path + "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 1:
                    raise
        try:
            payload: Any = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode(errors="replace")
        if resp.status >= 400:
            raise ApiError(resp.status, payload, method, path)
        return payload

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def replace(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def delete(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("DELETE", path, body, params=params or None)

    def patch(self, path: str, body: Any, kind: str = "strategic") -> Any:
        ct = {
            "strategic": "application/strategic-merge-patch+json",
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        return self.request("PATCH", path, body, content_type=ct)

    def watch(
        self,
        path: str,
        resource_version: str = "",
        timeout_seconds: int = 60,
        stop: threading.Event | None = None,
        **params: Any,
    ) -> Iterator[dict[str, Any]]:
        """Yields watch events ({"type", "object"}) until the server ends the
        watch (timeout_seconds), `stop` is set (checked between events), or
        close_watches() is called."""
        q = dict(params)
        q.update(watch="true", allowWatchBookmarks="true", timeoutSeconds=str(timeout_seconds))
        if resource_version:
            q["resourceVersion"] = resource_version
        conn = self._conn(timeout=timeout_seconds + 15, fresh=True)
        with self._watch_lock:
            self._watches.add(conn)
        try:
            if stop is not None and stop.is_set():
                return
            conn.request("GET", path + "?" + urllib.parse.urlencode(q), headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 400:
                raw = resp.read()
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                raise ApiError(resp.status, body, "WATCH", path)
            while stop is None or not stop.is_set():
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        except (OSError, http.client.HTTPException, ValueError):
            if stop is not None and stop.is_set():
                return
            raise
        finally:
            with self._watch_lock:
                self._watches.discard(conn)
            conn.close()

    def close_watches(self) -> None:
        """Ends every watch in progress (from any thread)."""
        with self._watch_lock:
            conns = list(self._watches)
        for c in conns:
            try:
                if c.sock is not None:
                    c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def load_kubeconfig(path: str) -> KubeConfig:
    """Reads the kubeconfig that tests/k8s/cluster.py writes (file paths, not
    inline data)."""
    import yaml

    with open(path) as f:
        kc = yaml.safe_load(f)
    ctx_name = kc["current-context"]
    ctx = next(c["context"] for c in kc["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
    u = urllib.parse.urlparse(cluster["server"])
    return KubeConfig(
        host=u.hostname or "127.0.0.1",
        port=u.port or 443,
        ca_file=cluster["certificate-authority"],
        cert_file=user["client-certificate"],
        key_file=user["client-key"],
    )
