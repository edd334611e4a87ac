"""The wire format between workers: msgpack frames holding batches.

Data frame: a list of tuples `[dest_task, src_task, stream, values, anchors]`, where anchors is
`{root_id: edge_id}` or None (untracked). Control frame: a list of `[kind, dest_task, root, val,
extra]` for acker traffic. A frame that does not decode, or whose items have the wrong shape,
raises `WireError`; receivers count and drop it instead of crashing.
"""

from __future__ import annotations

from typing import Any

import msgpack

# control kinds
INIT = 0  # spout -> acker: val = xor of the first edges, extra = spout task
ACK = 1  # bolt -> acker: val = input edge xor the edges it created
FAIL = 2  # bolt -> acker
DONE = 3  # acker -> spout: val = 1 completed, 0 failed


class WireError(ValueError):
    pass


def pack(items: list[Any]) -> bytes:
    frame: bytes = msgpack.packb(items, use_bin_type=True)
    return frame


def unpack_data(frame: bytes) -> list[list[Any]]:
    """Decode a data frame. Items are checked by `check_tuple` where they are dispatched, so
    that the receive loop walks a frame once."""
    try:
        items = msgpack.unpackb(frame, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:
        raise WireError(f"undecodable data frame of {len(frame)} bytes: {exc}") from None
    if type(items) is not list:
        raise WireError(f"data frame is a {type(items).__name__}, not a list of tuples")
    return items


def check_tuple(item: Any) -> bool:
    """Whether a decoded item has the shape of a tuple: [int, int, str, list, dict | None]."""
    return (
        type(item) is list
        and len(item) == 5
        and type(item[0]) is int
        and type(item[1]) is int
        and type(item[2]) is str
        and type(item[3]) is list
        and (
            item[4] is None
            or (type(item[4]) is dict and all(type(k) is int and type(v) is int for k, v in item[4].items()))
        )
    )


def unpack_control(frame: bytes) -> list[list[int]]:
    try:
        items = msgpack.unpackb(frame, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:
        raise WireError(f"undecodable control frame of {len(frame)} bytes: {exc}") from None
    if type(items) is not list:
        raise WireError(f"control frame is a {type(items).__name__}, not a list")
    # items are checked where they are applied (Worker.handle_control), in the same pass
    return items


def check_control(item: Any) -> bool:
    return type(item) is list and len(item) == 5 and all(type(x) is int for x in item)
