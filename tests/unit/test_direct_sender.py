"""squall.worker.transport.DirectSender: an executor's own sockets to its peers, on real zmq
sockets on loopback. A peer that does not read makes the sender keep one pending frame and take
nothing more for it (the caller keeps its batches), everything arrives in the order sent once it
reads again, and a peer that left the assignment has what was held for it dropped and counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from squall import wire
from squall.models.cluster import WorkerSlot
from squall.worker.transport import DirectSender

pytestmark = pytest.mark.unit

PEER = WorkerSlot("n2", 6700)


def pack(items: list[Any]) -> bytes | None:
    return wire.pack_data(items)[0]


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    c: zmq.Context[Any] = zmq.Context()
    yield c
    c.term()


def test_a_slow_peer_holds_one_frame_takes_nothing_more_and_gets_all_in_order(ctx: zmq.Context[Any]) -> None:
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 2)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    addresses: dict[WorkerSlot, str] = {PEER: f"tcp://127.0.0.1:{port}"}
    lost: list[int] = []
    sender = DirectSender(ctx, addresses.get, lambda s: True, pack, lost.append)
    pad = "x" * 100_000  # frames big enough to fill the kernel's buffers quickly
    sent, refused = 0, 0
    for _ in range(2000):
        if sender.send(PEER, [[1, 2, "default", [sent, pad], None]]):
            sent += 1
        else:
            refused += 1
            if refused >= 5:
                break
    assert refused == 5 and PEER in sender.pending, "the peer never filled up"
    assert sender.held() == {PEER: 1}  # what the worker's squall_send_queue_batches adds
    assert 0.0 < sender.fill(PEER) <= 1.0
    assert sender.fill(PEER) == 0.0  # read: the count starts again
    got: list[int] = []
    while len(got) < sent:
        sender.push()
        if pull.poll(2000):
            got.extend(item[3][0] for item in wire.unpack_data(pull.recv()))
        else:
            break
    assert got == list(range(sent)) and not sender.pending and not lost
    assert sender.held() == {}
    sender.close()
    pull.close()


def test_a_peer_that_left_the_assignment_loses_what_was_held_for_it_counted(ctx: zmq.Context[Any]) -> None:
    addresses: dict[WorkerSlot, str] = {}
    assigned = {PEER}
    lost: list[int] = []
    sender = DirectSender(ctx, addresses.get, lambda s: s in assigned, pack, lost.append)
    items = [[1, 2, "default", [i], None] for i in range(3)]
    assert not sender.send(PEER, items)  # not registered yet: the caller keeps them
    assert sender.fill(PEER) == 1.0
    assigned.clear()
    assert sender.send(PEER, items)  # gone: taken, i.e. dropped and counted
    assert lost == [3]
    sender.close()
