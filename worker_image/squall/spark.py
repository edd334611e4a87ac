"""Squall on Spark: micro-batch bolts, a dataset sink and a dataset source, through PySpark.

- `SparkBatchBolt` collects input tuples into micro-batches (by count and by time), turns each
  batch into a DataFrame whose columns are the input's declared fields (an Apache Arrow table
  built a column at a time, read by Spark as a Parquet file with a local master, else handed
  to createDataFrame whole; never row by row), applies a transform
  (`transform(df, spark)` or the config key `spark.transform: module:function`), emits the result
  rows (collected as Arrow) as tuples anchored to the batch's inputs and acks the inputs only
  after Spark succeeded. Values keep their types: datetime, date, Decimal and bytes go in and
  come out as themselves (the wire carries them).
  A Spark failure fails every input of the batch, so the spouts replay them.
- `SparkSinkBolt` appends micro-batches to a dataset (Parquet by default) partitioned by a time
  column; every row keeps the id of the spout message it came from (the id field) and the id of
  the batch that wrote it, so readers can deduplicate replays (`read_dataset(..., dedup=True)`).
- `SparkSourceSpout` reads a dataset through Spark (any format or a table) and emits its rows
  with message ids; failed rows are replayed.

One SparkSession per worker process, shared by its executors, created lazily by
`get_spark(conf)` from the topology config (`spark.master`, `spark.app.name`,
`spark.conf.<spark key>`) and stopped when the process exits (an atexit hook). See docs/spark.md.

The id convention: the spout puts the message id into the values as a declared field (default
name `msg_id`, configurable), and every bolt keeps that field, so the sink can store it.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import decimal
import importlib
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

from squall.components import DEFAULT_STREAM, Bolt, Spout, Tuple

if importlib.util.find_spec("pyspark") is None:  # checked without importing Spark (slow)
    raise ImportError(
        "squall.spark needs PySpark, which is Squall's optional 'spark' extra: "
        "pip install 'squall[spark]' (the squall-worker image has it)",
        name="pyspark",
    )

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("squall.spark")

# Defaults, chosen from the benchmark in docs/performance.md ("Spark").
DEFAULT_BATCH_SIZE = 2000
DEFAULT_BATCH_INTERVAL_SECS = 0.5
# from this many rows a batch goes into Spark as a Parquet file (local master): below it,
# createDataFrame's smaller fixed cost per batch wins (docs/performance.md, "Spark")
PARQUET_MIN_ROWS = 5000
DEFAULT_MASTER = "local[*]"
ERROR_STREAM = "errors"
ERROR_FIELDS = ["reason", "values"]
DEFAULT_ID_FIELD = "msg_id"
ROW_COLUMN = "_squall_row"  # the input row's index in its batch, for per-row anchoring
BATCH_COLUMN = "_batch_id"

# Spark settings applied unless the topology config sets them (spark.conf.<key>): micro-batches
# are small, so few shuffle partitions and no adaptive execution (re-planning each query
# stage cost 0.05-0.1 s of JVM CPU per batch, docs/performance.md "Spark"); no UI port per
# worker; Arrow for a transform's own toPandas / createDataFrame(pandas) too (the bolts use
# Arrow whatever this says).
SESSION_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

# pyarrow comes with the spark extra; without it the bolts fall back to Spark's row-by-row
# conversion (correct, about 10x slower) and say so once.
HAVE_ARROW = importlib.util.find_spec("pyarrow") is not None

# -- the per-process SparkSession -----------------------------------------------------------
_session_lock = threading.Lock()
_session: SparkSession | None = None


def spark_settings(conf: Mapping[str, Any]) -> dict[str, str]:
    """The Spark settings a config asks for: defaults, then every `spark.conf.<key>: value`."""
    out = {**SESSION_DEFAULTS, "spark.pyspark.python": sys.executable}
    for key, value in conf.items():
        if key.startswith("spark.conf."):
            out[key[len("spark.conf."):]] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def get_spark(conf: Mapping[str, Any] | None = None) -> SparkSession:
    """The SparkSession of this process, created on first use from `conf` (the topology config).

    Later calls return the same session whatever their conf: put Spark keys in the topology's
    `spec.config` so every component of a worker agrees. A session created before (by a test or
    a driver program) is reused."""
    global _session
    with _session_lock:
        if _session is not None and _session.sparkContext._jsc is not None:  # not stopped
            return _session
        from pyspark.sql import SparkSession

        conf = conf or {}
        name = conf.get("spark.app.name") or f"squall-{conf.get('topology.name', 'local')}"
        builder = SparkSession.builder.appName(str(name))
        active = SparkSession.getActiveSession()
        if active is None:
            builder = builder.master(str(conf.get("spark.master", DEFAULT_MASTER)))
            for key, value in spark_settings(conf).items():
                builder = builder.config(key, value)
        t0 = time.monotonic()
        _session = builder.getOrCreate()
        # Stopped when the process exits: a worker's executors share the session, so no one of
        # them may stop it. atexit runs last-registered first, so this runs before PySpark's own
        # hook kills the JVM.
        atexit.unregister(stop_spark)
        atexit.register(stop_spark)
        log.info("SparkSession ready in %.1fs (master %s)", time.monotonic() - t0, _session.sparkContext.master)
        return _session


_batch_dir: str | None = None


def batch_dir() -> str:
    """This process's directory for batch files (SparkBatchBolt's way into Spark), created on
    first use under the system's temp directory and removed when the process exits."""
    global _batch_dir
    with _session_lock:
        if _batch_dir is None or not os.path.isdir(_batch_dir):
            _batch_dir = tempfile.mkdtemp(prefix="squall-spark-batches-")
            atexit.register(shutil.rmtree, _batch_dir, True)
        return _batch_dir


