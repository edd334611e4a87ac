"""A worker binding its slot port while the slot's previous worker still holds it (pods of one
node sharing its network: the replacement of a deleted pod starts while the old one terminates):
it binds again until the port is free, for a bounded time. Real zmq sockets on loopback."""

from __future__ import annotations

import socket
import threading

import pytest
import zmq

from squall.worker.runtime import _while_in_use


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bind_waits_for_the_previous_worker_to_release_the_port() -> None:
    ctx = zmq.Context()
    port = _free_port()
    old, new = ctx.socket(zmq.PULL), ctx.socket(zmq.PULL)
    try:
        old.bind(f"tcp://127.0.0.1:{port}")
        released = threading.Timer(0.3, old.close, kwargs={"linger": 0})
        released.start()
        _while_in_use(lambda: new.bind(f"tcp://127.0.0.1:{port}"), "slot port", threading.Event(), limit=10)
        released.join()
        assert new.getsockopt(zmq.LAST_ENDPOINT).decode() == f"tcp://127.0.0.1:{port}"
    finally:
        new.close(0)
        old.close(0)
        ctx.term()


def test_bind_gives_up_after_the_limit_or_when_stopped() -> None:
    ctx = zmq.Context()
    port = _free_port()
    old, new = ctx.socket(zmq.PULL), ctx.socket(zmq.PULL)
    try:
        old.bind(f"tcp://127.0.0.1:{port}")
        with pytest.raises(zmq.ZMQError) as err:
            _while_in_use(lambda: new.bind(f"tcp://127.0.0.1:{port}"), "slot port", threading.Event(), limit=0.3)
        assert err.value.errno == zmq.EADDRINUSE
        stop = threading.Event()
        stop.set()
        with pytest.raises(zmq.ZMQError):
            _while_in_use(lambda: new.bind(f"tcp://127.0.0.1:{port}"), "slot port", stop, limit=30)
        # anything but "in use" is raised at once
        with pytest.raises(zmq.ZMQError):
            _while_in_use(lambda: new.bind("tcp://256.0.0.1:1"), "slot port", threading.Event(), limit=30)
    finally:
        new.close(0)
        old.close(0)
        ctx.term()
