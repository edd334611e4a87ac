"""Values on the wire beyond msgpack's own types, and user types registered with an encoder and
a decoder (the role of Storm's `topology.kryo.register`).

msgpack packs None, bool, int (64 bits), float, str, bytes, list/tuple (as a list) and dict by
itself. For anything else it calls `default`, which turns the value into a msgpack ext type;
the receiver's `ext_hook` turns it back. Out of the box:

| ext code | type | payload |
| --- | --- | --- |
| 1 | `datetime.datetime` | ISO 8601 text; an aware one also its `zoneinfo` key, if it has one |
| 2 | `datetime.date` | ISO 8601 text |
| 3 | `datetime.time` | ISO 8601 text |
| 4 | `datetime.timedelta` | [days, seconds, microseconds] |
| 5 | `decimal.Decimal` | its text |
| 6 | `set` | its elements as a list |
| 7 | `frozenset` | its elements as a list |
| 8 | `int` beyond 64 bits | big-endian two's complement bytes |
| 9 | `uuid.UUID` | its 16 bytes |
| 64 | a registered type | [its name, what its encoder returned] |

A registered type travels under its name (`module.QualName` unless given), so registrations
need not happen in the same order in every worker, only in all of them: the topology config
(`topology.serializers`, loaded by every worker) is the place for that; `register_serializer`
in Python is for code that every worker imports anyway (a component's module).

`default` runs only for a value msgpack cannot pack and `ext_hook` only for an ext type, so
plain values pay nothing. Subclasses of a type msgpack knows (an `IntEnum`, a `dict` subclass, a
namedtuple) are packed as that type, before any registration is looked at.
"""

from __future__ import annotations

import datetime
import decimal
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from squall.classload import ClassLoader, ModuleLoader

__all__ = [
    "Registration",
    "SerializationError",
    "UnencodableError",
    "default",
    "ext_hook",
    "register_serializer",
    "registered",
    "resolve_config",
    "type_name",
    "unregister_serializer",
]

CONFIG_KEY = "topology.serializers"

DATETIME, DATE, TIME, TIMEDELTA, DECIMAL, SET, FROZENSET, BIGINT, UUID = range(1, 10)
CUSTOM = 64


class SerializationError(ValueError):
    """A value that cannot cross the wire, or a payload that cannot be turned back."""


class UnencodableError(SerializationError, TypeError):
    """No encoder for a value's type. Also a TypeError, which is what msgpack itself raises."""


@dataclass(frozen=True)
class Registration:
    """A user type, its wire name, and the functions that turn it into msgpack-able values
    (which may hold other registered or built-in ext types) and back."""

    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    name: str


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# -- encoding ---------------------------------------------------------------------------------
def _pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True, default=default)
    return data


def _datetime(v: datetime.datetime) -> msgpack.ExtType:
    text = v.isoformat()
    key = getattr(v.tzinfo, "key", None)
    if isinstance(key, str):
        text += " " + key  # a zoneinfo.ZoneInfo: keep the zone, not only today's offset
    return msgpack.ExtType(DATETIME, text.encode())


