"""The operator's readiness (`/readyz`: the API server answered lately and ZooKeeper is
connected) and liveness (`/healthz`: the leader's reconcile loop still turns). `readiness` and
`liveness` are the pure verdicts; `Health` keeps the inputs, with an injected clock.

Readiness takes a replica out of a Service and is no reason to restart it (an API server or
ZooKeeper outage is not cured by a restart); liveness is: a loop that stopped turning (a call that
hangs past its timeouts, a deadlock) restarts the operator, which resumes from ZooKeeper and the
resources, and a standby takes the Lease meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def readiness(now: float, api_ok_at: float | None, api_window: float, zk_connected: bool | None,
              zk_what: str = "ZooKeeper") -> tuple[bool, str]:
    """Whether the operator is Ready: it reached the API server within `api_window` seconds and
    it is connected to ZooKeeper (`zk_connected`; None: not known yet, which is not ready)."""
    problems = []
    if api_ok_at is None:
        problems.append("the API server has not answered yet")
    elif now - api_ok_at > api_window:
        problems.append(f"no answer from the API server for {now - api_ok_at:.0f}s")
    if not zk_connected:
        problems.append(f"{zk_what} is not reachable" if zk_connected is False else f"not connected to {zk_what} yet")
    return (not problems, "; ".join(problems) or "ok")


def liveness(now: float, loop_at: float | None, limit: float) -> tuple[bool, str]:
    """Whether the operator is alive: the reconcile loop began a round within `limit` seconds
    (`loop_at`, the latest start), so a round that hangs makes it dead once the limit passes.
    `loop_at` None: no loop yet (a standby waiting for the Lease, or a leader still listing the
    Nodes), alive. A round that fails or finds ZooKeeper unreachable still counts as a turn: only
    a loop that stopped turning is dead."""
    if loop_at is None:
        return (True, "ok (no reconcile loop: not the leader yet)")
    idle = now - loop_at
    if idle > limit:
        return (False, f"the reconcile loop has not begun a round for {idle:.0f}s (limit {limit:g}s): "
                       "a round hangs")
    return (True, "ok")


class Health:
    """What the operator's /readyz reports: the API server answered recently (the Lease, the
    Node list) and ZooKeeper is connected (the leader's session; a standby, which has none,
    probes a TCP connection to the ensemble); and what /healthz reports: the reconcile loop
    began a round within `loop_limit` seconds (`KubeNimbus.run_once` calls `loop_turned`)."""

    def __init__(self, zookeeper: str, api_window: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, loop_limit: float = 120.0) -> None:
        self.zookeeper = zookeeper
        self.api_window = api_window
        self.clock = clock
        self.loop_limit = loop_limit
        self.api_ok_at: float | None = None
        # when the leader's reconcile loop last began a round (None: no loop yet)
        self.loop_at: float | None = None
        # the leader's kazoo client (has `.connected`), once it has one
        self.zk_client: Any = None
        self._probe: tuple[float, bool] | None = None

    def api_ok(self) -> None:
        self.api_ok_at = self.clock()

    def loop_turned(self) -> None:
        self.loop_at = self.clock()

    def alive(self) -> tuple[bool, str]:
        return liveness(self.clock(), self.loop_at, self.loop_limit)

    def zk_connected(self) -> bool:
        if self.zk_client is not None:
            return bool(self.zk_client.connected)
        now = self.clock()
        if self._probe is None or now - self._probe[0] > 5:
            self._probe = (now, _tcp_reachable(self.zookeeper))
        return self._probe[1]

    def ready(self) -> tuple[bool, str]:
        return readiness(self.clock(), self.api_ok_at, self.api_window, self.zk_connected(),
                         f"ZooKeeper ({self.zookeeper})")


def _tcp_reachable(connect: str, timeout: float = 1.0) -> bool:
    import socket

    for hostport in connect.split("/", 1)[0].split(","):
        host, _, port = hostport.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port or 2181)), timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


__all__ = ["Health", "liveness", "readiness"]
