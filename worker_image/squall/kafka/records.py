"""From a Kafka record to a tuple's values, and from a tuple's values to a record's bytes.

Decoders (`keyDecoder`, `valueDecoder`): `bytes`, `utf-8`, `json`, or `module:function` (bytes ->
value). Encoders for the sink the same way (value -> bytes). A decoder that raises makes the
record a poison record (the spout counts it, reports its topic/partition/offset, sends it to the
dead-letter topic when there is one, and moves on).

The record translator (storm-kafka-client's RecordTranslator) maps a `KafkaRecord` to the values
of one tuple. The default one emits the fields the spout declares, each one of the record's
attributes: `topic`, `partition`, `offset`, `key`, `value`, `headers` (a dict of bytes),
`timestamp` (seconds, a float: usable as a windowed bolt's `timestampField`), `timestamp_ms`.
A custom one is `translator: module:function` (KafkaRecord -> list of values, or None to skip).

`field_picker` is the default translator without the `KafkaRecord`: the spout's fast path hands
it the record's attributes as one tuple (`ROW_FIELDS` order) and builds the headers and the
timestamp only when the fields name them (`picker.headers`, `picker.timestamp`).

Pure: no client.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "RECORD_FIELDS",
    "Decoder",
    "Encoder",
    "KafkaRecord",
    "Translator",
    "FieldPicker",
    "default_translator",
    "field_picker",
    "import_function",
    "make_decoder",
    "make_encoder",
]

Decoder = Callable[[bytes], Any]
Encoder = Callable[[Any], bytes]


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    headers: Mapping[str, bytes]
    timestamp_ms: int | None

    @property
    def timestamp(self) -> float | None:
        return None if self.timestamp_ms is None else self.timestamp_ms / 1000.0


Translator = Callable[[KafkaRecord], Sequence[Any] | None]
RECORD_FIELDS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp", "timestamp_ms")


def import_function(path: str, what: str) -> Callable[..., Any]:
    """`module:function` imported; a ValueError naming `what` when it cannot be."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what}: {path!r} is not 'module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's import is reported
        raise ValueError(f"{what}: cannot import {path!r}: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise ValueError(f"{what}: {path!r} is not callable")
    fn: Callable[..., Any] = obj
    return fn


def _identity(data: bytes) -> bytes:
    return data


def make_decoder(name: str, what: str) -> Decoder:
    if name == "bytes":
        return _identity
    if name in ("utf-8", "utf8"):
        # bytes.decode itself (UTF-8, strict: a record that is not UTF-8 raises, a poison record),
        # not a function around it: one Python call less per record
        decode: Decoder = bytes.decode
        return decode
    if name == "json":
        return json.loads
    if ":" in name:
        return import_function(name, what)
    raise ValueError(f"{what}: {name!r} is not bytes, utf-8, json or module:function")


def _encode_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected bytes, got {type(value).__name__}")


def _encode_utf8(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode("utf-8")


def _encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), default=str).encode("utf-8")


def make_encoder(name: str, what: str) -> Encoder:
    if name == "bytes":
        return _encode_bytes
    if name in ("utf-8", "utf8"):
        return _encode_utf8
    if name == "json":
        return _encode_json
    if ":" in name:
        return import_function(name, what)
    raise ValueError(f"{what}: {name!r} is not bytes, utf-8, json or module:function")


def default_translator(fields: Sequence[str]) -> Translator:
    """A translator emitting the record's attributes named by `fields`, in that order."""
    unknown = [f for f in fields if f not in RECORD_FIELDS]
    if unknown:
        raise ValueError(
            f"output fields {unknown} are not record attributes ({', '.join(RECORD_FIELDS)}); "
            f"declare only those, or give a 'translator'")
    getters = [getattr(KafkaRecord, f).__get__ for f in fields]  # slots and the property alike

    def translate(record: KafkaRecord) -> list[Any]:
        return [g(record) for g in getters]

    return translate


ROW_FIELDS = RECORD_FIELDS  # the order of a row handed to a FieldPicker
_ROW_INDEX = {name: i for i, name in enumerate(ROW_FIELDS)}


class FieldPicker:
    """The default translator's values, from a row (a tuple in `ROW_FIELDS` order) rather than a
    `KafkaRecord`: `picker(row) == default_translator(fields)(record)` for the same record.
    `headers` / `timestamp`: whether the fields use the row's headers / its timestamp (when they
    do not, the row may hold None there)."""

    __slots__ = ("fields", "headers", "timestamp", "pick")

    def __init__(self, fields: Sequence[str]) -> None:
        default_translator(fields)  # the same check of the names
        self.fields = tuple(fields)
        self.headers = "headers" in self.fields
        self.timestamp = "timestamp" in self.fields or "timestamp_ms" in self.fields
        idx = [_ROW_INDEX[f] for f in self.fields]
        self.pick: Callable[[tuple[Any, ...]], list[Any]]
        if not idx:
            self.pick = lambda row: []
        elif len(idx) == 1:
            i = idx[0]
            self.pick = lambda row: [row[i]]
        else:
            get = operator.itemgetter(*idx)
            self.pick = lambda row: list(get(row))

    def __call__(self, row: tuple[Any, ...]) -> list[Any]:
        return self.pick(row)  # the spout calls `pick` itself: one call less per record


def field_picker(fields: Sequence[str]) -> FieldPicker:
    """A `FieldPicker` for `fields`; a ValueError naming the ones that are not record attributes."""
    return FieldPicker(fields)
