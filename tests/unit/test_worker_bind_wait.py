"""A worker binding its slot port while the slot's previous worker still holds it (pods of one
node sharing its network: the replacement of a deleted pod starts while the old one terminates):
it binds again until the port is free, for a bounded time. Real zmq sockets on loopback."""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Iterator

import pytest
import zmq

from squall.worker.runtime import _while_in_use


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class HeldSlot:
    old: zmq.Socket[bytes]  # the previous worker, bound to the slot's port
    new: zmq.Socket[bytes]  # the replacement, not bound yet
    endpoint: str

    def bind_new(self) -> None:
        self.new.bind(self.endpoint)


@pytest.fixture
def held() -> Iterator[HeldSlot]:
    ctx = zmq.Context()
    slot = HeldSlot(ctx.socket(zmq.PULL), ctx.socket(zmq.PULL), f"tcp://127.0.0.1:{_free_port()}")
    try:
        slot.old.bind(slot.endpoint)
        yield slot
    finally:
        slot.new.close(0)
        slot.old.close(0)
        ctx.term()


def test_bind_waits_for_the_previous_worker_to_release_the_port(held: HeldSlot) -> None:
    released = threading.Timer(0.3, held.old.close, kwargs={"linger": 0})
    released.start()
    _while_in_use(held.bind_new, "slot port", threading.Event(), limit=10)
    released.join()
    assert held.new.getsockopt(zmq.LAST_ENDPOINT).decode() == held.endpoint


def test_bind_gives_up_after_the_limit_or_when_stopped(held: HeldSlot) -> None:
    with pytest.raises(zmq.ZMQError) as err:
        _while_in_use(held.bind_new, "slot port", threading.Event(), limit=0.3)
    assert err.value.errno == zmq.EADDRINUSE
    stop = threading.Event()
    stop.set()
    with pytest.raises(zmq.ZMQError):
        _while_in_use(held.bind_new, "slot port", stop, limit=30)
    # anything but "in use" is raised at once
    with pytest.raises(zmq.ZMQError):
        _while_in_use(lambda: held.new.bind("tcp://256.0.0.1:1"), "slot port", threading.Event(), limit=30)
