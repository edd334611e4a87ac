"""squall.wire: msgpack data and control frames, and the shape checks receivers apply."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from squall import wire
from squall.wire import WireError, check_control, check_tuple, pack, unpack_control, unpack_data

pytestmark = pytest.mark.unit

MAX_ROOT = 2**62 - 1


def test_kinds() -> None:
    assert (wire.INIT, wire.ACK, wire.FAIL, wire.DONE) == (0, 1, 2, 3)


def test_data_frame_round_trip() -> None:
    items = [
        [3, 1, "default", ["hello", 1, 2.5, None, True, b"\x00\xff"], None],
        [4, 1, "default", [], {MAX_ROOT: MAX_ROOT, 1: 0}],
        [5, 2, "side", [["nested", [1, 2]], {"k": "v"}], {0: 2**61}],
        [6, 2, "日本語", ["é"], {}],
    ]
    frame = pack(items)
    assert isinstance(frame, bytes)
    out = unpack_data(frame)
    assert out == items
    for it in out:
        assert check_tuple(it)
    # anchors keep int keys (roots) and int values (edges)
    assert out[1][4] == {MAX_ROOT: MAX_ROOT, 1: 0}
    assert all(type(k) is int for k in out[1][4])
    # bytes stay bytes, str stays str
    assert type(out[0][3][5]) is bytes and type(out[0][3][0]) is str


def test_tuples_become_lists() -> None:
    [item] = unpack_data(pack([[1, 2, "default", [("a", 1)], None]]))
    assert item[3] == [["a", 1]]


def test_empty_frames() -> None:
    assert unpack_data(pack([])) == []
    assert unpack_control(pack([])) == []


def test_control_frame_round_trip() -> None:
    items = [
        [wire.INIT, 1, MAX_ROOT, MAX_ROOT, 9],
        [wire.ACK, 2, 0, 12345, 0],
        [wire.FAIL, 1, 2**40, 0, 0],
        [wire.DONE, 9, MAX_ROOT, 1, 0],
        [wire.DONE, 9, 1, 0, 0],
    ]
    out = unpack_control(pack(items))
    assert out == items
    assert all(check_control(it) for it in out)
    assert all(type(x) is int for it in out for x in it)


@pytest.mark.parametrize(
    "frame",
    [
        b"\xc1",  # a byte msgpack never uses
        b"\x95\x01\x02",  # a list of 5 cut short
        b"\x92\x01\x02\x03",  # extra data after the list
        b"\xdd\xff\xff\xff\xff",  # an array claiming 4 G items
        b"",
    ],
)
def test_garbage_bytes_raise_wire_error_naming_the_size(frame: bytes) -> None:
    with pytest.raises(WireError, match=rf"undecodable data frame of {len(frame)} bytes"):
        unpack_data(frame)
    with pytest.raises(WireError, match=rf"undecodable control frame of {len(frame)} bytes"):
        unpack_control(frame)


def test_wire_error_is_a_value_error() -> None:
    assert issubclass(WireError, ValueError)


@pytest.mark.parametrize(
    ("payload", "type_name"),
    [({1: 2}, "dict"), (7, "int"), ("s", "str"), (None, "NoneType"), (b"x", "bytes")],
)
def test_a_frame_that_is_not_a_list_raises(payload: Any, type_name: str) -> None:
    frame = msgpack.packb(payload, use_bin_type=True)
    with pytest.raises(WireError, match=rf"data frame is a {type_name}, not a list"):
        unpack_data(frame)
    with pytest.raises(WireError, match=rf"control frame is a {type_name}, not a list"):
        unpack_control(frame)


# --------------------------------------------------------------------------------------------
# shape checks
# --------------------------------------------------------------------------------------------

GOOD_TUPLE = [3, 1, "default", ["a", 1], {5: 6}]


@pytest.mark.parametrize(
    "item",
    [
        GOOD_TUPLE,
        [3, 1, "default", [], None],
        [0, 0, "", [None], {}],
        [-1, 2**62, "s", [[1], {"a": 1}], {MAX_ROOT: MAX_ROOT}],
    ],
)
def test_check_tuple_accepts_good_tuples(item: list[Any]) -> None:
    assert check_tuple(item)


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(None, id="none"),
        pytest.param((3, 1, "default", ["a"], None), id="a-tuple-not-a-list"),
        pytest.param({"dest": 3}, id="dict"),
        pytest.param("3,1,default", id="str"),
        pytest.param(7, id="int"),
        pytest.param([3, 1, "default", ["a"]], id="too-short"),
        pytest.param([*GOOD_TUPLE, 0], id="too-long"),
        pytest.param([], id="empty"),
        pytest.param(["3", 1, "default", ["a"], None], id="dest-str"),
        pytest.param([3.0, 1, "default", ["a"], None], id="dest-float"),
        pytest.param([True, 1, "default", ["a"], None], id="dest-bool"),
        pytest.param([None, 1, "default", ["a"], None], id="dest-none"),
        pytest.param([3, "1", "default", ["a"], None], id="src-str"),
        pytest.param([3, False, "default", ["a"], None], id="src-bool"),
        pytest.param([3, 1, b"default", ["a"], None], id="stream-bytes"),
        pytest.param([3, 1, None, ["a"], None], id="stream-none"),
        pytest.param([3, 1, 0, ["a"], None], id="stream-int"),
        pytest.param([3, 1, "default", "a", None], id="values-str"),
        pytest.param([3, 1, "default", ("a",), None], id="values-tuple"),
        pytest.param([3, 1, "default", {"a": 1}, None], id="values-dict"),
        pytest.param([3, 1, "default", None, None], id="values-none"),
        pytest.param([3, 1, "default", ["a"], []], id="anchors-list"),
        pytest.param([3, 1, "default", ["a"], 5], id="anchors-int"),
        pytest.param([3, 1, "default", ["a"], "x"], id="anchors-str"),
        pytest.param([3, 1, "default", ["a"], False], id="anchors-false"),
        pytest.param([3, 1, "default", ["a"], {"r": 1}], id="anchor-root-str"),
        pytest.param([3, 1, "default", ["a"], {1: "e"}], id="anchor-edge-str"),
        pytest.param([3, 1, "default", ["a"], {1: 2.0}], id="anchor-edge-float"),
        pytest.param([3, 1, "default", ["a"], {1: None}], id="anchor-edge-none"),
        pytest.param([3, 1, "default", ["a"], {True: 1}], id="anchor-root-bool"),
        pytest.param([3, 1, "default", ["a"], {1: 2, 3: [4]}], id="anchor-one-bad-of-two"),
    ],
)
def test_check_tuple_rejects_bad_shapes(item: Any) -> None:
    assert not check_tuple(item)


@pytest.mark.parametrize(
    "item",
    [[0, 1, 2, 3, 4], [wire.DONE, 9, MAX_ROOT, 1, 0], [-1, -1, -1, -1, -1], [0, 0, 0, 0, 2**63]],
)
def test_check_control_accepts_good_items(item: list[int]) -> None:
    assert check_control(item)


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(None, id="none"),
        pytest.param((0, 1, 2, 3, 4), id="a-tuple"),
        pytest.param({0: 1}, id="dict"),
        pytest.param(5, id="int"),
        pytest.param([0, 1, 2, 3], id="too-short"),
        pytest.param([0, 1, 2, 3, 4, 5], id="too-long"),
        pytest.param([], id="empty"),
        pytest.param([0, 1, 2, 3, "4"], id="str"),
        pytest.param([0, 1, 2.0, 3, 4], id="float"),
        pytest.param([0, True, 2, 3, 4], id="bool"),
        pytest.param([0, 1, None, 3, 4], id="none-inside"),
        pytest.param([0, 1, [2], 3, 4], id="list-inside"),
        pytest.param([0, 1, b"2", 3, 4], id="bytes-inside"),
    ],
)
def test_check_control_rejects_bad_shapes(item: Any) -> None:
    assert not check_control(item)


def test_decoded_bad_items_are_caught_by_the_checks() -> None:
    # a well-formed frame whose items are not: decoding succeeds, the checks reject per item
    frame = pack([GOOD_TUPLE, [1, 2, 3], "junk", [3, 1, "default", "not-a-list", None]])
    items = unpack_data(frame)
    assert [check_tuple(it) for it in items] == [True, False, False, False]
    ctrl = unpack_control(pack([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5.5], [1, 2]]))
    assert [check_control(it) for it in ctrl] == [True, False, False]
