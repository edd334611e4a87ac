"""squall.serialization and the wire's handling of values msgpack cannot pack by itself: the
built-in ext types, user serializers (Python and topology config), unsendable tuples."""

from __future__ import annotations

import datetime
import decimal
import sys
import textwrap
import uuid
import zoneinfo
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from squall import register_serializer, serialization, wire
from squall.errors import TopologyError
from squall.serialization import SerializationError, UnencodableError
from squall.validation import check_topology, parse_topology

pytestmark = pytest.mark.unit


def round_trip(value: Any) -> Any:
    [[_d, _s, _stream, values, _a]] = wire.unpack_data(wire.pack([[1, 2, "default", [value], None]]))
    return values[0]


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (self.x, self.y) == (other.x, other.y)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.x, self.y))


class Point3(Point):
    pass


class Opaque:
    pass


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    yield
    for reg in list(serialization.registered().values()):
        serialization.unregister_serializer(reg.cls)


# -- built-in ext types -------------------------------------------------------------------------
PARIS = zoneinfo.ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    "value",
    [
        datetime.datetime(2026, 11, 23, 11, 18, 7, 123456),
        datetime.datetime(2026, 11, 23, 11, 18, 7, tzinfo=datetime.timezone.utc),
        datetime.datetime(2026, 11, 23, 11, 18, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))),
        datetime.datetime(2026, 3, 29, 3, 30, tzinfo=PARIS),
        datetime.datetime(1, 1, 1),
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime.date(2026, 2, 28),
        datetime.time(23, 59, 1, 5),
        datetime.time(1, 2, tzinfo=datetime.timezone.utc),
        datetime.timedelta(days=-3, seconds=5, microseconds=7),
        datetime.timedelta(0),
        decimal.Decimal("3.14159265358979323846264338327950288"),
        decimal.Decimal("-0.00"),
        decimal.Decimal("1E+400"),
        {1, 2, "three", b"four", None, (5, 6)},
        set(),
        frozenset({1, frozenset({2, (3, (4,))})}),
        2**64,
        -(2**63) - 1,
        2**1000 + 1,
        -(2**1000),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        [{2**70}, {"k": datetime.date(2020, 1, 1)}, [decimal.Decimal(1), frozenset()]],
    ],
    ids=repr,
)
def test_built_in_ext_types_round_trip_with_their_type(value: Any) -> None:
    got = round_trip(value)
    if isinstance(value, tuple | list):
        value = list(value)
    assert got == value
    assert type(got) is type(value)
    if isinstance(value, datetime.datetime | datetime.time):
        assert got.utcoffset() == value.utcoffset()


def test_a_zoneinfo_datetime_keeps_its_zone() -> None:
    value = datetime.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=PARIS)  # the second 02:30
    got = round_trip(value)
    assert got.tzinfo == PARIS
    assert got.utcoffset() == value.utcoffset() == datetime.timedelta(hours=1)
    assert got == value


def test_values_of_64_bits_stay_plain_msgpack() -> None:
    frame = wire.pack([[1, 2, "s", [2**64 - 1, -(2**63), 1.5, "x"], None]])
    assert msgpack.unpackb(frame) == [[1, 2, "s", [2**64 - 1, -(2**63), 1.5, "x"], None]]


def test_a_dict_keyed_by_tuples_arrives() -> None:
    value = {(1, 2): "a", ((3,), "b"): "c", "plain": 1}
    assert round_trip(value) == value


def test_an_unknown_ext_code_is_a_wire_error() -> None:
    frame = msgpack.packb([[1, 2, "s", [msgpack.ExtType(99, b"x")], None]])
    with pytest.raises(wire.WireError, match="unknown ext type 99"):
        wire.unpack_data(frame)


def test_a_malformed_ext_payload_is_a_wire_error() -> None:
    frame = msgpack.packb([[1, 2, "s", [msgpack.ExtType(serialization.DECIMAL, b"\xff")], None]])
    with pytest.raises(wire.WireError, match="malformed ext type 5"):
        wire.unpack_data(frame)


def test_a_frame_keeps_the_tuples_this_worker_can_decode(caplog: pytest.LogCaptureFixture) -> None:
    register_serializer(Point, lambda p: [p.x, p.y], lambda d: Point(*d))
    good = [[1, 2, "s", [{1}, {(1, 2): 3}], {5: 6}], [3, 2, "s", ["x"], None]]
    frame = wire.pack([good[0], [1, 2, "s", [Point(1, 2)], {7: 8}], good[1]])
    serialization.unregister_serializer(Point)  # the receiving worker never registered it
    assert wire.unpack_data(frame) == good
    assert "dropped 1 of the 3 tuples of a data frame" in caplog.text
    assert f"no serializer registered for {__name__}.Point" in caplog.text


def test_trailing_bytes_after_a_frame_that_does_not_decode_are_a_wire_error() -> None:
    frame = msgpack.packb([[1, 2, "s", [msgpack.ExtType(99, b"x")], None]]) + b"\x01"
    with pytest.raises(wire.WireError, match="undecodable data frame"):
        wire.unpack_data(frame)


