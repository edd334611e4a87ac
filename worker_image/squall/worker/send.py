"""Sending to peers: the engine loop's and isolated executors' direct senders, the transfer
threads' send queues, frames packed under the receivers' maximum, and tuples the wire cannot
encode reported and failed. Functions of the worker's state.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from squall import wire
from squall.models.cluster import WorkerSlot
from squall.worker import acking, status
from squall.worker.transport import (
    FRAME_OVERHEAD,
    DirectSender,
    PeerQueues,
    run_transfer,
)
from squall.worker.workerstate import WorkerState

log = logging.getLogger("squall.worker")


def address_of(w: WorkerState, port_attr: str) -> Callable[[WorkerSlot], str | None]:
    def of(slot: WorkerSlot) -> str | None:
        ep = w.endpoints.get(slot)
        return None if ep is None else f"tcp://{ep.host}:{getattr(ep, port_attr)}"

    return of


def assigned(w: WorkerState, slot: WorkerSlot) -> bool:
    return slot in w.routing.slots


def pack(w: WorkerState, items: list[Any]) -> bytes | None:
    # under the receivers' maximum by what zmq adds to a frame (CURVE's box, its headers)
    frame, bad = wire.pack_data(items, w.max_frame - FRAME_OVERHEAD)
    if bad:
        unsendable(w, bad)
    return frame


def count_dropped(w: WorkerState, n: int) -> None:
    w.dropped += n


def direct_sender(w: WorkerState) -> DirectSender:
    """An isolated executor's own sockets to its peers' data ports (transport.DirectSender)."""
    return DirectSender(w.zmq, address_of(w, "port"), functools.partial(assigned, w), functools.partial(pack, w),
                        functools.partial(count_dropped, w), w.sealer.client if w.sealer is not None else None)


def shared_sender(w: WorkerState) -> DirectSender:
    """The engine loop's sockets to its peers' data ports, shared by the executors it steps:
    one frame per peer per turn with all their batches for it (transport.DirectSender)."""
    return DirectSender(w.zmq, address_of(w, "port"), functools.partial(assigned, w), functools.partial(pack, w),
                        functools.partial(count_dropped, w), w.sealer.client if w.sealer is not None else None,
                        combine=functools.partial(combine, w))


def combine(w: WorkerState, items: list[Any]) -> bytes | None:
    """A frame of several executors' batches, or None when it is not one plain frame (too
    large, or an item the wire cannot encode): then each batch is packed on its own."""
    frame, bad = wire.pack_data(items, w.max_frame - FRAME_OVERHEAD)
    return None if bad else frame


def transfer(w: WorkerState, peers: PeerQueues, port_attr: str, name: str) -> None:
    turns = w.loop_turns

    def turned() -> None:
        turns[name] = time.monotonic()

    run_transfer(w.zmq, peers, address_of(w, port_attr), functools.partial(assigned, w), functools.partial(pack, w),
                 w.stop_event, functools.partial(count_dropped, w), turned,
                 w.sealer.client if w.sealer is not None else None)


def unsendable(w: WorkerState, bad: list[tuple[Any, Exception]]) -> None:
    """Tuples whose values the wire format cannot encode (the rest of their frame was sent):
    each is reported as an error of the component that emitted it, and its trees are failed
    so that their spouts hear `fail` at once rather than a timeout later."""
    plan = w.routing.plan
    n = len(plan.acker_tasks)
    fails: list[list[int]] = []
    for item, exc in bad:
        w.dropped += 1
        if not (type(item) is list and len(item) == 5 and type(item[1]) is int and type(item[2]) is str):
            log.error("worker %s could not encode %r: %s", w.slot.key(), item, exc)  # not a data tuple
            continue
        _dest, src, stream, _values, anchors = item
        comp = plan.task_component.get(src, "?")
        spec = plan.streams.get(comp, {}).get(stream)
        text = wire.unsendable_message(comp, src, stream, list(spec.fields) if spec else [], item, exc)
        w.unsendable += 1
        if w.unsendable <= 10 or w.unsendable % 1000 == 0:
            log.error("%s (%d so far)", text, w.unsendable)
        status.report_error(w, comp, src, text)
        if anchors and n:
            fails.extend([wire.FAIL, plan.acker_tasks[r % n], r, 0, 0] for r in anchors)
    if fails:
        acking.handle_control(w, fails, None)