def _bigint(v: int) -> msgpack.ExtType:
    return msgpack.ExtType(BIGINT, v.to_bytes(v.bit_length() // 8 + 1, "big", signed=True))


_BUILTIN: dict[type, Callable[[Any], msgpack.ExtType]] = {
    datetime.datetime: _datetime,
    datetime.date: lambda v: msgpack.ExtType(DATE, v.isoformat().encode()),
    datetime.time: lambda v: msgpack.ExtType(TIME, v.isoformat().encode()),
    datetime.timedelta: lambda v: msgpack.ExtType(TIMEDELTA, _pack([v.days, v.seconds, v.microseconds])),
    decimal.Decimal: lambda v: msgpack.ExtType(DECIMAL, str(v).encode()),
    set: lambda v: msgpack.ExtType(SET, _pack(list(v))),
    frozenset: lambda v: msgpack.ExtType(FROZENSET, _pack(list(v))),
    int: _bigint,  # msgpack calls `default` for an int only when it is beyond 64 bits
    uuid.UUID: lambda v: msgpack.ExtType(UUID, v.bytes),
}

_lock = threading.Lock()
_by_name: dict[str, Registration] = {}
_by_type: dict[type, Registration] = {}
# type -> encoder, filled on first use (subclasses included); cleared when registrations change
_encoders: dict[type, Callable[[Any], msgpack.ExtType]] = dict(_BUILTIN)


def _custom(reg: Registration) -> Callable[[Any], msgpack.ExtType]:
    encode, name = reg.encode, reg.name

    def enc(v: Any) -> msgpack.ExtType:
        try:
            data = encode(v)
        except Exception as exc:
            raise SerializationError(
                f"the serializer of {name} failed on a {type_name(type(v))}: {type(exc).__name__}: {exc}"
            ) from exc
        return msgpack.ExtType(CUSTOM, _pack([name, data]))

    return enc


def _find_encoder(cls: type) -> Callable[[Any], msgpack.ExtType]:
    # registered types first, then built-ins, each along the MRO (a subclass of datetime is
    # sent as a datetime unless it has its own registration)
    for base in cls.__mro__:
        reg = _by_type.get(base)
        if reg is not None:
            return _custom(reg)
        builtin = _BUILTIN.get(base)
        if builtin is not None:
            return builtin
    raise UnencodableError(
        f"cannot encode a {type_name(cls)}: the wire format has no encoder for it; register one"
        f" in the topology config ({CONFIG_KEY}) or with squall.register_serializer"
    )


def default(value: Any) -> msgpack.ExtType:
    """msgpack's `default`: the ext type for a value msgpack cannot pack itself."""
    enc = _encoders.get(type(value))
    if enc is None:
        enc = _find_encoder(type(value))
        _encoders[type(value)] = enc
    return enc(value)


# -- decoding ---------------------------------------------------------------------------------
def _unpack(data: bytes, use_list: bool = True) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=use_list, ext_hook=ext_hook)


def _decode_datetime(data: bytes) -> datetime.datetime:
    text, _, key = data.decode().partition(" ")
    value = datetime.datetime.fromisoformat(text)
    if key:
        import zoneinfo

        value = value.astimezone(zoneinfo.ZoneInfo(key))
    return value


def _decode_custom(data: bytes) -> Any:
    name, payload = _unpack(data)
    reg = _by_name.get(name)
    if reg is None:
        raise SerializationError(
            f"no serializer registered for {name} in this worker; register it in the topology"
            f" config ({CONFIG_KEY}) so that every worker has it"
        )
    return reg.decode(payload)


# Set elements are hashable, so a list among them was a tuple: decode them with use_list=False.
_DECODERS: dict[int, Callable[[bytes], Any]] = {
    DATETIME: _decode_datetime,
    DATE: lambda d: datetime.date.fromisoformat(d.decode()),
    TIME: lambda d: datetime.time.fromisoformat(d.decode()),
    TIMEDELTA: lambda d: datetime.timedelta(*_unpack(d)),
    DECIMAL: lambda d: decimal.Decimal(d.decode()),
    SET: lambda d: set(_unpack(d, use_list=False)),
    FROZENSET: lambda d: frozenset(_unpack(d, use_list=False)),
    BIGINT: lambda d: int.from_bytes(d, "big", signed=True),
    UUID: lambda d: uuid.UUID(bytes=d),
    CUSTOM: _decode_custom,
}


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack's `ext_hook`: the value an ext type stands for."""
    dec = _DECODERS.get(code)
    if dec is None:
        raise SerializationError(f"unknown ext type {code} ({len(data)} bytes)")
    try:
        return dec(data)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"a malformed ext type {code} ({len(data)} bytes): {type(exc).__name__}: {exc}") from exc


# -- registration -------------------------------------------------------------------------------
def register_serializer(
    cls: type,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    *,
    serializer: Any = None,
    name: str | None = None,
) -> Registration:
    """Send values of `cls` (and of its subclasses without their own registration) between
    workers as `encode(value)`, turned back by `decode(data)` on the receiver. `encode` must
    return something the wire can carry: msgpack's types, the built-in ext types, other
    registered types. Or pass `serializer=`, an object (or a class, instantiated with no
    arguments) with `encode` and `decode` methods. The type travels under `name` (default
    `module.QualName`); every worker must register it under the same name. Registering a type
    again replaces its serializer."""
    if not isinstance(cls, type):
        raise TypeError(f"register_serializer: {cls!r} is not a type")
    if serializer is not None:
        if encode is not None or decode is not None:
            raise TypeError("register_serializer: pass encode and decode, or serializer=, not both")
        serializer = _instance(serializer, f"serializer {getattr(serializer, '__qualname__', serializer)!r}")
        encode = getattr(serializer, "encode", None)
        decode = getattr(serializer, "decode", None)
        what = f"serializer {type(serializer).__qualname__}"
    else:
        what = "register_serializer"
    if not callable(encode) or not callable(decode):
        raise TypeError(f"{what}: needs a callable encode and a callable decode")
    reg = Registration(cls, encode, decode, name or type_name(cls))
    with _lock:
        old = _by_name.get(reg.name)
        if old is not None and old.cls is not cls:
            raise ValueError(f"serializer name {reg.name!r} is already used for {type_name(old.cls)}")
        previous = _by_type.pop(cls, None)
        if previous is not None:
            _by_name.pop(previous.name, None)
        _by_type[cls] = reg
        _by_name[reg.name] = reg
        _encoders.clear()
        _encoders.update(_BUILTIN)
    return reg


def unregister_serializer(cls: type) -> None:
    with _lock:
        reg = _by_type.pop(cls, None)
        if reg is not None:
            _by_name.pop(reg.name, None)
        _encoders.clear()
        _encoders.update(_BUILTIN)