# -- unencodable values -------------------------------------------------------------------------
@pytest.mark.parametrize("value", [Opaque(), [1, {Opaque()}], {"k": Opaque()}, object()])
def test_an_unregistered_type_raises_a_clear_error(value: Any) -> None:
    with pytest.raises(UnencodableError, match=r"cannot encode a .*(Opaque|object).*topology\.serializers"):
        wire.pack([[1, 2, "s", [value], None]])


def test_pack_data_sends_the_good_tuples_and_returns_the_bad_ones() -> None:
    good1 = [1, 2, "s", [1, {3}], {5: 6}]
    bad = [1, 2, "s", [Opaque()], {7: 8}]
    good2 = [4, 2, "s", ["x"], None]
    frame, failed = wire.pack_data([good1, bad, good2])
    assert frame is not None
    assert wire.unpack_data(frame) == [good1, good2]
    assert [item for item, _exc in failed] == [bad]
    assert isinstance(failed[0][1], UnencodableError)


def test_pack_data_of_only_bad_tuples_gives_no_frame() -> None:
    frame, failed = wire.pack_data([[1, 2, "s", [Opaque()], None]] * 3)
    assert frame is None and len(failed) == 3


def test_pack_data_of_good_tuples_is_pack() -> None:
    items = [[i, 2, "s", [i, "v"], {i: i}] for i in range(40)]
    assert wire.pack_data(items) == (wire.pack(items), [])


def test_unsendable_message_names_component_stream_field_and_type() -> None:
    item = [1, 2, "words", ["ok", {Opaque()}], None]
    _frame, [(_item, exc)] = wire.pack_data([item])
    text = wire.unsendable_message("split", 2, "words", ["word", "tags"], item, exc)
    assert "split (task 2)" in text and "'words'" in text
    assert "field 1 'tags' is a builtins.set" in text
    assert f"{__name__}.Opaque" in text


# -- user serializers in Python ---------------------------------------------------------------
def test_registered_type_round_trips_and_nests() -> None:
    register_serializer(Point, lambda p: [p.x, p.y], lambda d: Point(*d))
    value = {"p": Point(1, 2), "s": {Point(3, 4)}, "l": [Point(5, 6)]}
    assert round_trip(value) == value


def test_serializer_object_or_class_and_subclasses() -> None:
    class Codec:
        def encode(self, p: Point) -> list[int]:
            return [p.x, p.y]

        def decode(self, d: list[int]) -> Point:
            return Point(*d)

    register_serializer(Point, serializer=Codec)
    # a subclass without its own registration travels as its base
    assert type(round_trip(Point3(1, 2))) is Point
    register_serializer(Point3, serializer=Codec(), name="p3")
    assert serialization.registered()["p3"].cls is Point3


def test_encoder_output_may_hold_ext_types() -> None:
    register_serializer(Point, lambda p: {"at": datetime.date(2020, 1, p.x), "y": decimal.Decimal(p.y)},
                        lambda d: Point(d["at"].day, int(d["y"])))
    assert round_trip(Point(3, 4)) == Point(3, 4)


def test_reregistering_replaces_and_unregistering_removes() -> None:
    register_serializer(Point, lambda p: [p.x, p.y], lambda d: Point(*d))
    register_serializer(Point, lambda p: [p.y, p.x], lambda d: Point(d[1], d[0]))
    assert round_trip(Point(1, 2)) == Point(1, 2)
    serialization.unregister_serializer(Point)
    with pytest.raises(UnencodableError):
        wire.pack([Point(1, 2)])


def test_a_name_cannot_serve_two_types() -> None:
    register_serializer(Point, lambda p: 0, lambda d: 0, name="pt")
    with pytest.raises(ValueError, match="'pt' is already used"):
        register_serializer(Opaque, lambda p: 0, lambda d: 0, name="pt")


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("not a type", str, str), {}, "is not a type"),
        ((Point,), {}, "callable encode and a callable decode"),
        ((Point, str), {"serializer": object()}, "not both"),
        ((Point,), {"serializer": object()}, "callable encode"),
    ],
)
def test_register_serializer_rejects_bad_arguments(args: Any, kwargs: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        register_serializer(*args, **kwargs)


def test_a_failing_encoder_names_the_type() -> None:
    register_serializer(Point, lambda p: 1 / 0, lambda d: d)
    with pytest.raises(SerializationError, match=r"serializer of .*Point failed on a .*Point: ZeroDivisionError"):
        wire.pack([Point(1, 2)])


def test_a_type_the_receiver_does_not_know_is_a_wire_error_naming_it() -> None:
    register_serializer(Point, lambda p: [p.x, p.y], lambda d: Point(*d))
    frame = wire.pack([[1, 2, "s", [Point(1, 2)], None]])
    serialization.unregister_serializer(Point)
    with pytest.raises(wire.WireError, match=rf"no serializer registered for {__name__}.Point"):
        wire.unpack_data(frame)


# -- topology.serializers -----------------------------------------------------------------------
MODULE = textwrap.dedent(
    """
    class Money:
        def __init__(self, cents, currency):
            self.cents, self.currency = cents, currency
        def __eq__(self, other):
            return (self.cents, self.currency) == (other.cents, other.currency)

    class MoneySerializer:
        def encode(self, m):
            return [m.cents, m.currency]
        def decode(self, d):
            return Money(*d)

    class Temp:
        def __init__(self, k):
            self.k = k

    def temp_out(t):
        return t.k

    def temp_in(k):
        return Temp(k)

    not_callable = 3
    """
)


@pytest.fixture
def codecs(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "sq_codecs.py").write_text(MODULE)
    yield tmp_path
    sys.modules.pop("sq_codecs", None)


def topo(config: dict[str, Any], bolt_config: dict[str, Any] | None = None) -> Any:
    return parse_topology({
        "apiVersion": "squall.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {
            "config": config,
            "spouts": [{"name": "s", "class": "x:S", "outputs": [{"stream": "default", "fields": ["v"]}]}],
            "bolts": [{"name": "b", "class": "x:B", "config": bolt_config or {},
                       "inputs": [{"component": "s", "grouping": "shuffle"}]}],
        },
    })


