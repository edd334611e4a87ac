"""Declared field types and the conversion of tuple values to Spark and back: a batch's rows
become an Arrow table a column at a time (`BatchSchema`), collected Arrow columns become tuple
values again (`arrow_to_values`, `to_wire`)."""

from __future__ import annotations

import datetime as _dt
import decimal
import importlib.util
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from squall.components import Tuple
from squall.spark.session import get_spark

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("squall.spark")

ROW_COLUMN = "_squall_row"  # the input row's index in its batch, for per-row anchoring

# pyarrow comes with the spark extra; without it the bolts fall back to Spark's row-by-row
# conversion (correct, about 10x slower) and say so once.
HAVE_ARROW = importlib.util.find_spec("pyarrow") is not None


# -- schema: declared types and the conversion of tuple values --------------------------------
class SchemaError(ValueError):
    """A value does not convert to its field's declared type."""


_INT_RANGES = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_ALIASES = {
    "byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint",
    "bool": "boolean", "real": "float", "str": "string", "text": "string",
}
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def _to_int(name: str) -> Callable[[Any], int]:
    lo, hi = _INT_RANGES[name]

    def conv(v: Any) -> int:
        if isinstance(v, bool):
            raise SchemaError(f"expected {name}, got a boolean")
        if isinstance(v, int):
            out = v
        elif isinstance(v, float) and v.is_integer():
            out = int(v)
        elif isinstance(v, str) and re.fullmatch(r"\s*[-+]?\d+\s*", v):
            out = int(v)
        else:
            raise SchemaError(f"expected {name}, got {type(v).__name__} {v!r:.60}")
        if not lo <= out <= hi:
            raise SchemaError(f"{out} is out of range for {name}")
        return out

    return conv


def _to_float(name: str) -> Callable[[Any], float]:
    def conv(v: Any) -> float:
        if isinstance(v, bool):
            raise SchemaError(f"expected {name}, got a boolean")
        if isinstance(v, (int, float, decimal.Decimal)):
            return float(v)
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                pass
        raise SchemaError(f"expected {name}, got {type(v).__name__} {v!r:.60}")

    return conv


