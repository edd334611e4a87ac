"""Ports for servers this machine starts itself, free now and unlikely to be taken before the
server binds them."""

from __future__ import annotations

import random
import socket

__all__ = ["free_ports"]

# ports are taken below this when the kernel's ephemeral range cannot be read
_EPHEMERAL_FLOOR = 32768
# and never below this (well-known and registered services: ZooKeeper 2181, Kafka 9092, ...)
_SLOT_PORT_FLOOR = 20000
# nor from Kubernetes' NodePort range (30000-32767), which kube-proxy holds on a node
_NODE_PORT_FLOOR = 30000


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands out for bind(0) and connect()."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_FLOOR


def free_ports(n: int, host: str = "127.0.0.1", rng: random.Random | None = None) -> list[int]:
    """`n` ports free on `host` now, for a server started next (the local cluster's slots, the
    embedded ZooKeeper, a test broker).

    They are chosen from 20000 up to the kernel's ephemeral range or Kubernetes' NodePort range,
    whichever starts lower, like Storm's 6700-6703 outside both: a port from
    bind(0) is released between this probe and the worker's own bind, and in that gap any
    process's bind(0) or outgoing connection may be given it (a CI run lost a test to a slot port
    held for over 60 s). Below the range only an explicit bind can take it. Where the range
    starts too low to leave room, the kernel chooses, as before."""
    rng = rng or random.Random()
    ceiling = min(_ephemeral_floor(), _NODE_PORT_FLOOR)
    socks: list[socket.socket] = []
    try:
        if ceiling - _SLOT_PORT_FLOOR >= max(4 * n, 1000):
            span = ceiling - _SLOT_PORT_FLOOR
            start = rng.randrange(span)
            for i in range(span):
                if len(socks) == n:
                    break
                s = socket.socket()
                try:
                    s.bind((host, _SLOT_PORT_FLOOR + (start + i) % span))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
        while len(socks) < n:
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
