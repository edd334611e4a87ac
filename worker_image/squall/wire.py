"""The wire format between workers: msgpack frames holding batches.

Data frame: a list of tuples `[dest_task, src_task, stream, values, anchors]`, where anchors is
`{root_id: edge_id}` or None (untracked). Control frame: a list of `[kind, dest_task, root, val,
extra]` for acker traffic, backpressure signals and load announcements. A frame that does not decode, or whose items have the wrong shape,
raises `WireError`; receivers count and drop it instead of crashing.

Values beyond msgpack's own types (datetime, Decimal, set, big ints, registered user types)
travel as msgpack ext types: `squall.serialization`. A tuple whose values cannot be encoded does
not stop its frame: `pack_data` sends the others and hands it back to the caller.
"""

from __future__ import annotations

import logging
from typing import Any

import msgpack

from squall.serialization import default, ext_hook

log = logging.getLogger("squall.wire")

# control kinds
INIT = 0  # spout -> acker: val = xor of the first edges, extra = spout task
ACK = 1  # bolt -> acker: val = input edge xor the edges it created
FAIL = 2  # bolt -> acker
DONE = 3  # acker -> spout: val = 1 completed, 0 failed
BACKPRESSURE = 4  # worker -> peers: dest_task = a task of the sender, root = 1 full inbox, 0 room again
# worker -> peers, about once a second: dest_task = a task of the sender, root = the sender's busy
# fraction, val = the task's inbox fill, both in permille (squall.worker.load). Not 5: a kind
# that no flipped bit or stray byte in an acker message turns into (it encodes in three bytes)
LOAD = 1000


class WireError(ValueError):
    pass


def pack(items: list[Any]) -> bytes:
    """A frame of `items`; raises (TypeError, OverflowError, ValueError) if a value cannot be
    encoded. The transfer loop uses `pack_data`, which never raises for one bad tuple."""
    frame: bytes = msgpack.packb(items, use_bin_type=True, default=default)
    return frame


# the largest frame a worker's ports take unless configured otherwise (squall.worker.transport)
MAX_FRAME_BYTES = 16 << 20


def pack_data(items: list[Any], limit: int = MAX_FRAME_BYTES) -> tuple[bytes | None, list[tuple[Any, Exception]]]:
    """A frame of the items that can be encoded (None if none can), and `(item, error)` for
    each that cannot. Encoding is tried once for the whole frame; only a frame that fails is
    packed again item by item (a msgpack array is its header then its items, so the good
    items' bytes make a frame of their own).

    A frame is at most `limit` bytes (the receiving worker's maximum: its zmq drops the
    connection of a peer that sends a larger one, and with it the frames queued behind it):
    past it, the items are packed one by one and the largest ones that do not fit are handed
    back as errors."""
    try:
        frame: bytes = msgpack.packb(items, use_bin_type=True, default=default)
        if len(frame) <= limit:
            return frame, []
    except Exception:
        pass
    parts: list[tuple[Any, bytes]] = []
    bad: list[tuple[Any, Exception]] = []
    for item in items:
        try:
            parts.append((item, msgpack.packb(item, use_bin_type=True, default=default)))
        except Exception as exc:
            bad.append((item, exc))
    size = 5 + sum(len(p) for _, p in parts)  # an array header takes at most 5 bytes
    if size > limit:
        # the largest go first, until the rest fits
        for i in sorted(range(len(parts)), key=lambda i: len(parts[i][1]), reverse=True):
            if size <= limit:
                break
            item, packed = parts[i]
            size -= len(packed)
            parts[i] = (item, b"")
            bad.append((item, WireError(f"the tuple takes {len(packed)} bytes; its frame would pass the maximum"
                                        f" frame size of {limit} bytes (worker.max.frame.bytes)")))
        parts = [(item, p) for item, p in parts if p]
    if not parts:
        return None, bad
    return msgpack.Packer().pack_array_header(len(parts)) + b"".join(p for _, p in parts), bad


