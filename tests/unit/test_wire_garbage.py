"""Garbage frames leave no garbage behind: whatever a receiver refuses is freed by
reference counting as soon as it is dropped, without waiting for the cyclic collector, which a
worker runs rarely (squall.gcpolicy)."""

from __future__ import annotations

import gc
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import pytest

from squall import wire


@contextmanager
def collector_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def cyclic_garbage(work: Callable[[], None]) -> int:
    """How many objects `work` leaves in unreachable reference cycles."""
    with collector_off():
        gc.collect()
        work()
        return gc.collect()


def frames(seed: int = 31) -> list[bytes]:
    """Frames of every kind a receiver refuses: random bytes, truncated and mis-shaped frames,
    a frame with one tuple of an unknown ext type among good ones."""
    rng = random.Random(seed)
    good = msgpack.packb([[1, 2, "default", [rng.randrange(10**6)], None] for _ in range(5)])
    out = [rng.randbytes(rng.randrange(1, 300)) for _ in range(200)]
    out += [good[: rng.randrange(1, len(good))] for _ in range(100)]
    out += [msgpack.packb({"not": "a list"}), msgpack.packb(7), good + b"\x00"]
    out.append(msgpack.packb([[1, 2, "default", [msgpack.ExtType(99, b"?")], None], [1, 2, "s", [1], None]]))
    out.append(msgpack.packb([[1, 2, "default", [msgpack.ExtType(99, b"?")], None]]))
    return out


def unpack_all(unpack: Callable[[bytes], Any], batch: list[bytes]) -> Callable[[], None]:
    def work() -> None:
        for frame in batch:
            try:
                unpack(frame)
            except wire.WireError:
                pass

    return work


@pytest.mark.parametrize("unpack", [wire.unpack_data, wire.unpack_control], ids=["data", "control"])
def test_refused_frames_leave_no_reference_cycles(unpack: Callable[[bytes], Any]) -> None:
    assert cyclic_garbage(unpack_all(unpack, frames())) == 0


def test_a_refused_frame_is_freed_when_its_error_is_dropped() -> None:
    # the frame's bytes are not kept by anything once the WireError is gone (a large frame of
    # garbage would otherwise stay resident until a full collection)
    frame = b"\xdc\xff\xff" + bytes(1 << 20)  # an array header of 65535 items, then nothing decodable
    before = len(gc.get_objects())
    assert cyclic_garbage(unpack_all(wire.unpack_data, [frame] * 20)) == 0
    assert len(gc.get_objects()) - before < 50


def tuple_of(size: int, dest: int = 1) -> list[Any]:
    return [dest, 2, "default", [b"x" * size], None]


def test_pack_data_keeps_frames_under_the_limit() -> None:
    items = [tuple_of(100), tuple_of(5000), tuple_of(200), tuple_of(3000)]
    whole, bad = wire.pack_data(items, limit=1 << 20)
    assert bad == [] and whole is not None
    frame, bad = wire.pack_data(items, limit=4000)
    assert frame is not None and len(frame) <= 4000
    assert [item for item, _ in bad] == [items[1]]  # the largest left, the rest fit
    assert "maximum frame size of 4000 bytes (worker.max.frame.bytes)" in str(bad[0][1])
    assert wire.unpack_data(frame) == [items[0], items[2], items[3]]


def test_pack_data_hands_back_every_tuple_that_cannot_fit() -> None:
    items = [tuple_of(5000), tuple_of(6000)]
    frame, bad = wire.pack_data(items, limit=1000)
    assert frame is None
    assert sorted(len(item[3][0]) for item, _ in bad) == [5000, 6000]