def stop_spark() -> None:
    """Stop this process's session: at process exit (registered by get_spark), or by tests and
    benchmarks; the next get_spark starts a new one."""
    global _session
    with _session_lock:
        if _session is not None:
            session, _session = _session, None
            try:
                session.stop()
            except Exception:  # at exit the JVM may already be gone: nothing left to stop
                log.debug("stopping the SparkSession failed", exc_info=True)


def load_function(ref: str) -> Callable[..., Any]:
    """`module:function` (dots allowed after the colon) -> the callable."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ValueError(f"expected module:function, got {ref!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    return obj  # type: ignore[no-any-return]


def _conf_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _prefixed(conf: Mapping[str, Any], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: str(v) for k, v in conf.items() if k.startswith(prefix)}


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


# -- the micro-batch bolt ----------------------------------------------------------------------
class SparkBatchError(RuntimeError):
    """A micro-batch failed in Spark; its inputs were failed (the spouts replay them)."""


class SparkBatchBolt(Bolt):
    """Micro-batches through Spark. Subclass it and override `transform`, or name a function
    with `spark.transform: module:function` (called as `function(df, spark)`).

    Component config (topology config works too):
      spark.batch.size          flush a batch at this many tuples (default 2000)
      spark.batch.interval.secs flush a non-empty batch this old (default 0.5); needs tick
                                tuples (`topology.tick.tuple.freq.secs`) to flush an idle bolt
      spark.schema              {field: Spark type} for input fields; others are inferred
      spark.schema.required     fields that must not be null
      spark.transform           module:function, DataFrame -> DataFrame
      spark.output.fields       fields of the emitted tuples (default: the declared default stream)
      spark.batch.input         auto (default: Parquet file from spark.batch.parquet.min.rows rows
                                with a local master, else createDataFrame), parquet or arrow
      spark.batch.parquet.files split a Parquet batch into up to this many files, one Spark task
                                each, at least spark.batch.parquet.min.rows rows a file
                                (default: the session's default parallelism)
      spark.batch.overlap       take the next batch while the bolt's Spark thread runs the last
                                (default false); results are emitted on the executor's thread
      spark.master, spark.app.name, spark.conf.<key>: the process's SparkSession

    Input rows that do not fit the schema go to the `errors` stream as [reason, values] (declare
    it: `outputs = {"default": [...], "errors": ERROR_FIELDS}`) and their inputs are acked. The
    DataFrame given to `transform` has the column `_squall_row`; result rows that keep it are
    anchored to their own input, other rows to every input of the batch.
    """

    outputs: ClassVar[Any] = {DEFAULT_STREAM: [], ERROR_STREAM: ERROR_FIELDS}
    schema: Mapping[str, str] = {}  # field -> Spark type; config spark.schema wins

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.batch_size = max(1, int(conf.get("spark.batch.size", DEFAULT_BATCH_SIZE)))
        self.batch_interval = float(conf.get("spark.batch.interval.secs", DEFAULT_BATCH_INTERVAL_SECS))
        declared = {**self.schema, **dict(conf.get("spark.schema") or {})}
        self.input_schema = BatchSchema(declared, _conf_list(conf.get("spark.schema.required")))
        ref = conf.get("spark.transform")
        self._transform_fn = load_function(str(ref)) if ref else None
        self.output_fields = _conf_list(conf.get("spark.output.fields")) or self._declared_fields(DEFAULT_STREAM)
        self.error_stream = str(conf.get("spark.errors.stream", ERROR_STREAM))
        self.batch: list[Tuple] = []
        self.rows: list[Sequence[Any]] = []  # BatchSchema.take's rows and their signatures
        self.sigs: list[_Signature | None] = []
        self.batch_input = str(conf.get("spark.batch.input", "auto"))
        if self.batch_input not in ("auto", "parquet", "arrow"):
            raise ValueError(f"spark.batch.input must be auto, parquet or arrow, not {self.batch_input!r}")
        self.parquet_min_rows = int(conf.get("spark.batch.parquet.min.rows", PARQUET_MIN_ROWS))
        try:  # 0: the session's default parallelism, read at the first Parquet batch
            self._files_per_batch = int(conf.get("spark.batch.parquet.files") or 0)
        except ValueError:
            raise ValueError("spark.batch.parquet.files must be a whole number of files,"
                             f" not {conf.get('spark.batch.parquet.files')!r}") from None
        if self._files_per_batch < 0:
            raise ValueError(f"spark.batch.parquet.files must be 0 (the default parallelism) or more, not {self._files_per_batch}")
        self.overlap = str(conf.get("spark.batch.overlap", False)).lower() in ("true", "1", "yes")
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: tuple[list[Tuple], Future[list[tuple[list[Any], str, Any]]]] | None = None
        self._emits = _KeptEmits(collector)
        if self.overlap:  # what the Spark thread emits waits for the executor's thread
            self.collector = self._emits
        self.batch_dir = conf.get("spark.batch.dir")
        self._local_master: bool | None = None
        self.last_input = ""  # the way the last batch went into Spark: parquet, arrow or rows
        self._files: list[str] = []
        self.batch_started = 0.0
        self.batches = 0
        self.batches_failed = 0
        self.rows_emitted = 0
        self.rows_rejected = 0
        self._warned: set[str] = set()
        tick = conf.get("topology.tick.tuple.freq.secs")
        if not tick:
            log.warning(
                "%s: no tick tuples (topology.tick.tuple.freq.secs); a partial batch waits for"
                " the next tuple to be flushed by time", getattr(context, "component_id", "?"))
        timeout = conf.get("topology.message.timeout.secs")
        if timeout and self.batch_interval >= float(timeout):
            log.warning("spark.batch.interval.secs %s >= the message timeout %s: tuples will time out",
                        self.batch_interval, timeout)

    def _declared_fields(self, stream: str) -> list[str]:
        declared = getattr(self.context, "output_fields", None)  # the file's outputs win over the class's
        if declared is not None:
            fields = list(declared(stream))
            if fields:
                return fields
        outputs = type(self).outputs
        if isinstance(outputs, Mapping):
            return list(outputs.get(stream, []))
        return list(outputs or []) if stream == DEFAULT_STREAM else []

    # -- the user's part -------------------------------------------------------------------
    def transform(self, df: DataFrame, spark: SparkSession) -> DataFrame:
        """DataFrame -> DataFrame: any PySpark transform, SQL, or a fitted ML pipeline."""
        if self._transform_fn is not None:
            return self._transform_fn(df, spark)  # type: ignore[no-any-return]
        return df

    # -- batching --------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if self._inflight is not None:
            self._finish_overlapped(wait=False)
        if tup.is_tick():
            if self.batch and time.monotonic() - self.batch_started >= self.batch_interval:
                self._flush_due()
            return
        try:
            row, sig = self.input_schema.take(tup)
        except SchemaError as exc:
            self.reject(tup, str(exc))
            return
        now = time.monotonic()
        if not self.batch:
            self.batch_started = now
        self.batch.append(tup)
        self.rows.append(row)
        self.sigs.append(sig)
        if len(self.batch) >= self.batch_size or now - self.batch_started >= self.batch_interval:
            self._flush_due()

    def reject(self, tup: Tuple, reason: str) -> None:
        """A bad input: [reason, values] on the errors stream, and the input is acked."""
        self.rows_rejected += 1
        try:
            self.collector.emit([reason, list(tup.values)], stream=self.error_stream, anchors=tup)
        except ValueError as exc:  # no errors stream declared: report it instead
            self.collector.report_error(SchemaError(f"{reason} (and {exc})"))
        self.collector.ack(tup)

    def flush(self) -> None:
        """Run the current batch through Spark; ack its inputs after success, fail them on error.
        With `spark.batch.overlap`, the batch still running is finished first: when flush
        returns, every batch taken so far is done."""
        self._finish_overlapped(wait=True)
        batch, rows, sigs = self.batch, self.rows, self.sigs
        self.batch, self.rows, self.sigs = [], [], []
        if not batch:
            return
        self.batches += 1
        try:
            self._run_batch(batch, rows, sigs)
        except Exception as exc:
            self._batch_failed(batch, exc)
            return
        for t in batch:
            self.collector.ack(t)

    def _run_batch(self, batch: list[Tuple], rows: list[Sequence[Any]], sigs: list[_Signature | None]) -> None:
        spark = get_spark(self.conf)
        try:
            df = self.dataframe(rows, spark, sigs)
            self.handle_result(self.transform(df, spark), batch, spark)
        finally:
            self._remove_files()

    def _batch_failed(self, batch: list[Tuple], exc: BaseException) -> None:
        self.batches_failed += 1
        self.collector.report_error(
            SparkBatchError(f"batch of {len(batch)} tuples failed, inputs failed for replay: {exc}"))
        for t in batch:
            self.collector.fail(t)

    def _flush_due(self) -> None:
        """The batch is full or old enough: flush it, or with `spark.batch.overlap` hand it to
        the bolt's Spark thread (after the one before it finished) and go on taking tuples."""
        if not self.overlap:
            self.flush()
            return
        self._finish_overlapped(wait=True)
        batch, rows, sigs = self.batch, self.rows, self.sigs
        self.batch, self.rows, self.sigs = [], [], []
        self.batches += 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"spark-{self.context.component_id}")
        self._inflight = (batch, self._pool.submit(self._overlapped, batch, rows, sigs))

    def _overlapped(self, batch: list[Tuple], rows: list[Sequence[Any]],
                    sigs: list[_Signature | None]) -> list[tuple[list[Any], str, Any]]:
        """On the Spark thread: the batch, with what it emits kept for the executor's thread."""
        out: list[tuple[list[Any], str, Any]] = []
        self._emits.out = out
        try:
            self._run_batch(batch, rows, sigs)
        finally:
            self._emits.out = None
        return out

    def _finish_overlapped(self, wait: bool) -> None:
        """On the executor's thread: emit the result of the batch on the Spark thread and ack its
        inputs (or fail them), once it is done (at once with `wait`)."""
        if self._inflight is None:
            return
        batch, future = self._inflight
        if not wait and not future.done():
            return
        self._inflight = None
        try:
            emitted = future.result()
            emit = self._emits.collector.emit
            for values, stream, anchors in emitted:
                emit(values, stream=stream, anchors=anchors)
        except Exception as exc:
            self._batch_failed(batch, exc)
            return
        for t in batch:
            self.collector.ack(t)

    def cleanup(self) -> None:
        """A batch still on the Spark thread is not acked (its trees fail and are replayed),
        like a partial batch."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def dataframe(self, rows: Sequence[Sequence[Any]], spark: SparkSession,
                  sigs: Sequence[_Signature | None] | None = None) -> DataFrame:
        """A batch's rows (converted, or as `BatchSchema.take` gave them with `sigs`) as a
        DataFrame: one Arrow table, which the JVM reads as a Parquet file (a local master) or
        takes through createDataFrame; for values Arrow does not take as their column's type,
        Spark's row-by-row conversion. The DataFrame is valid until the flush ends (its file is
        removed then): a transform must not keep it for later batches."""
        if HAVE_ARROW:
            import pyarrow as pa

            try:
                table, struct = self.input_schema.to_arrow(rows, sigs)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                self._warn_once("rows", f"{self.context.component_id}: a batch does not convert to Arrow ({exc});"
                                        " it goes to Spark row by row (slower)")
            else:
                return self.arrow_dataframe(table, struct, spark)
        else:
            self._warn_once("no-arrow", "pyarrow is not installed: batches go to Spark row by row (slower);"
                                        " install squall's spark extra")
        rows = self.input_schema.converted(rows, sigs)
        self.last_input = "rows"
        return spark.createDataFrame([(*row, i) for i, row in enumerate(rows)], schema=self.input_schema.struct(),
                                     verifySchema=False)

    def arrow_dataframe(self, table: pa.Table, struct: StructType, spark: SparkSession) -> DataFrame:
        """An Arrow table as a DataFrame. A batch of `spark.batch.parquet.min.rows` rows or more
        with a local master (or any batch with `spark.batch.input: parquet`) is written as an
        uncompressed Parquet file under the worker's batch directory and read by Spark's
        vectorized Parquet reader: about half the JVM CPU per row of createDataFrame(table),
        which parallelizes an RDD of Arrow batches and converts them to rows, for a larger fixed
        cost per batch (docs/performance.md, "Spark"). A large batch is split into
        `spark.batch.parquet.files` files (one task each, so the JVM's cores share the batch)
        read as a union, which keeps the rows in order. Otherwise (a small batch, or executors
        elsewhere, which cannot read a local file) createDataFrame."""
        route = self.batch_input
        if route == "auto":
            if self._local_master is None:
                self._local_master = str(spark.sparkContext.master).startswith("local")
            route = "parquet" if self._local_master and table.num_rows >= self.parquet_min_rows else "arrow"
        self.last_input = route
        if route == "arrow":
            return spark.createDataFrame(table, schema=struct)
        import pyarrow.parquet as pq

        directory = str(self.batch_dir) if self.batch_dir else batch_dir()
        n = table.num_rows
        parts = max(1, min(self._parallelism(spark), n // max(1, self.parquet_min_rows)))
        stem = f"{self.context.component_id}-{self.context.task_id}-{uuid.uuid4().hex}"
        paths = []
        for k in range(parts):
            lo, hi = n * k // parts, n * (k + 1) // parts
            path = os.path.join(directory, f"{stem}-{k}.parquet" if parts > 1 else f"{stem}.parquet")
            self._files.append(path)
            pq.write_table(table.slice(lo, hi - lo), path, compression="none")
            paths.append(path)
        # one scan per file, in order: a union keeps its inputs' partitions in order, where one
        # scan of several files would order them by size (the result's rows would not follow
        # the input's)
        reader = spark.read.schema(struct)
        df = reader.parquet(paths[0])
        for path in paths[1:]:
            df = df.union(reader.parquet(path))
        return df

    def _parallelism(self, spark: SparkSession) -> int:
        if not self._files_per_batch:
            self._files_per_batch = max(1, int(spark.sparkContext.defaultParallelism))
        return self._files_per_batch

    def _remove_files(self) -> None:
        files, self._files = self._files, []
        for path in files:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def collect_columns(self, df: DataFrame) -> list[list[Any]]:
        """A result's columns as lists of tuple values: collected as Arrow, or as Rows where
        Arrow has no type for a column (the values are the same either way)."""
        if HAVE_ARROW:
            from pyspark.sql.pandas.types import to_arrow_schema

            try:
                to_arrow_schema(df.schema, timezone="UTC")
            except Exception as exc:  # an unsupported type: raised before any job runs
                self._warn_once("collect", f"{self.context.component_id}: the result does not convert to Arrow"
                                           f" ({exc}); it is collected row by row (slower)")
            else:
                table = df.toArrow()
                return [arrow_to_values(table.column(i)) for i in range(table.num_columns)]
        rows = df.collect()
        return [[to_wire(row[i]) for row in rows] for i in range(len(df.columns))]

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def handle_result(self, df: DataFrame, batch: list[Tuple], spark: SparkSession) -> None:
        """Collect the result and emit it; raising here fails the batch."""
        fields = self.output_fields
        if not fields:
            df.collect()  # run it anyway: a transform for its side effects
            return
        missing = [f for f in fields if f not in df.columns]
        if missing:
            raise SparkBatchError(f"the transform's result has no column(s) {missing} (columns: {df.columns})")
        lineage = ROW_COLUMN in df.columns
        columns = self.collect_columns(df.select(*fields, ROW_COLUMN) if lineage else df.select(*fields))
        emit = self.collector.emit
        if lineage:
            size = len(batch)
            row_index = columns.pop()
            for values, i in zip(zip(*columns), row_index):
                emit(list(values), anchors=batch[i] if i is not None and 0 <= i < size else batch)
        else:
            for values in zip(*columns):
                emit(list(values), anchors=batch)
        self.rows_emitted += len(columns[0]) if columns else 0


class _KeptEmits(threading.local):
    """The collector of a bolt with `spark.batch.overlap`: an emit on a thread that set `out`
    (the bolt's Spark thread) is kept there, to be emitted by the executor's thread; every other
    call goes to the executor's collector."""

    out: list[tuple[list[Any], str, Any]] | None = None

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def emit(self, values: Any, stream: str = DEFAULT_STREAM, anchors: Any = None) -> list[int]:
        if self.out is None:
            return self.collector.emit(values, stream=stream, anchors=anchors)  # type: ignore[no-any-return]
        self.out.append((list(values), stream, anchors))
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collector, name)


# -- the sink ----------------------------------------------------------------------------------
class SparkSinkBolt(SparkBatchBolt):
    """Appends micro-batches to a dataset; acks a batch's inputs only after the write succeeded.

    Config:
      spark.sink.path              the dataset's directory (or URI: hdfs://, s3a://, ...)
      spark.sink.table             or a table (saveAsTable, append)
      spark.sink.format            parquet (default) or any format Spark writes
      spark.sink.options.<key>     writer options
      spark.sink.id.field          the message id field every row must carry (default msg_id)
      spark.sink.time.field        the time column; a partition column is derived from it
      spark.sink.partition.column  its name (default dt)
      spark.sink.partition.format  its value, a Spark datetime pattern (default yyyy-MM-dd)
      spark.sink.partition.by      partition columns (default: the derived one)
      spark.sink.batch.column      a column with the writing batch's id (default _batch_id; "" none)
      spark.sink.commit            staged (default: each batch is written to <path>/_staging/<id>
                                   and its files renamed into place, so concurrent writers never
                                   share Spark's _temporary dir and readers never see half a
                                   batch) or direct (df.write.mode("append"), one writer per path)
    """

    outputs: ClassVar[Any] = {ERROR_STREAM: ERROR_FIELDS}
    _path_locks: dict[str, threading.Lock] = {}
    _path_locks_guard = threading.Lock()

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.path = conf.get("spark.sink.path")
        self.table = conf.get("spark.sink.table")
        if not self.path and not self.table:
            raise ValueError("SparkSinkBolt needs spark.sink.path or spark.sink.table")
        self.format = str(conf.get("spark.sink.format", "parquet"))
        self.options = _prefixed(conf, "spark.sink.options.")
        self.id_field = str(conf.get("spark.sink.id.field", DEFAULT_ID_FIELD))
        self.time_field = conf.get("spark.sink.time.field")
        self.partition_column = str(conf.get("spark.sink.partition.column", "dt"))
        self.partition_format = str(conf.get("spark.sink.partition.format", "yyyy-MM-dd"))
        default_parts = [self.partition_column] if self.time_field else []
        self.partition_by = _conf_list(conf.get("spark.sink.partition.by")) or default_parts
        self.batch_column = str(conf.get("spark.sink.batch.column", BATCH_COLUMN))
        self.commit = str(conf.get("spark.sink.commit", "staged"))
        if self.commit not in ("staged", "direct"):
            raise ValueError(f"spark.sink.commit must be staged or direct, not {self.commit!r}")
        self.input_schema.required.add(self.id_field)
        self.rows_written = 0
        self.output_fields = []

    def handle_result(self, df: DataFrame, batch: list[Tuple], spark: SparkSession) -> None:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        if self.id_field not in df.columns:
            raise SparkBatchError(f"the sink's rows need the message id field {self.id_field!r} (columns: {df.columns})")
        if ROW_COLUMN in df.columns:
            df = df.drop(ROW_COLUMN)
        if self.time_field:
            col = F.col(str(self.time_field))
            dtype = df.schema[str(self.time_field)].dataType
            if isinstance(dtype, T.NumericType):
                col = F.timestamp_seconds(col)
            elif isinstance(dtype, T.StringType):
                col = F.to_timestamp(col)
            df = df.withColumn(self.partition_column, F.date_format(col, self.partition_format))
        batch_id = f"{self.context.component_id}-{self.context.task_id}-{uuid.uuid4().hex}"
        if self.batch_column:
            df = df.withColumn(self.batch_column, F.lit(batch_id))
        self.write(df, batch_id, spark)
        self.rows_written += len(batch)

    def write(self, df: DataFrame, batch_id: str, spark: SparkSession) -> None:
        """Append one batch; raising fails the batch's inputs."""
        if self.table:
            writer = df.write.mode("append").format(self.format).options(**self.options)
            if self.partition_by:
                writer = writer.partitionBy(*self.partition_by)
            with self._lock_for(f"table:{self.table}"):
                writer.saveAsTable(str(self.table))
            return
        path = str(self.path).rstrip("/")
        if self.commit == "direct":
            writer = df.write.mode("append").format(self.format).options(**self.options)
            if self.partition_by:
                writer = writer.partitionBy(*self.partition_by)
            with self._lock_for(path):
                writer.save(path)
            return
        staging = f"{path}/_staging/{batch_id}"
        writer = df.write.mode("errorifexists").format(self.format).options(**self.options)
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        writer.save(staging)
        move_files(spark, staging, path)

    @classmethod
    def _lock_for(cls, key: str) -> threading.Lock:
        with cls._path_locks_guard:
            return cls._path_locks.setdefault(key, threading.Lock())


def move_files(spark: SparkSession, src: str, dest: str) -> int:
    """Rename every data file under `src` to the same relative path under `dest` (Hadoop
    FileSystem, so any URI Spark writes to), then delete `src`. Returns the files moved."""
    jvm: Any = spark._jvm
    hconf = spark._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path
    src_path = Path(src)
    fs = src_path.getFileSystem(hconf)
    src_root = fs.makeQualified(src_path).toUri().getPath().rstrip("/")
    dest_path = fs.makeQualified(Path(dest))
    files = fs.listFiles(src_path, True)
    moved = 0
    while files.hasNext():
        p = files.next().getPath()
        if p.getName().startswith(("_", ".")):
            continue
        rel = p.toUri().getPath()[len(src_root) + 1:]
        target = Path(dest_path, rel)
        fs.mkdirs(target.getParent())
        if not fs.rename(p, target):
            raise OSError(f"could not move {p.toString()} to {target.toString()}")
        moved += 1
    fs.delete(src_path, True)
    return moved


def read_dataset(spark: SparkSession, path: str, fmt: str = "parquet", id_field: str = DEFAULT_ID_FIELD,
                 dedup: bool = True, keys: Sequence[str] = ()) -> DataFrame:
    """A sink's dataset, deduplicated by message id (plus `keys` when one message makes several
    rows): a batch that was written and then replayed appears once."""
    df = spark.read.format(fmt).load(path)
    return df.dropDuplicates([id_field, *keys]) if dedup else df


# -- the source --------------------------------------------------------------------------------
class SparkSourceSpout(Spout):
    """Reads a dataset through Spark and emits its rows with message ids; failed rows are
    replayed. For backfills and for replaying history through the same topology.

    Config:
      spark.source.path / spark.source.table / spark.source.sql   what to read (one of them)
      spark.source.format          parquet (default), json, csv, text, orc, ... (with path)
      spark.source.schema          a DDL schema string for the reader (optional)
      spark.source.options.<key>   reader options (header, multiLine, ...)
      spark.source.fields          the emitted fields (default: the declared default stream)
      spark.source.id.field        the message id field (default msg_id): a dataset column, or
                                   if the dataset has none, ids "<prefix><row number>" are put
                                   into that field
      spark.source.id.prefix       prefix of generated ids (default "")
      spark.source.max.retries     give up on a row after this many failures (default -1: never)

    With several tasks, task k of P emits the rows whose id hashes to k (an id column) or whose
    row number is k mod P (generated ids). `done` is set, and `on_done()` called, once every
    row was emitted and acked (or given up).
    """

    outputs: ClassVar[Any] = None

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.fields = _conf_list(conf.get("spark.source.fields")) or self._declared_fields()
        if not self.fields:
            raise ValueError("SparkSourceSpout needs its fields: spark.source.fields or outputs")
        self.id_field = str(conf.get("spark.source.id.field", DEFAULT_ID_FIELD))
        self.id_prefix = str(conf.get("spark.source.id.prefix", ""))
        self.max_retries = int(conf.get("spark.source.max.retries", -1))
        tasks = sorted(context.this_component_tasks())
        self.index, self.n_tasks = tasks.index(context.task_id), len(tasks)
        self.rows: Iterator[tuple[Any, list[Any]]] | None = None
        self.exhausted = False
        self.pending: dict[Any, list[Any]] = {}
        self.retries: dict[Any, int] = {}
        self.replay: deque[Any] = deque()
        self.emitted = self.acked = self.failed = self.given_up = 0
        self.done = False

    def _declared_fields(self) -> list[str]:
        declared = getattr(self.context, "output_fields", None)
        if declared is not None:
            fields = list(declared(DEFAULT_STREAM))
            if fields:
                return fields
        outputs = type(self).outputs
        if isinstance(outputs, Mapping):
            return list(outputs.get(DEFAULT_STREAM, []))
        return list(outputs or [])

    def dataframe(self, spark: SparkSession) -> DataFrame:
        """The dataset to read; override for anything the config keys cannot say."""
        conf = self.conf
        if conf.get("spark.source.sql"):
            return spark.sql(str(conf["spark.source.sql"]))
        if conf.get("spark.source.table"):
            return spark.read.table(str(conf["spark.source.table"]))
        path = conf.get("spark.source.path")
        if not path:
            raise ValueError("SparkSourceSpout needs spark.source.path, spark.source.table or spark.source.sql")
        reader = spark.read.format(str(conf.get("spark.source.format", "parquet")))
        reader = reader.options(**_prefixed(conf, "spark.source.options."))
        if conf.get("spark.source.schema"):
            reader = reader.schema(str(conf["spark.source.schema"]))
        return reader.load(str(path))

    def _start(self) -> Iterator[tuple[Any, list[Any]]]:
        from pyspark.sql import functions as F

        spark = get_spark(self.conf)
        df = self.dataframe(spark)
        has_id = self.id_field in df.columns
        missing = [f for f in self.fields if f not in df.columns and not (f == self.id_field and not has_id)]
        if missing:
            raise ValueError(f"the dataset has no column(s) {missing} (columns: {df.columns})")
        if has_id and self.n_tasks > 1:
            df = df.where(F.pmod(F.xxhash64(F.col(self.id_field)), F.lit(self.n_tasks)) == self.index)
        cols = [f for f in self.fields if f in df.columns]
        id_pos = self.fields.index(self.id_field) if self.id_field in self.fields else None
        for n, row in enumerate(df.select(*cols).toLocalIterator(prefetchPartitions=True)):
            if has_id:
                values = [to_wire(v) for v in row]
                msg_id = values[cols.index(self.id_field)]
            else:
                if self.n_tasks > 1 and n % self.n_tasks != self.index:
                    continue
                msg_id = f"{self.id_prefix}{n}"
                it = iter(row)
                values = [msg_id if i == id_pos else to_wire(next(it)) for i in range(len(self.fields))]
            yield msg_id, values

    def next_tuple(self) -> None:
        if self.replay:
            msg_id = self.replay.popleft()
            values = self.pending.get(msg_id)
            if values is not None:
                self.emitted += 1
                self.collector.emit(values, msg_id=msg_id)
            return
        if self.exhausted:
            return
        if self.rows is None:
            self.rows = self._start()
        try:
            msg_id, values = next(self.rows)
        except StopIteration:
            self.exhausted = True
            self._check_done()
            return
        self.pending[msg_id] = values
        self.emitted += 1
        self.collector.emit(values, msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        if self.pending.pop(msg_id, None) is not None:
            self.acked += 1
            self.retries.pop(msg_id, None)
        self._check_done()

    def fail(self, msg_id: Any) -> None:
        if msg_id not in self.pending:
            return
        self.failed += 1
        tries = self.retries[msg_id] = self.retries.get(msg_id, 0) + 1
        if 0 <= self.max_retries < tries:
            self.given_up += 1
            self.pending.pop(msg_id, None)
            self.collector.report_error(RuntimeError(f"gave up on message {msg_id!r} after {tries} failures"))
            self._check_done()
            return
        self.replay.append(msg_id)

    def _check_done(self) -> None:
        if self.exhausted and not self.pending and not self.done:
            self.done = True
            log.info("source %s task %s: all %d rows acked", self.context.component_id, self.context.task_id, self.acked)
            self.on_done()

    def on_done(self) -> None:
        """Every row of this task was emitted and acked (or given up)."""


def dumps_values(values: Sequence[Any]) -> str:
    """Values as JSON for logs and error files (anything JSON cannot say becomes a string)."""
    return json.dumps(list(values), default=str)