def unsendable_message(component: str, task: int, stream: str, fields: list[str], item: Any, exc: Exception) -> str:
    """Why a tuple could not be sent: its component, task and stream, the first value that
    cannot be encoded (its field and type), and the encoder's complaint."""
    where = f"{component} (task {task}) emitted on stream {stream!r} a tuple that cannot be sent to another worker"
    values = item[3] if isinstance(item, list) and len(item) == 5 else None
    for i, v in enumerate(values if isinstance(values, list) else ()):
        try:
            msgpack.packb(v, use_bin_type=True, default=default)
        except Exception as err:
            name = f" {fields[i]!r}" if i < len(fields) else ""
            t = type(v)
            return f"{where}: field {i}{name} is a {t.__module__}.{t.__qualname__}: {type(err).__name__}: {err}"
    return f"{where}: {type(exc).__name__}: {exc}"


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if type(key) is list else key


def _tuple_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # a dict keyed by tuples arrives with list keys, which Python cannot hash
    return {_hashable(k): v for k, v in pairs}


def unpack_data(frame: bytes) -> list[list[Any]]:
    """Decode a data frame. Items are checked by `check_tuple` where they are dispatched, so
    that the receive loop walks a frame once."""
    try:
        items = msgpack.unpackb(frame, raw=False, strict_map_key=False, use_list=True, ext_hook=ext_hook)
    except Exception:
        items = _SLOW
    if items is _SLOW:
        # outside the except clause: an exception raised in there would carry the first one as
        # its context, and with it this frame (and `frame`) for as long as it is kept
        items = _unpack_slowly(frame)
    if type(items) is not list:
        raise WireError(f"data frame is a {type(items).__name__}, not a list of tuples")
    return items


def _unpack_one(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True, ext_hook=ext_hook)
    except TypeError:
        # only now pay for a hook per map: tuple (array) keys, made hashable again
        return msgpack.unpackb(
            data, raw=False, strict_map_key=False, use_list=True, ext_hook=ext_hook, object_pairs_hook=_tuple_keys
        )


_lost_frames = 0
_SLOW = object()  # unpack_data: the frame did not decode at once


def _unpack_slowly(frame: bytes) -> Any:
    """A frame that did not decode at once. Dicts keyed by tuples need a hook; and when single
    tuples still fail (a type this worker has no decoder for), the frame is split into its
    tuples without decoding them, and the others are kept (the lost ones time out at their
    spouts and are replayed).

    No exception caught here is kept, only its text: a kept exception holds its traceback,
    whose frames hold this call's locals (the frame, the decoder and its buffer) and the kept
    exception itself, a reference cycle that only the cyclic collector frees, and a worker's
    collector runs rarely (squall.gcpolicy); a stream of garbage frames then held its
    memory."""
    global _lost_frames
    try:
        return _unpack_one(frame)
    except Exception as exc:
        first = str(exc)
    bounds: list[tuple[int, int]] = []
    try:
        u = msgpack.Unpacker(raw=False, max_buffer_size=max(len(frame), 1))
        u.feed(frame)
        for _ in range(u.read_array_header()):
            start = u.tell()
            u.skip()
            bounds.append((start, u.tell()))
        if u.tell() != len(frame):
            raise ValueError("extra data after the frame")
    except Exception:
        raise WireError(f"undecodable data frame of {len(frame)} bytes: {first}") from None
    del u
    items: list[Any] = []
    lost: list[str] = []
    for start, end in bounds:
        try:
            items.append(_unpack_one(frame[start:end]))
        except Exception as exc:
            lost.append(str(exc))
    if lost and not items:
        raise WireError(f"undecodable data frame of {len(frame)} bytes: {lost[0]}")
    if lost:
        _lost_frames += 1
        if _lost_frames <= 10 or _lost_frames % 1000 == 0:
            log.warning(
                "dropped %d of the %d tuples of a data frame (%d such frames so far): %s",
                len(lost), len(bounds), _lost_frames, lost[0],
            )
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