def test_config_serializers_resolve_and_round_trip(codecs: Path) -> None:
    config = {"topology.serializers": {
        "sq_codecs.Money": "sq_codecs:MoneySerializer",
        "sq_codecs:Temp": {"encode": "sq_codecs:temp_out", "decode": "sq_codecs:temp_in", "name": "temp"},
    }}
    with serialization_path(codecs):
        regs = serialization.resolve_config(config["topology.serializers"])
    assert [(r.cls.__name__, r.name) for r in regs] == [("Money", "sq_codecs.Money"), ("Temp", "temp")]
    serialization.register_all(regs)
    money = regs[0].cls(150, "EUR")
    assert round_trip(money) == money
    assert round_trip(regs[1].cls(7)).k == 7
    # shape-only validation (no imports) accepts it too
    assert check_topology(topo(config), resolve_classes=False).serializers == []


class serialization_path:
    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __enter__(self) -> None:
        sys.path.insert(0, self.path)

    def __exit__(self, *exc: object) -> None:
        sys.path.remove(self.path)


@pytest.mark.parametrize(
    "value, where, message",
    [
        (["sq_codecs:MoneySerializer"], "spec.config['topology.serializers']", "must be a mapping"),
        ({"Money": "sq_codecs:MoneySerializer"}, "'topology.serializers'].Money:", "type's dotted name"),
        ({"sq_codecs.Money": "MoneySerializer"}, "['sq_codecs.Money']", "expected 'module:Serializer'"),
        ({"sq_codecs.Money": 3}, "['sq_codecs.Money']", "not a int"),
        ({"sq_codecs.Money": {"encode": "sq_codecs:temp_out"}}, "['sq_codecs.Money']", "decode: expected 'module:function'"),
        ({"sq_codecs.Money": {"encode": "a:b", "decode": "a:b", "extra": 1}}, "['sq_codecs.Money']", "unknown keys ['extra']"),
    ],
)
def test_config_shape_problems_name_the_field(value: Any, where: str, message: str) -> None:
    with pytest.raises(TopologyError) as err:
        check_topology(topo({"topology.serializers": value}), resolve_classes=False)
    text = str(err.value)
    assert where in text and message in text, text


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"sq_codecs.Nope": "sq_codecs:MoneySerializer"}, "has no attribute 'Nope'"),
        ({"nomodule_xyz.Money": "sq_codecs:MoneySerializer"}, "cannot import it"),
        ({"sq_codecs.temp_out": "sq_codecs:MoneySerializer"}, "is not a class"),
        ({"sq_codecs.Money": "sq_codecs:Temp"}, "must be created with no arguments: TypeError"),
        ({"sq_codecs.Money": "sq_codecs:temp_out"}, "no callable encode and decode"),
        ({"sq_codecs.Money": {"encode": "sq_codecs:not_callable", "decode": "sq_codecs:temp_in"}}, "is not callable"),
        ({"sq_codecs.Money": {"encode": "sq_codecs:gone", "decode": "sq_codecs:temp_in"}}, "has no attribute 'gone'"),
    ],
)
def test_config_import_problems_name_the_entry(codecs: Path, entry: dict[str, Any], message: str) -> None:
    with pytest.raises(TopologyError) as err:
        check_topology(topo({"topology.serializers": entry}), resolve_classes=True, search_paths=[codecs])
    problems = [p for p in err.value.problems if "serializers" in p.path]
    assert len(problems) == 1, err.value.problems
    assert problems[0].path == f"spec.config['topology.serializers']['{next(iter(entry))}']"
    assert message in problems[0].message


def test_serializers_in_a_component_config_are_rejected() -> None:
    with pytest.raises(TopologyError) as err:
        check_topology(topo({}, {"topology.serializers": {}}), resolve_classes=False)
    assert "spec.bolts[0].config['topology.serializers']" in str(err.value)
    assert "topology-wide" in str(err.value)
