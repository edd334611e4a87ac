"""squall.spark's Arrow conversion without a JVM: a batch's converted rows become one Arrow table
with the Spark schema's Arrow types, and an Arrow result column becomes tuple values of the
exact types the wire carries (datetime, date, Decimal, bytes, dicts for maps and structs)."""

from __future__ import annotations

import datetime as dt
import decimal
import zoneinfo
from typing import Any

import msgpack
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from squall import serialization  # noqa: E402
from squall import spark as sq  # noqa: E402

pytestmark = pytest.mark.unit

UTC = dt.timezone.utc
# simple types only: parsing a DDL type such as array<string> takes a JVM (the integration tests)
FIELDS = ["id", "ts", "day", "price", "blob", "ok", "ratio", "n", "small"]
SCHEMA = {"id": "string", "ts": "timestamp", "day": "date", "price": "decimal(10,3)", "blob": "binary",
          "ok": "boolean", "ratio": "double", "n": "bigint", "small": "smallint"}


def wire_roundtrip(values: list[Any]) -> Any:
    return msgpack.unpackb(msgpack.packb(values, default=serialization.default), ext_hook=serialization.ext_hook)


def test_a_batch_goes_to_arrow_and_back_with_exact_types() -> None:
    schema = sq.BatchSchema(SCHEMA, required=["id"])
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    naive = dt.datetime(2024, 3, 31, 1, 30, 0, 250)
    inputs = [
        ["a", dt.datetime(2024, 3, 31, 3, 30, tzinfo=berlin), dt.date(2024, 2, 29), decimal.Decimal("12.345"),
         b"\x00\xff", True, 0.1, 2**62, -7],
        ["b", 1_700_000_000.5, "2024-01-01", "7", bytearray(b"z"), "false", 3, -1, "12"],
        ["c", naive, dt.datetime(2024, 5, 6, 23, 59), 0, None, None, None, None, None],
    ]
    rows = [schema.convert(FIELDS, v) for v in inputs]
    table, struct = schema.to_arrow(rows)
    assert table.column_names == [*FIELDS, sq.ROW_COLUMN] and struct.names == table.column_names
    assert str(table.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert table.column(sq.ROW_COLUMN).to_pylist() == [0, 1, 2]
    got = [sq.arrow_to_values(table.column(i)) for i in range(len(FIELDS))]
    by_row = [list(r) for r in zip(*got)]
    assert by_row[0] == inputs[0]  # an aware datetime: the same instant, whatever its zone
    assert by_row[0][1].tzinfo is UTC
    assert by_row[1] == ["b", dt.datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC), dt.date(2024, 1, 1),
                         decimal.Decimal("7.000"), b"z", False, 3.0, -1, 12]
    # a naive datetime is local time, as Spark's own conversion reads it; a datetime in a date
    # field is its date
    assert by_row[2] == ["c", naive.astimezone(UTC), dt.date(2024, 5, 6), decimal.Decimal("0.000"),
                         None, None, None, None, None]
    for row in by_row:
        assert [type(v) for v in row] == [type(v) for v in wire_roundtrip(row)]
        assert wire_roundtrip(row) == row


def test_arrow_result_columns_become_tuple_values() -> None:
    us = 1_700_000_000_123_456
    ts = pa.array([us, None, -5], pa.int64())
    assert sq.arrow_to_values(ts.cast(pa.timestamp("us", tz="UTC"))) == [
        dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC), None,
        dt.datetime(1969, 12, 31, 23, 59, 59, 999995, tzinfo=UTC)]
    ntz = sq.arrow_to_values(pa.chunked_array([ts.cast(pa.timestamp("us"))]))
    assert ntz == [dt.datetime(2023, 11, 14, 22, 13, 20, 123456), None, dt.datetime(1969, 12, 31, 23, 59, 59, 999995)]
    # maps are dicts at any depth (Arrow's own Python value of a map is a list of pairs)
    nested_t = pa.struct([("m", pa.map_(pa.string(), pa.list_(pa.map_(pa.int64(), pa.string())))), ("n", pa.int64())])
    nested = pa.array([{"m": [("a", [[(1, "x")], None])], "n": 5}, None, {"m": None, "n": None}], nested_t)
    assert sq.arrow_to_values(nested) == [{"m": {"a": [{1: "x"}, None]}, "n": 5}, None, {"m": None, "n": None}]
    assert sq.arrow_to_values(pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64()))) == [{"k": 1}, {}]


def test_an_empty_batch_and_a_field_never_seen_with_a_value() -> None:
    schema = sq.BatchSchema({"id": "string"})
    schema.bind(["id", "later"])
    table, _ = schema.to_arrow([])
    assert table.num_rows == 0 and table.column_names == ["id", "later", sq.ROW_COLUMN]
    table, struct = schema.to_arrow([schema.convert(["id", "later"], ["a", None])])  # no type yet: string
    assert sq.arrow_to_values(table.column("later")) == [None] and struct["later"].dataType.typeName() == "string"


