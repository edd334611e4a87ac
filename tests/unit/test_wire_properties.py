"""Properties of the wire decoder (hypothesis): whatever bytes arrive on a worker's data or
control port, `unpack_data` / `unpack_control` return a list or raise `WireError`, quickly, and
the shape checks the receive loops apply never raise (docs/reliability.md, "Hostile input")."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.wire import WireError, check_control, check_tuple, pack, unpack_control, unpack_data

pytestmark = pytest.mark.unit

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.integers() | st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)
_tuples = st.lists(st.one_of(
    st.tuples(st.integers(0, 99), st.integers(-1, 99), st.text(max_size=8),
              st.lists(_values, max_size=4),
              st.none() | st.dictionaries(st.integers(0, 2**63), st.integers(0, 2**63), max_size=3)
              ).map(list),
    _values,
), max_size=8)
_controls = st.lists(st.one_of(
    st.lists(st.integers(-1, 2**64), min_size=5, max_size=5),
    _values,
), max_size=8)


def _decode(unpack: Any, frame: bytes) -> None:
    """The property: a list (whose items the shape checks can look at) or WireError."""
    t0 = time.monotonic()
    try:
        items = unpack(frame)
    except WireError:
        return
    finally:
        assert time.monotonic() - t0 < 2
    assert type(items) is list
    for item in items:
        check_tuple(item)
        check_control(item)


def _mutate(frame: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Flip, insert or delete bytes at positions taken modulo the frame's length."""
    data = bytearray(frame)
    for op, pos, byte in edits:
        if not data:
            data.append(byte)
            continue
        i = pos % len(data)
        if op == 0:
            data[i] ^= byte or 1
        elif op == 1:
            data.insert(i, byte)
        else:
            del data[i]
    return bytes(data)


_edits = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2**16), st.integers(0, 255)),
                  min_size=1, max_size=6)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(frame: bytes) -> None:
    _decode(unpack_data, frame)
    _decode(unpack_control, frame)


@settings(max_examples=300, deadline=None)
@given(_tuples, _edits)
def test_mutated_data_frames(items: list[Any], edits: list[tuple[int, int, int]]) -> None:
    frame = pack(items)
    _decode(unpack_data, frame)
    _decode(unpack_data, _mutate(frame, edits))


@settings(max_examples=300, deadline=None)
@given(_controls, _edits)
def test_mutated_control_frames(items: list[Any], edits: list[tuple[int, int, int]]) -> None:
    frame = pack(items)
    _decode(unpack_control, frame)
    _decode(unpack_control, _mutate(frame, edits))


@settings(max_examples=200, deadline=None)
@given(st.integers(-128, 127), st.binary(max_size=40), st.integers(0, 5))
def test_ext_types(code: int, payload: bytes, depth: int) -> None:
    """msgpack ext types, known to squall.serialization or not (negative codes too, which
    msgpack reserves: -1 is its timestamp), nested or not."""
    ext = b"\xc7" + bytes([len(payload)]) + code.to_bytes(1, "big", signed=True) + payload
    value = b"\x91" * depth + ext
    _decode(unpack_data, b"\x91\x95\x01\x01\xa7default\x91" + value + b"\xc0")
    _decode(unpack_control, b"\x91\x95\x01\x01" + value + b"\x00\x00")


@pytest.mark.parametrize("frame", [
    b"\xdd\xff\xff\xff\xff",  # an array that claims 4 billion items
    b"\xdf\xff\xff\xff\xff",  # a map that claims 4 billion pairs
    b"\xdb\xff\xff\xff\xff",  # a string that claims 4 GiB
    b"\x91" * 100_000,  # nested a hundred thousand deep
    b"\xc1",  # the byte msgpack never uses
])
def test_hostile_headers(frame: bytes) -> None:
    _decode(unpack_data, frame)
    _decode(unpack_control, frame)
