"""`SparkBatchBolt`: input tuples in micro-batches (by count and by time) through a Spark
transform; the result rows are emitted anchored to the batch's inputs, which are acked only once
Spark succeeded."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar

from squall.components import DEFAULT_STREAM, Bolt, Tuple
from squall.spark.schema import (
    HAVE_ARROW,
    ROW_COLUMN,
    BatchSchema,
    SchemaError,
    _Signature,
    arrow_to_values,
    to_wire,
)
from squall.spark.session import _conf_list, batch_dir, declared_fields, get_spark, load_function

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("squall.spark")

# Defaults, chosen from the benchmark in docs/performance.md ("Spark").
DEFAULT_BATCH_SIZE = 2000
DEFAULT_BATCH_INTERVAL_SECS = 0.5
# from this many rows a batch goes into Spark as a Parquet file (local master): below it,
# createDataFrame's smaller fixed cost per batch wins (docs/performance.md, "Spark")
PARQUET_MIN_ROWS = 5000
ERROR_STREAM = "errors"
ERROR_FIELDS = ["reason", "values"]


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

    # a micro-batch waits for Spark: the executor runs on a thread of its own, not in the
    # worker's engine loop (squall.worker.engine)
    isolated = True

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
        return declared_fields(self, stream)  # the file's outputs win over the class's

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
