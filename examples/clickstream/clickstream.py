"""Clickstream on Spark: events -> parse -> enrich (Spark micro-batches) -> Parquet sink.

    events (SparkSourceSpout over raw JSON lines; message id "e<line number>" in field event_id)
      -> parse   (JSON -> typed fields; malformed lines -> errors stream)
      -> enrich  (SparkBatchBolt: join with the pages reference table, score with the fitted
                  dwell model; rows that do not fit the schema -> errors stream)
      -> sink    (SparkSinkBolt: Parquet under <dir>/sink, partitioned by day of ts, with
                  event_id and _batch_id on every row)
    errors   <- parse:errors, enrich:errors, sink:errors (JSON lines under <dir>/out)

`window_aggregates` is the windowed aggregate; `batch_job.py` computes it from the sink
(deduplicated by event_id) and from the raw input with one Spark batch job, and compares.

Config (topology spec.config):
  clickstream.dir      data directory (default /tmp/squall-clickstream): raw/, ref/, model/,
                       sink/, out/; raw input and model are generated there when missing
  clickstream.events   how many raw events to generate (default 2000)
  clickstream.fail.mod parse fails the first delivery of every event whose line number is a
                       multiple of it (0: never), to show replays
  clickstream.spark.fail.batches   enrich: the first N batches of each task fail in Spark
  clickstream.sink.fail.after.write  sink: the first N batches are written, then failed
                       (a crash between write and ack): replays make duplicates in the sink
"""

from __future__ import annotations

import fcntl
import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall import Bolt, Tuple
from squall.spark import (
    ERROR_FIELDS,
    ROW_COLUMN,
    SparkBatchBolt,
    SparkSinkBolt,
    SparkSourceSpout,
)

DEFAULT_DIR = "/tmp/squall-clickstream"
PAGES = {
    "/home": "landing", "/search": "discovery", "/product/1": "product", "/product/2": "product",
    "/product/3": "product", "/cart": "checkout", "/checkout": "checkout", "/help": "support",
}
UNKNOWN_PAGE = "/promo/unknown"  # not in the reference table: category "unknown"
EVENT_FIELDS = ["event_id", "ts", "user", "page", "dwell_ms"]
ENRICHED_FIELDS = ["event_id", "ts", "user", "page", "category", "dwell_ms", "score"]
SCHEMA = {"event_id": "string", "ts": "timestamp", "user": "string", "page": "string", "dwell_ms": "bigint"}
RAW_JSON_SCHEMA = "ts BIGINT, user STRING, page STRING, dwell_ms BIGINT"
T0 = 1_700_000_000  # 2023-11-14T22:13:20Z: events span midnight UTC, so the sink has 2 days


# -- data ------------------------------------------------------------------------------------
def paths(conf_or_dir: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Path]:
    if isinstance(conf_or_dir, Mapping):
        base = Path(conf_or_dir.get("clickstream.dir") or DEFAULT_DIR)
    else:
        base = Path(conf_or_dir)
    return {"dir": base, "raw": base / "raw" / "events.jsonl", "pages": base / "ref" / "pages.csv",
            "history": base / "ref" / "history.jsonl", "model": base / "model", "sink": base / "sink",
            "out": base / "out"}


def generate(base: Path, n_events: int, seed: int = 7) -> list[int]:
    """Raw events (JSON lines, ~4% bad), the pages table and a training history. Returns the
    line numbers of the bad lines."""
    p = paths(base)
    for key in ("raw", "pages", "history"):
        p[key].parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pages = [*PAGES, UNKNOWN_PAGE]
    lines, bad = [], []
    for i in range(n_events):
        ev: dict[str, Any] = {"ts": T0 + 5400 + i * 3 + rng.randrange(3), "user": f"u{rng.randrange(40)}",
                              "page": rng.choice(pages), "dwell_ms": rng.randrange(200, 60_000)}
        kind = rng.random()
        if kind < 0.01:
            line = "{not json " + str(i)
        elif kind < 0.02:
            del ev["user"]
            line = json.dumps(ev)
        elif kind < 0.03:
            ev["dwell_ms"] = "abc"
            line = json.dumps(ev)
        elif kind < 0.04:
            ev["ts"] = "yesterday"
            line = json.dumps(ev)
        else:
            line = json.dumps(ev)
        if kind < 0.04:
            bad.append(i)
        lines.append(line)
    _write_atomic(p["raw"], "\n".join(lines) + "\n")
    _write_atomic(p["pages"], "page,category\n" + "".join(f"{k},{v}\n" for k, v in PAGES.items()))
    hist = [json.dumps({"page": rng.choice(list(PAGES)), "dwell_ms": rng.randrange(200, 60_000)}) for _ in range(3000)]
    _write_atomic(p["history"], "\n".join(hist) + "\n")
    return bad


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def fit_model(spark: Any, history: Path, model: Path) -> None:
    """The fitted model: per page, mean and standard deviation of dwell time in the history."""
    from pyspark.sql import functions as F

    h = spark.read.schema("page STRING, dwell_ms BIGINT").json(str(history))
    fitted = h.groupBy("page").agg(F.avg("dwell_ms").alias("mu"), F.stddev_pop("dwell_ms").alias("sigma"))
    fitted.coalesce(1).write.mode("overwrite").parquet(str(model))


