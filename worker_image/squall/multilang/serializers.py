"""How messages cross the pipe to a multilang subprocess: Storm's JSON framing and a msgpack one.

Storm's `JsonSerializer` writes each message as JSON text followed by the line `end`
(`<json>\\nend\\n`) and reads the child's messages the same way; Storm's published adapters
(`storm.py`, `storm.js`, `storm.rb`) speak only this. `topology.multilang.serializer` picks the
serializer, as in Storm (there it names a Java class; here `json` or `msgpack`, and Storm's
`org.apache.storm.multilang.JsonSerializer` is accepted as `json`).

The msgpack framing is Squall's choice, the one pystorm/streamparse's `MsgpackSerializer` uses:
msgpack objects back to back with no delimiter (each object says its own length). A child needs
an adapter of its own for it (Storm's adapters speak JSON only).

Pure: bytes in, messages out. `Decoder.feed` takes whatever the pipe gave and returns the whole
messages in it; a partial message waits for the rest. A message over `max_bytes` raises
`FrameError` instead of growing the buffer without bound.
"""

from __future__ import annotations

import json
from typing import Any, Final, Protocol

import msgpack

__all__ = ["CONFIG_KEY", "DEFAULT_MAX_BYTES", "Decoder", "FrameError", "JsonDecoder", "JsonSerializer",
           "MsgpackDecoder", "MsgpackSerializer", "Serializer", "serializer_for", "SERIALIZERS"]

CONFIG_KEY: Final = "topology.multilang.serializer"  # Storm's key
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024  # one message from a child, at most
_END: Final = b"\nend\n"


class FrameError(ValueError):
    """What the child wrote is not a message (bad JSON, an oversize message)."""


class Decoder(Protocol):
    def feed(self, data: bytes) -> list[Any]: ...


class Serializer(Protocol):
    name: str

    def encode(self, msg: Any) -> bytes: ...
    def decoder(self, max_bytes: int = DEFAULT_MAX_BYTES) -> Decoder: ...


class JsonDecoder:
    """Storm's framing read back: text up to a line `end` is one JSON message."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.buf = bytearray()
        self.max_bytes = max_bytes
        self._scan = 0  # where to look for the delimiter next (the buffer before it has none)

    def feed(self, data: bytes) -> list[Any]:
        buf = self.buf
        buf += data
        out: list[Any] = []
        start = 0
        while True:
            # the first message may be just "end": its line then starts the buffer
            if start == 0 and self._scan == 0 and buf.startswith(b"end\n"):
                end, skip = 0, 4
            else:
                end = buf.find(_END, max(start, self._scan - len(_END) + 1))
                skip = len(_END)
            if end < 0:
                break
            text = bytes(buf[start:end])
            start = end + skip
            self._scan = start
            if not text.strip():
                continue  # an empty message: Storm's reader skips it too
            try:
                out.append(json.loads(text))
            except ValueError as exc:
                raise FrameError(f"not JSON: {text[:200]!r} ({exc})") from None
        if start:
            del buf[:start]
            self._scan = 0
        self._scan = max(self._scan, len(buf))
        if len(buf) > self.max_bytes:
            raise FrameError(f"a message over {self.max_bytes} bytes (no '\\nend\\n' in "
                             f"{len(buf)} bytes)")
        return out


class JsonSerializer:
    name = "json"

    def encode(self, msg: Any) -> bytes:
        return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + _END

    def decoder(self, max_bytes: int = DEFAULT_MAX_BYTES) -> Decoder:
        return JsonDecoder(max_bytes)


class MsgpackDecoder:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max_bytes)
        self.max_bytes = max_bytes

    def feed(self, data: bytes) -> list[Any]:
        try:
            self.unpacker.feed(data)
            return list(self.unpacker)
        except msgpack.BufferFull:
            raise FrameError(f"a message over {self.max_bytes} bytes") from None
        except (ValueError, msgpack.UnpackException) as exc:
            raise FrameError(f"not msgpack: {exc}") from None


class MsgpackSerializer:
    name = "msgpack"

    def encode(self, msg: Any) -> bytes:
        return msgpack.packb(msg, use_bin_type=True)  # type: ignore[no-any-return]

    def decoder(self, max_bytes: int = DEFAULT_MAX_BYTES) -> Decoder:
        return MsgpackDecoder(max_bytes)


SERIALIZERS: Final[dict[str, type[JsonSerializer] | type[MsgpackSerializer]]] = {
    "json": JsonSerializer,
    "org.apache.storm.multilang.JsonSerializer": JsonSerializer,
    "msgpack": MsgpackSerializer,
}


def serializer_for(name: object) -> Serializer:
    """The serializer `topology.multilang.serializer` names; ValueError naming the choices."""
    cls = SERIALIZERS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"{CONFIG_KEY}={name!r}: expected one of json, msgpack "
                         "(or org.apache.storm.multilang.JsonSerializer)")
    return cls()
