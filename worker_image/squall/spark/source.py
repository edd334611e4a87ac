"""`SparkSourceSpout`: a dataset read through Spark, its rows emitted with message ids and
replayed when they fail."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from squall.components import DEFAULT_STREAM, Spout
from squall.spark.files import DEFAULT_ID_FIELD
from squall.spark.schema import to_wire
from squall.spark.session import _conf_list, _prefixed, declared_fields, get_spark

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("squall.spark")


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

    # a micro-batch waits for Spark: the executor runs on a thread of its own, not in the
    # worker's engine loop (squall.worker.engine)
    isolated = True

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
        return declared_fields(self, DEFAULT_STREAM)

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