def ensure_data(conf: Mapping[str, Any], spark: Any | None = None) -> dict[str, Path]:
    """Generate the raw input and fit the model unless they exist (a file lock keeps the
    processes of a topology from doing it twice)."""
    p = paths(conf)
    p["dir"].mkdir(parents=True, exist_ok=True)
    with open(p["dir"] / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not p["raw"].exists():
            generate(p["dir"], int(conf.get("clickstream.events", 2000)))
        if not (p["model"] / "_SUCCESS").exists():
            from squall.spark import get_spark

            fit_model(spark or get_spark(conf), p["history"], p["model"])
    return p


# -- the Spark side, shared by the stream and the batch job -----------------------------------
_ref_cache: dict[str, Any] = {}


def reference(spark: Any, p: Mapping[str, Path]) -> tuple[Any, Any]:
    """The pages table and the fitted model, read once per process and cached."""
    key = str(p["dir"])
    if key not in _ref_cache:
        pages = spark.read.schema("page STRING, category STRING").option("header", True).csv(str(p["pages"]))
        model = spark.read.parquet(str(p["model"]))
        _ref_cache[key] = (pages.cache(), model.cache())
    return _ref_cache[key]  # type: ignore[no-any-return]


def enrich(df: Any, spark: Any, p: Mapping[str, Path]) -> Any:
    """Events (event_id, ts, user, page, dwell_ms) -> + category (reference join) and score
    (the fitted model: sigmoid of the dwell time's z-score for the page)."""
    from pyspark.sql import functions as F

    pages, model = reference(spark, p)
    out = (df.join(F.broadcast(pages), "page", "left")
             .join(F.broadcast(model), "page", "left")
             .withColumn("category", F.coalesce(F.col("category"), F.lit("unknown"))))
    z = (F.col("dwell_ms") - F.col("mu")) / F.col("sigma")
    return out.withColumn("score", F.when(F.col("sigma") > 0, 1.0 / (1.0 + F.exp(-z))).otherwise(F.lit(0.5)))


def window_aggregates(df: Any) -> Any:
    """Per 10-minute window and category: events, total dwell, distinct users, high scores."""
    from pyspark.sql import functions as F

    return (df.groupBy(F.window("ts", "10 minutes").alias("w"), "category")
              .agg(F.count("*").alias("events"), F.sum("dwell_ms").alias("dwell_ms"),
                   F.countDistinct("user").alias("users"),
                   F.sum(F.when(F.col("score") > 0.5, 1).otherwise(0)).alias("high_score"))
              .select(F.col("w.start").alias("window_start"), "category", "events", "dwell_ms", "users", "high_score")
              .orderBy("window_start", "category"))


def parse_raw(spark: Any, raw: Path) -> Any:
    """The batch job's parse of the raw input: the same rules as the stream (valid JSON object
    with ts, user, page, dwell_ms of the right types), applied by Spark."""
    from pyspark.sql import functions as F

    lines = spark.read.text(str(raw)).withColumn("e", F.from_json("value", RAW_JSON_SCHEMA))
    valid = lines.where(F.col("e.ts").isNotNull() & F.col("e.user").isNotNull()
                        & F.col("e.page").isNotNull() & F.col("e.dwell_ms").isNotNull())
    return valid.select(F.timestamp_seconds("e.ts").alias("ts"), "e.user", "e.page", "e.dwell_ms")


# -- components ------------------------------------------------------------------------------
class EventSpout(SparkSourceSpout):
    """The raw events file through Spark (format text): [event_id, line], ids e<line number>."""

    outputs = ["event_id", "line"]

    def open(self, conf, context, collector):
        conf = {"spark.source.format": "text", "spark.source.id.field": "event_id",
                "spark.source.id.prefix": "e", "spark.source.fields": ["event_id", "value"], **conf}
        super().open(conf, context, collector)
        self.p = paths(conf)

    def dataframe(self, spark):
        ensure_data(self.conf, spark)
        return spark.read.text(str(self.p["raw"]))

    def on_done(self):
        _out(self.conf).joinpath(f"spout-{self.context.task_id}.done").write_text("done")

    def close(self):
        _write_json(_out(self.conf) / f"spout-{self.context.task_id}.json",
                    {"emitted": self.emitted, "acked": self.acked, "failed": self.failed,
                     "pending": len(self.pending), "done": self.done})


class ParseEvent(Bolt):
    """A JSON line -> [event_id, ts, user, page, dwell_ms] as found (the types are checked by
    the Spark bolt's schema); not a JSON object -> errors."""

    outputs = {"default": EVENT_FIELDS, "errors": ERROR_FIELDS}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fail_mod = int(conf.get("clickstream.fail.mod", 0))
        self.seen: set[str] = set()

    def execute(self, tup: Tuple) -> None:
        event_id, line = tup.get("event_id"), tup.get("line")
        n = int(event_id[1:])
        if self.fail_mod and n % self.fail_mod == 0 and event_id not in self.seen:
            self.seen.add(event_id)
            self.collector.fail(tup)  # injected: the spout replays it
            return
        try:
            ev = json.loads(line)
            if not isinstance(ev, dict):
                raise ValueError(f"expected a JSON object, got {type(ev).__name__}")
        except ValueError as exc:
            self.collector.emit([f"parse: {exc}", [event_id, line]], stream="errors", anchors=tup)
            self.collector.ack(tup)
            return
        self.collector.emit([event_id, ev.get("ts"), ev.get("user"), ev.get("page"), ev.get("dwell_ms")], anchors=tup)
        self.collector.ack(tup)


class Enrich(SparkBatchBolt):
    """Spark micro-batches: the reference join and the model's score."""

    outputs = {"default": ENRICHED_FIELDS, "errors": ERROR_FIELDS}
    schema = SCHEMA

    def prepare(self, conf, context, collector):
        conf = {"spark.schema.required": EVENT_FIELDS, **conf}
        super().prepare(conf, context, collector)
        self.p = paths(conf)
        self.fail_batches = int(conf.get("clickstream.spark.fail.batches", 0))

    def transform(self, df, spark):
        ensure_data(self.conf, spark)
        out = enrich(df, spark, self.p)
        if self.batches <= self.fail_batches:  # injected: a real Spark failure at run time
            from pyspark.sql import functions as F

            out = out.withColumn("user", F.when(F.col(ROW_COLUMN) >= 0, F.raise_error(F.lit("injected Spark failure")))
                                 .otherwise(F.col("user")))
        return out


class ClickSink(SparkSinkBolt):
    """Parquet under <dir>/sink, partitioned by the day of ts; event_id on every row."""

    outputs = {"errors": ERROR_FIELDS}
    schema = {**SCHEMA, "category": "string", "score": "double"}

    def prepare(self, conf, context, collector):
        p = paths(conf)
        conf = {"spark.sink.path": str(p["sink"]), "spark.sink.id.field": "event_id",
                "spark.sink.time.field": "ts", **conf}
        super().prepare(conf, context, collector)
        self.fail_after_write = int(conf.get("clickstream.sink.fail.after.write", 0))

    def write(self, df, batch_id, spark):
        super().write(df, batch_id, spark)
        if self.batches <= self.fail_after_write:
            raise RuntimeError("injected: crashed after the write, before the ack")


class ErrorLog(Bolt):
    """Every error tuple as a JSON line in <dir>/out/errors-<task>.jsonl."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.file = open(_out(conf) / f"errors-{context.task_id}.jsonl", "a")

    def execute(self, tup: Tuple) -> None:
        self.file.write(json.dumps({"from": tup.source_component, "reason": tup.get("reason"),
                                    "values": tup.get("values")}, default=str) + "\n")
        self.file.flush()
        self.collector.ack(tup)

    def cleanup(self) -> None:
        self.file.close()


def _out(conf: Mapping[str, Any]) -> Path:
    out = paths(conf)["out"]
    out.mkdir(parents=True, exist_ok=True)
    return out


def _write_json(path: Path, data: Any) -> None:
    _write_atomic(path, json.dumps(data))