def _to_string(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise SchemaError(f"expected string, got {type(v).__name__} {v!r:.60}")


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise SchemaError(f"expected boolean, got {type(v).__name__} {v!r:.60}")


def _aware(v: _dt.datetime) -> _dt.datetime:
    """An aware datetime; a naive one is read as the process's local time, as Spark's own
    conversion of Python values reads it."""
    return v if v.tzinfo is not None else v.astimezone(_dt.timezone.utc)


def _to_timestamp(v: Any) -> _dt.datetime:
    if isinstance(v, _dt.datetime):
        return _aware(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise SchemaError(f"expected timestamp, got {v!r}")
        try:
            return _dt.datetime.fromtimestamp(v, tz=_dt.timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise SchemaError(f"timestamp {v!r} is out of range") from None
    if isinstance(v, str):
        try:
            return _aware(_dt.datetime.fromisoformat(v))
        except ValueError:
            pass
    raise SchemaError(f"expected timestamp (datetime, epoch seconds or ISO 8601), got {type(v).__name__} {v!r:.60}")


def _to_date(v: Any) -> _dt.date:
    if isinstance(v, _dt.datetime):
        return v.date()
    if isinstance(v, _dt.date):
        return v
    if isinstance(v, str):
        try:
            return _dt.date.fromisoformat(v)
        except ValueError:
            pass
    raise SchemaError(f"expected date (date or YYYY-MM-DD), got {type(v).__name__} {v!r:.60}")


def _to_binary(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    raise SchemaError(f"expected binary, got {type(v).__name__}")


def _to_decimal(precision: int, scale: int) -> Callable[[Any], decimal.Decimal]:
    quantum = decimal.Decimal(1).scaleb(-scale)

    def conv(v: Any) -> decimal.Decimal:
        if isinstance(v, bool) or not isinstance(v, (int, float, str, decimal.Decimal)):
            raise SchemaError(f"expected decimal({precision},{scale}), got {type(v).__name__}")
        try:
            d = decimal.Decimal(str(v)).quantize(quantum, rounding=decimal.ROUND_HALF_EVEN)
        except decimal.InvalidOperation:
            raise SchemaError(f"expected decimal({precision},{scale}), got {v!r:.60}") from None
        if len(d.as_tuple().digits) > precision:
            raise SchemaError(f"{v!r:.60} does not fit decimal({precision},{scale})")
        return d

    return conv


# Epoch seconds a `timestamp` field converts a column at a time (years 1900 to 9998): whole
# seconds in this range convert exactly (seconds * 10^6 microseconds); others go value by value.
_TS_FAST_RANGE = (-2_208_988_800, 253_370_764_800)


class FieldType:
    """One field's Spark type and the converter of a tuple value to it.

    `fast`: the value types that are already what the converter makes of them (or, for a
    timestamp's epoch seconds and datetimes, that a whole column converts at once); `int_range`:
    the range an int of those must lie in. Rows whose values all have fast types are converted a
    column at a time at the flush (BatchSchema.take / to_arrow)."""

    def __init__(self, name: str) -> None:
        from pyspark.sql import types as T

        self.name = name.strip().lower()
        n = _ALIASES.get(self.name, self.name)
        self.convert: Callable[[Any], Any]
        self.fast: frozenset[type] = frozenset()
        self.int_range: tuple[int, int] | None = None
        simple: dict[str, tuple[DataType, Callable[[Any], Any]]] = {
            "string": (T.StringType(), _to_string),
            "tinyint": (T.ByteType(), _to_int("tinyint")),
            "smallint": (T.ShortType(), _to_int("smallint")),
            "int": (T.IntegerType(), _to_int("int")),
            "bigint": (T.LongType(), _to_int("bigint")),
            "double": (T.DoubleType(), _to_float("double")),
            "float": (T.FloatType(), _to_float("float")),
            "boolean": (T.BooleanType(), _to_bool),
            "timestamp": (T.TimestampType(), _to_timestamp),
            "date": (T.DateType(), _to_date),
            "binary": (T.BinaryType(), _to_binary),
        }
        if n in simple:
            self.data_type, self.convert = simple[n]
            if n in _INT_RANGES:
                self.fast, self.int_range = frozenset({int}), _INT_RANGES[n]
            elif n in ("double", "float"):
                self.fast = frozenset({float})
            elif n == "string":
                self.fast = frozenset({str})
            elif n == "boolean":
                self.fast = frozenset({bool})
            elif n == "timestamp":
                self.fast, self.int_range = frozenset({int, _dt.datetime}), _TS_FAST_RANGE
            return
        m = _DECIMAL.match(n)
        if m:
            p, s = int(m.group(1)), int(m.group(2))
            self.data_type, self.convert = T.DecimalType(p, s), _to_decimal(p, s)
            return
        # anything else (array<...>, map<...>, struct<...>): Spark parses it, Spark's verifier checks
        get_spark()
        self.data_type = T._parse_datatype_string(name)
        verify = T._make_type_verifier(self.data_type, nullable=True)

        def conv(v: Any) -> Any:
            try:
                verify(v)
            except (TypeError, ValueError) as exc:
                raise SchemaError(str(exc)) from None
            return v

        self.convert = conv


def infer_type(value: Any) -> str | None:
    """A type name for a value seen on a field with no declared type (None: cannot tell yet)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, _dt.datetime):
        return "timestamp"
    if isinstance(value, _dt.date):
        return "date"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, decimal.Decimal):
        return "decimal(38,18)"
    raise SchemaError(f"cannot infer a Spark type for {type(value).__name__}; declare it in spark.schema")


class BatchSchema:
    """The schema of a bolt's input batches: the declared input fields, with types from
    `spark.schema` (field -> Spark type) or, for undeclared fields, inferred from the first
    non-null value seen and then fixed for the bolt's life."""

    def __init__(self, declared: Mapping[str, str], required: Sequence[str] = ()) -> None:
        self.declared = {k: FieldType(v) for k, v in declared.items()}
        self.required = set(required)
        self.fields: list[str] | None = None
        self.types: dict[str, FieldType] = dict(self.declared)
        self._seen_fields: object = None  # the last field mapping found equal to `fields`
        self._signatures: dict[tuple[type, ...], _Signature] = {}

    def bind(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)
        unknown = set(self.declared) - set(self.fields)
        if unknown:
            log.warning("spark.schema names fields the input does not declare: %s", sorted(unknown))

    def convert_tuple(self, tup: Tuple) -> tuple[Any, ...]:
        """`convert` for an input tuple. Tuples of one stream share their field mapping, so
        the fields are compared once per mapping, not once per tuple."""
        self._check_fields(tup._fields)
        return self._convert(self.fields, tup.values)  # type: ignore[arg-type]

    def take(self, tup: Tuple) -> tuple[Sequence[Any], _Signature | None]:
        """An input tuple's row for the batch, checked as `convert_tuple` checks it (SchemaError
        with the reason). When the types of its values allow (see FieldType.fast), the row is the
        tuple's own values, converted later a column at a time by `to_arrow`, and the returned
        signature says so; otherwise it is the converted row, and the signature None."""
        self._check_fields(tup._fields)
        values = tup.values
        key = tuple(map(type, values))
        sig = self._signatures.get(key)
        if sig is None:
            sig = self._signature(key)
        if sig.fast:
            for i, lo, hi in sig.checks:
                if not lo <= values[i] <= hi:
                    break
            else:
                return values, sig
        return self._convert(self.fields, values), None  # type: ignore[arg-type]

    def _check_fields(self, fields: Any) -> None:
        if fields is self._seen_fields:
            return
        names = list(fields)
        if self.fields is None:
            self.bind(names)
        if names != self.fields:
            raise SchemaError(f"fields {names} do not match the batch's fields {self.fields}")
        self._seen_fields = fields

    def _signature(self, key: tuple[type, ...]) -> _Signature:
        """Whether rows whose values have these types convert a column at a time. Remembered
        once every field has a type (an inferred type is fixed by the first value seen)."""
        assert self.fields is not None
        slow = _Signature(key, False, ())
        if len(key) != len(self.fields):
            return slow
        checks = []
        for i, (f, vt) in enumerate(zip(self.fields, key)):
            t = self.types.get(f)
            if t is None:
                return slow  # not remembered: the type is inferred later
            if vt is type(None):
                if f in self.required:
                    return self._remember(slow)
            elif vt not in t.fast:
                return self._remember(slow)
            elif vt is int and t.int_range is not None:
                checks.append((i, *t.int_range))
        return self._remember(_Signature(key, True, tuple(checks)))

    def _remember(self, sig: _Signature) -> _Signature:
        if len(self._signatures) < 256:  # bounded: distinct type combinations are few
            self._signatures[sig.key] = sig
        return sig

    def converted(self, rows: Sequence[Sequence[Any]], sigs: Sequence[_Signature | None] | None) -> list[tuple[Any, ...]]:
        """Rows from `take` all converted, as `convert` makes them."""
        if sigs is None:
            return [tuple(r) for r in rows]
        fields = self.fields
        assert fields is not None
        return [tuple(r) if s is None else self._convert(fields, r) for r, s in zip(rows, sigs)]

    def convert(self, fields: Sequence[str], values: Sequence[Any]) -> tuple[Any, ...]:
        """The row for one tuple, or SchemaError with the reason."""
        if self.fields is None:
            self.bind(fields)
        if list(fields) != self.fields:
            raise SchemaError(f"fields {list(fields)} do not match the batch's fields {self.fields}")
        return self._convert(self.fields, values)

    def _convert(self, fields: list[str], values: Sequence[Any]) -> tuple[Any, ...]:
        if len(values) != len(fields):
            raise SchemaError(f"{len(values)} values for {len(fields)} fields")
        row: list[Any] = []
        types = self.types
        for f, v in zip(fields, values):
            if v is None:
                if f in self.required:
                    raise SchemaError(f"field {f!r} is required and is null")
                row.append(None)
                continue
            t = types.get(f)
            if t is None:
                name = infer_type(v)
                assert name is not None
                t = types[f] = FieldType(name)
            try:
                row.append(t.convert(v))
            except SchemaError as exc:
                raise SchemaError(f"field {f!r}: {exc}") from None
        return tuple(row)

    def struct(self, with_row: bool = True) -> StructType:
        from pyspark.sql import types as T

        assert self.fields is not None
        cols = [
            T.StructField(f, self.types[f].data_type if f in self.types else T.StringType(), f not in self.required)
            for f in self.fields
        ]
        if with_row:
            cols.append(T.StructField(ROW_COLUMN, T.IntegerType(), False))
        return T.StructType(cols)

    def to_arrow(self, rows: Sequence[Sequence[Any]],
                 sigs: Sequence[_Signature | None] | None = None) -> tuple[pa.Table, StructType]:
        """The batch as one Arrow table (a column per field, then the row index), and its Spark
        schema. `rows` are converted rows, or with `sigs` what `take` returned (when every row
        has a signature, the columns are converted whole: one pass per column, no per-value
        Python objects for a timestamp's epoch seconds). Raises pyarrow's ArrowException (or
        TypeError) for a value Arrow does not take as its column's type (a struct given as a
        tuple in one row and a dict in another, say) as a SchemaError naming the field: the
        caller falls back to rows."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        struct = self.struct()
        schema = to_arrow_schema(struct, timezone="UTC")
        n = len(rows)
        kinds: list[set[type]] | None = None
        if sigs is not None and n:
            distinct = set(sigs)
            if None in distinct:
                rows, sigs = self.converted(rows, sigs), None
            else:  # the value types of each column, over the batch
                kinds = [set() for _ in range(len(struct.fields) - 1)]
                for sig in distinct:
                    assert sig is not None
                    for k, vt in zip(kinds, sig.key):
                        k.add(vt)
        arrays = []
        for i, field in enumerate(list(schema)[:-1]):
            try:
                if kinds is None:
                    col: Any = [r[i] for r in rows] if n else []
                    arrays.append(pa.array(col, type=field.type))
                else:
                    arrays.append(self._column(list(map(itemgetter(i), rows)), kinds[i], field.type, struct.fields[i].name))
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise SchemaError(f"field {field.name!r}: {exc}") from exc
        arrays.append(pa.array(range(n), type=pa.int32()))
        return pa.Table.from_arrays(arrays, schema=schema), struct

    def _column(self, values: list[Any], kinds: set[type], arrow_type: Any, name: str) -> pa.Array:
        """One column of rows that `take` passed as they were: Arrow converts it whole where its
        values' type allows, else each value is converted as `convert` does."""
        import pyarrow as pa
        import pyarrow.compute as pc

        kinds = kinds - {type(None)}
        if not kinds:
            return pa.nulls(len(values), type=arrow_type)
        if pa.types.is_timestamp(arrow_type):
            if kinds == {int}:  # epoch seconds, range-checked by take
                return pc.multiply(pa.array(values, type=pa.int64()), 1_000_000).cast(arrow_type)
            if kinds == {_dt.datetime}:  # naive ones are local time, as _to_timestamp reads them
                utc = _dt.timezone.utc
                return pa.array([v if v is None or v.tzinfo is not None else v.astimezone(utc) for v in values],
                                type=arrow_type)
        elif len(kinds) == 1:  # str, int (range-checked), float or bool: the values as they are
            return pa.array(values, type=arrow_type)
        convert = self.types[name].convert
        return pa.array([None if v is None else convert(v) for v in values], type=arrow_type)


class _Signature:
    """The value types of a batch row (`key`) and whether such rows convert a column at a time
    (`fast`), given the int range `checks` (index, low, high) pass."""

    __slots__ = ("key", "fast", "checks")

    def __init__(self, key: tuple[type, ...], fast: bool, checks: tuple[tuple[int, int, int], ...]) -> None:
        self.key, self.fast, self.checks = key, fast, checks


def to_wire(value: Any) -> Any:
    """A value of a collected Spark Row as a tuple value. The wire carries datetime, date,
    Decimal and bytes as they are, so they stay exact; Rows and maps become dicts, arrays lists."""
    if value is None or isinstance(value, (str, int, float, bool, bytes, _dt.date, _dt.time, decimal.Decimal)):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if hasattr(value, "asDict"):
        return {k: to_wire(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {to_wire(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v) for v in value]
    return str(value)


def _has_map(t: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_map(t.value_type)
    return False


def _maps_to_dicts(value: Any, t: Any) -> Any:
    """Arrow's Python value of a map is a list of (key, value) pairs: make it a dict, as a
    collected Row's is, at any depth."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_map(t):
        return {_maps_to_dicts(k, t.key_type): _maps_to_dicts(v, t.item_type) for k, v in value}
    if pa.types.is_struct(t):
        return {t.field(i).name: _maps_to_dicts(value[t.field(i).name], t.field(i).type) for i in range(t.num_fields)}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_maps_to_dicts(v, t.value_type) for v in value]
    return value


_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)


def arrow_to_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """One Arrow column as tuple values: timestamps as aware datetimes (UTC), timestamp_ntz as
    naive ones, dates, Decimals, bytes, structs as dicts, arrays as lists, maps as dicts."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_timestamp(t) and t.unit == "us":
        # pyarrow's own to_pylist looks the zone up for every value (several us each): the
        # epoch plus a timedelta is the same instant, exactly, at a fraction of the cost
        epoch = _EPOCH_UTC if t.tz is not None else _EPOCH_NAIVE
        delta = _dt.timedelta
        return [None if us is None else epoch + delta(0, 0, us) for us in column.cast(pa.int64()).to_pylist()]
    values: list[Any] = column.to_pylist()
    if _has_map(t):
        return [_maps_to_dicts(v, t) for v in values]
    return values


def dumps_values(values: Sequence[Any]) -> str:
    """Values as JSON for logs and error files (anything JSON cannot say becomes a string)."""
    return json.dumps(list(values), default=str)
