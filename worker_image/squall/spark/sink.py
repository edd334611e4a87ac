"""`SparkSinkBolt`: micro-batches appended to a dataset, a batch's inputs acked only after its
write succeeded; each row keeps its spout message's id and its batch's id."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from squall.components import Tuple
from squall.spark.batch import ERROR_FIELDS, ERROR_STREAM, SparkBatchBolt, SparkBatchError
from squall.spark.files import DEFAULT_ID_FIELD, move_files
from squall.spark.schema import ROW_COLUMN
from squall.spark.session import _conf_list, _prefixed

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

BATCH_COLUMN = "_batch_id"


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