def test_a_timestamp_out_of_range_is_a_schema_error() -> None:
    schema = sq.BatchSchema({"ts": "timestamp"})
    for bad in (1e20, -1e20, 2**70):
        with pytest.raises(sq.SchemaError, match="field 'ts': timestamp .* is out of range"):
            schema.convert(["ts"], [bad])


def tuple_of(fields: list[str], values: list[Any]) -> Any:
    from squall.components import Tuple

    return Tuple(values, 1, "src", "default", {f: i for i, f in enumerate(fields)}, None)


FAST_FIELDS = ["id", "ts", "n", "ratio", "ok", "small", "price", "free"]
FAST_SCHEMA = {"id": "string", "ts": "timestamp", "n": "bigint", "ratio": "double", "ok": "boolean",
               "small": "smallint", "price": "decimal(10,3)"}  # "free" is inferred


def batch_both_ways(batch: list[list[Any]]) -> tuple[Any, Any, list[Any]]:
    """The batch through take + to_arrow(rows, sigs) (columns converted whole where the types
    allow) and through convert + to_arrow(rows) (value by value): the tables, and the signatures.
    A first row (not in the batch) fixes the inferred type of "free"."""
    columnar, by_value = sq.BatchSchema(FAST_SCHEMA, required=["id"]), sq.BatchSchema(FAST_SCHEMA, required=["id"])
    first = ["z", 0, 0, 0.0, False, 0, None, 0]
    assert columnar.take(tuple_of(FAST_FIELDS, first))[1] is None  # "free" had no type yet: value by value
    by_value.convert(FAST_FIELDS, first)
    taken = [columnar.take(tuple_of(FAST_FIELDS, v)) for v in batch]
    rows = [by_value.convert(FAST_FIELDS, v) for v in batch]
    return columnar.to_arrow([r for r, _ in taken], [s for _, s in taken])[0], by_value.to_arrow(rows)[0], [s for _, s in taken]


def test_columns_converted_whole_equal_the_value_by_value_conversion() -> None:
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    naive = dt.datetime(2024, 3, 31, 1, 30, 0, 250)
    fast = [["a", 1_700_000_000, 2**62, 0.5, True, -7, None, 3],
            ["b", 1_700_000_001, None, 1.5, False, 2**15 - 1, None, 4],
            ["c", None, -(2**63), None, None, None, None, None]]
    datetimes = [["d", dt.datetime(2024, 3, 31, 3, 30, tzinfo=berlin), 1, 1.0, True, 1, None, 5],
                 ["e", naive, 2, 2.0, False, 2, None, 6], ["f", None, 3, 3.0, True, 3, None, 7]]
    mixed_kinds = [["g", 1_700_000_000, 1, 1.0, True, 1, None, 1],
                   ["h", dt.datetime(2024, 1, 1, tzinfo=UTC), 2, 2.0, False, 2, None, 2]]
    slow = [["i", "2024-01-01T00:00:00+01:00", 1, 1.0, True, 1, None, 1],  # ISO text: value by value
            ["j", 1_700_000_000, "12", 3, "true", 1, None, 2], ["k", 1_700_000_000.25, 1, 1.0, True, 1, None, 3],
            ["l", 1_700_000_000, 1, 1.0, True, 1, decimal.Decimal("1.5"), 4]]  # a decimal: value by value
    for batch in (fast, datetimes, mixed_kinds, slow, fast + slow + datetimes):
        columnar, by_value, sigs = batch_both_ways(batch)
        assert columnar.equals(by_value), (columnar, by_value)
        assert all((s is not None) == (row not in slow) for s, row in zip(sigs, batch))


def test_take_rejects_what_convert_rejects() -> None:
    schema = sq.BatchSchema(FAST_SCHEMA, required=["id"])
    schema.take(tuple_of(FAST_FIELDS, ["a", 1, 1, 1.0, True, 1, None, 1]))  # binds, infers "free"
    bad = {
        "field 'n': 9223372036854775808 is out of range for bigint": ["a", 1, 2**63, 1.0, True, 1, None, 1],
        "field 'small': 32768 is out of range for smallint": ["a", 1, 1, 1.0, True, 2**15, None, 1],
        "field 'n': expected bigint, got a boolean": ["a", 1, True, 1.0, True, 1, None, 1],
        "field 'ts': timestamp 100000000000000000000 is out of range": ["a", 10**20, 1, 1.0, True, 1, None, 1],
        "field 'id' is required and is null": [None, 1, 1, 1.0, True, 1, None, 1],
        "field 'ok': expected boolean, got int": ["a", 1, 1, 1.0, 1, 1, None, 1],
        "7 values for 8 fields": ["a", 1, 1, 1.0, True, 1, None],
    }
    for reason, values in bad.items():
        with pytest.raises(sq.SchemaError) as err:
            schema.take(tuple_of(FAST_FIELDS, values))
        assert reason in str(err.value), (reason, err.value)
        with pytest.raises(sq.SchemaError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            schema.convert(FAST_FIELDS, values)
