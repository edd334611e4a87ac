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

The package by job: `session` (the per-process SparkSession and the config's Spark keys),
`schema` (declared types, tuple values to Arrow and back), `batch` (`SparkBatchBolt`), `sink`
(`SparkSinkBolt`), `files` (a dataset's file moves and reads), `source` (`SparkSourceSpout`).
Everything a topology uses is importable from `squall.spark` itself.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("pyspark") is None:  # checked without importing Spark (slow)
    raise ImportError(
        "squall.spark needs PySpark, which is Squall's optional 'spark' extra: "
        "pip install 'squall[spark]' (the squall-worker image has it)",
        name="pyspark",
    )

from squall.spark import session as _session_module  # noqa: E402
from squall.spark.batch import (  # noqa: E402
    DEFAULT_BATCH_INTERVAL_SECS,
    DEFAULT_BATCH_SIZE,
    ERROR_FIELDS,
    ERROR_STREAM,
    PARQUET_MIN_ROWS,
    SparkBatchBolt,
    SparkBatchError,
)
from squall.spark.files import DEFAULT_ID_FIELD, move_files, read_dataset  # noqa: E402
from squall.spark.schema import (  # noqa: E402
    HAVE_ARROW,
    ROW_COLUMN,
    BatchSchema,
    FieldType,
    SchemaError,
    arrow_to_values,
    dumps_values,
    infer_type,
    to_wire,
)
from squall.spark.session import (  # noqa: E402
    DEFAULT_MASTER,
    SESSION_DEFAULTS,
    batch_dir,
    get_spark,
    load_function,
    spark_settings,
    stop_spark,
)
from squall.spark.sink import BATCH_COLUMN, SparkSinkBolt  # noqa: E402
from squall.spark.source import SparkSourceSpout  # noqa: E402

__all__ = [
    "BATCH_COLUMN",
    "DEFAULT_BATCH_INTERVAL_SECS",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_ID_FIELD",
    "DEFAULT_MASTER",
    "ERROR_FIELDS",
    "ERROR_STREAM",
    "HAVE_ARROW",
    "PARQUET_MIN_ROWS",
    "ROW_COLUMN",
    "SESSION_DEFAULTS",
    "BatchSchema",
    "FieldType",
    "SchemaError",
    "SparkBatchBolt",
    "SparkBatchError",
    "SparkSinkBolt",
    "SparkSourceSpout",
    "arrow_to_values",
    "batch_dir",
    "dumps_values",
    "get_spark",
    "infer_type",
    "load_function",
    "move_files",
    "read_dataset",
    "spark_settings",
    "stop_spark",
    "to_wire",
]


def __getattr__(name: str) -> object:
    # the process's session as it is now (None when there is none): tests read it
    if name == "_session":
        return _session_module._session
    raise AttributeError(f"module 'squall.spark' has no attribute {name!r}")