def registered() -> dict[str, Registration]:
    """Wire name -> registration, of every user type registered in this process."""
    return dict(_by_name)


# -- the topology config ------------------------------------------------------------------------
def _import(loader: ClassLoader, path: str, what: str) -> Any:
    """`module:attr` (or, for a type, `module.Attr`): the object it names, through `loader`."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
        candidates = [(module_name, attr)]
    else:
        parts = path.split(".")
        candidates = [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts) - 1, 0, -1)]
    if not all(m and a for m, a in candidates) or not candidates:
        raise SerializationError(f"{what} {path!r}: expected 'module:name' or 'module.name'")
    last: BaseException | None = None
    for module_name, attr in candidates:
        try:
            return loader.load(f"{module_name}:{attr}")
        except ImportError as exc:
            if not isinstance(exc.__cause__, ModuleNotFoundError):
                raise SerializationError(f"{what} {path!r}: {exc}") from exc
            last = exc.__cause__  # a dotted type name: perhaps a shorter module
    raise SerializationError(f"{what} {path!r}: cannot import it ({last})")


def check_config(value: Any) -> list[tuple[str, str]]:
    """The shape of `topology.serializers`, without importing anything: a list of
    (key, message) problems ('' for the whole value)."""
    if not isinstance(value, Mapping):
        return [("", f"must be a mapping of type names to serializers, not a {type(value).__name__}")]
    problems: list[tuple[str, str]] = []
    for key, spec in value.items():
        if not isinstance(key, str) or not key or "." not in key.replace(":", "."):
            problems.append((str(key), "the key must be a type's dotted name, e.g. mypackage.money.Money"))
            continue
        if isinstance(spec, str):
            if not _is_path(spec):
                problems.append((key, f"{spec!r}: expected 'module:Serializer' (a class or object with encode and decode)"))
        elif isinstance(spec, Mapping):
            extra = sorted(set(map(str, spec)) - {"encode", "decode", "name"})
            if extra:
                problems.append((key, f"unknown keys {extra} (allowed: encode, decode, name)"))
            for part in ("encode", "decode"):
                fn = spec.get(part)
                if not isinstance(fn, str) or not _is_path(fn):
                    problems.append((key, f"{part}: expected 'module:function', got {fn!r}"))
            name = spec.get("name")
            if name is not None and (not isinstance(name, str) or not name):
                problems.append((key, f"name: expected a non-empty string, got {name!r}"))
        else:
            problems.append((key, f"expected 'module:Serializer' or a mapping with encode and decode, not a {type(spec).__name__}"))
    return problems


def _instance(serializer: Any, what: str) -> Any:
    """A serializer given as a class is instantiated with no arguments."""
    if not isinstance(serializer, type):
        return serializer
    try:
        return serializer()
    except Exception as exc:
        raise SerializationError(f"{what}: a serializer class must be created with no arguments: {type(exc).__name__}: {exc}") from exc


def _is_path(text: str) -> bool:
    module_name, sep, attr = text.partition(":")
    return bool(sep and module_name and attr)


def resolve_config(value: Any, loader: ClassLoader | None = None) -> list[Registration]:
    """Load what `topology.serializers` names, with `loader` (by default a
    `squall.classload.ModuleLoader`, importing from `sys.path`). Each entry is `type:
    'module:Serializer'` (a class or object with encode and decode) or `type: {encode:
    'module:fn', decode: 'module:fn', name: optional wire name}`. Raises SerializationError
    naming the entry; does not register anything (`register_all` does)."""
    loader = ModuleLoader() if loader is None else loader
    problems = check_config(value)
    if problems:
        key, message = problems[0]
        raise SerializationError(f"{key}: {message}" if key else message)
    out: list[Registration] = []
    for key, spec in value.items():
        try:
            cls = _import(loader, key, "type")
            if not isinstance(cls, type):
                raise SerializationError(f"type {key!r} is not a class (it is a {type(cls).__name__})")
            if isinstance(spec, str):
                ser = _instance(_import(loader, spec, "serializer"), f"serializer {spec!r}")
                encode, decode, name = getattr(ser, "encode", None), getattr(ser, "decode", None), None
                if not callable(encode) or not callable(decode):
                    raise SerializationError(f"serializer {spec!r} has no callable encode and decode")
            else:
                encode = _import(loader, spec["encode"], "encode")
                decode = _import(loader, spec["decode"], "decode")
                name = spec.get("name")
                for part, fn in (("encode", encode), ("decode", decode)):
                    if not callable(fn):
                        raise SerializationError(f"{part} {spec[part]!r} is not callable")
        except SerializationError as exc:
            raise SerializationError(f"{key}: {exc}") from exc.__cause__
        out.append(Registration(cls, encode, decode, name or type_name(cls)))
    return out


def register_all(registrations: Iterable[Registration]) -> None:
    for reg in registrations:
        register_serializer(reg.cls, reg.encode, reg.decode, name=reg.name)
