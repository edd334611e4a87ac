"""squall.spark: the micro-batch bolt, the sink and the source with in-process Spark (one
SparkSession for the test session, local[1]), then the clickstream example end to end on a
LocalCluster with the session's real ZooKeeper: the streaming result, deduplicated by message
id, equals a batch Spark job's recompute of the raw input, with replays injected."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.components import Tuple
from squall.validation import parse_topology

from helpers import import_example  # the integration tests' helpers (same directory)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLICKSTREAM = REPO / "examples" / "clickstream"

if importlib.util.find_spec("pyspark") is None:  # pragma: no cover
    pytest.skip("pyspark is not installed", allow_module_level=True)

from squall import spark as sq  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from squall.zkserver import java_available

    if not java_available():
        pytest.skip("no java on PATH")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("squall-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    yield session
    sq.stop_spark()
    session.stop()


# -- fakes for driving components in-process -------------------------------------------------
class FakeContext:
    def __init__(self, component: str = "c", task: int = 1, tasks: list[int] | None = None) -> None:
        self.topology_id = "t"
        self.component_id = component
        self.task_id = task
        self.worker_port = 0
        self._tasks = tasks or [task]

    def this_component_tasks(self) -> list[int]:
        return list(self._tasks)


class FakeCollector:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, list[Any], Any]] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Any, stream: str = "default", anchors: Any = None, msg_id: Any = None) -> list[int]:
        self.emitted.append((stream, list(values), anchors if msg_id is None else msg_id))
        return [1]

    def ack(self, tup: Tuple) -> None:
        self.acked.append(tup)

    def fail(self, tup: Tuple) -> None:
        self.failed.append(tup)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


def tup(fields: list[str], values: list[Any]) -> Tuple:
    return Tuple(values, 1, "src", "default", {f: i for i, f in enumerate(fields)}, None)


def tick() -> Tuple:
    return Tuple([1], -1, "__system", "__tick", {"rate_secs": 0}, None)


def make_bolt(cls: type, conf: dict[str, Any]) -> tuple[Any, FakeCollector]:
    bolt, coll = cls(), FakeCollector()
    bolt.prepare({"topology.tick.tuple.freq.secs": 1, **conf}, FakeContext(), coll)
    return bolt, coll


class Doubler(sq.SparkBatchBolt):
    outputs = {"default": ["id", "x2"], "errors": sq.ERROR_FIELDS}
    schema = {"id": "string", "x": "bigint"}

    def transform(self, df: Any, spark: Any) -> Any:
        return df.withColumn("x2", df.x * 2)


class Summer(sq.SparkBatchBolt):
    outputs = {"default": ["n", "total"], "errors": sq.ERROR_FIELDS}
    schema = {"id": "string", "x": "bigint"}

    def transform(self, df: Any, spark: Any) -> Any:
        return df.selectExpr("count(*) AS n", "sum(x) AS total")


FIELDS = ["id", "x"]


# -- schema conversion (no Spark job) -----------------------------------------------------------
def test_schema_converts_and_rejects() -> None:
    s = sq.BatchSchema({"id": "string", "x": "bigint", "ts": "timestamp", "p": "decimal(5,2)"}, required=["id"])
    fields = ["id", "x", "ts", "p", "extra"]
    row = s.convert(fields, ["a", "12", 1_700_000_000, "1.5", 2.5])
    assert row[:2] == ("a", 12)
    assert row[2] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert str(row[3]) == "1.50" and row[4] == 2.5  # extra: inferred double, then fixed
    for bad, reason in [
        (["a", "abc", None, None, None], "field 'x': expected bigint"),
        ([None, 1, None, None, None], "'id' is required"),
        (["a", True, None, None, None], "got a boolean"),
        (["a", 2**70, None, None, None], "out of range"),
        (["a", 1, "yesterday", None, None], "expected timestamp"),
        (["a", 1, None, "12345.6", None], "does not fit decimal(5,2)"),
        (["a", 1, None, None, "str"], "field 'extra': expected double"),
    ]:
        with pytest.raises(sq.SchemaError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            s.convert(fields, bad)
    with pytest.raises(sq.SchemaError, match="do not match"):
        s.convert(["id"], ["a"])


# -- the micro-batch bolt ------------------------------------------------------------------------
def test_batch_bolt_flushes_by_count_and_by_time(spark: Any) -> None:
    bolt, coll = make_bolt(Doubler, {"spark.batch.size": 3, "spark.batch.interval.secs": 0.3})
    inputs = [tup(FIELDS, [f"k{i}", i]) for i in range(5)]
    for t in inputs:
        bolt.execute(t)
    assert len(coll.acked) == 3 and bolt.batches == 1  # the count flush
    assert [e[1] for e in coll.emitted] == [["k0", 0], ["k1", 2], ["k2", 4]]
    # each result row keeps _squall_row, so it is anchored to its own input
    assert [e[2] for e in coll.emitted] == inputs[:3]
    bolt.execute(tick())
    assert len(coll.acked) == 3  # a tick before the interval: nothing yet
    time.sleep(0.35)
    bolt.execute(tick())
    assert bolt.batches == 2 and coll.acked == inputs and not coll.failed
    assert sorted(e[1][1] for e in coll.emitted) == [0, 2, 4, 6, 8]


def test_batch_bolt_aggregate_anchors_to_every_input(spark: Any) -> None:
    bolt, coll = make_bolt(Summer, {"spark.batch.size": 4})
    inputs = [tup(FIELDS, [f"k{i}", i]) for i in range(4)]
    for t in inputs:
        bolt.execute(t)
    assert coll.emitted == [("default", [4, 6], inputs)]
    assert coll.acked == inputs


def test_transform_from_config(spark: Any) -> None:
    bolt, coll = make_bolt(sq.SparkBatchBolt, {
        "spark.batch.size": 2, "spark.schema": {"id": "string", "x": "bigint"},
        "spark.transform": "test_spark:upper_ids", "spark.output.fields": ["id"]})
    bolt.execute(tup(FIELDS, ["a", 1]))
    bolt.execute(tup(FIELDS, ["b", 2]))
    assert [e[1] for e in coll.emitted] == [["A"], ["B"]] and len(coll.acked) == 2


def upper_ids(df: Any, spark: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("id", F.upper("id"))


sys.modules.setdefault("test_spark", sys.modules[__name__])


def test_spark_failure_fails_the_batch_and_the_bolt_goes_on(spark: Any) -> None:
    class Flaky(Doubler):
        def transform(self, df: Any, spark: Any) -> Any:
            from pyspark.sql import functions as F

            if self.batches == 1:  # a failure inside a Spark job, not in Python
                return df.withColumn("x2", F.when(F.col("x") >= 0, F.raise_error(F.lit("boom"))).otherwise(F.col("x")))
            return super().transform(df, spark)

    bolt, coll = make_bolt(Flaky, {"spark.batch.size": 2})
    first = [tup(FIELDS, ["a", 1]), tup(FIELDS, ["b", 2])]
    for t in first:
        bolt.execute(t)
    assert coll.failed == first and not coll.acked and not coll.emitted
    assert len(coll.errors) == 1 and "boom" in str(coll.errors[0])
    for t in first:  # the replay
        bolt.execute(t)
    assert coll.acked == first and [e[1] for e in coll.emitted] == [["a", 2], ["b", 4]]


def test_rows_that_do_not_fit_go_to_the_error_stream(spark: Any) -> None:
    bolt, coll = make_bolt(Doubler, {"spark.batch.size": 2})
    bad = tup(FIELDS, ["a", "not a number"])
    bolt.execute(bad)
    assert coll.acked == [bad]  # handled: acked at once, never in a batch
    stream, values, anchors = coll.emitted[0]
    assert stream == "errors" and anchors is bad
    assert "field 'x': expected bigint" in values[0] and values[1] == ["a", "not a number"]
    bolt.execute(tup(FIELDS, ["b", 1]))
    bolt.execute(tup(FIELDS, ["c", 2]))
    assert [e[1] for e in coll.emitted[1:]] == [["b", 2], ["c", 4]] and not coll.failed


def test_batches_go_in_as_parquet_files_removed_after_the_flush(spark: Any, tmp_path: Path) -> None:
    """With a local master a batch of spark.batch.parquet.min.rows or more reaches Spark as a
    Parquet file in the batch directory; the file is there while Spark runs and gone after the
    flush, whether the batch succeeded or failed; createDataFrame (`spark.batch.input: arrow`,
    or a smaller batch) gives the same result."""
    seen: list[list[str]] = []

    class Watched(Doubler):
        def transform(self, df: Any, spark: Any) -> Any:
            seen.append(sorted(p.name for p in tmp_path.iterdir()))
            if any(t.values[0] == "boom" for t in self.batch_in_flight):
                raise RuntimeError("boom")
            return super().transform(df, spark)

        def flush(self) -> None:
            self.batch_in_flight = list(self.batch)
            super().flush()

    results = {}
    for mode, min_rows in (("auto", 2), ("arrow", 2), ("auto", 3)):
        bolt, coll = make_bolt(Watched, {"spark.batch.size": 2, "spark.batch.dir": str(tmp_path), "spark.batch.input": mode,
                                         "spark.batch.parquet.min.rows": min_rows})
        for t in [tup(FIELDS, ["a", 1]), tup(FIELDS, ["b", 2]), tup(FIELDS, ["boom", 3]), tup(FIELDS, ["c", 4])]:
            bolt.execute(t)
        assert bolt.last_input == ("parquet" if (mode, min_rows) == ("auto", 2) else "arrow")
        assert len(coll.acked) == 2 and len(coll.failed) == 2 and len(coll.errors) == 1
        assert list(tmp_path.iterdir()) == []  # removed after the good batch and after the failed one
        results[mode, min_rows] = [e[1] for e in coll.emitted]
    assert results["auto", 2] == results["arrow", 2] == results["auto", 3] == [["a", 2], ["b", 4]]
    assert [len(names) for names in seen] == [1, 1, 0, 0, 0, 0]  # one file per batch while Spark ran
    assert seen[0][0].startswith("c-1-") and seen[0][0].endswith(".parquet")
    with pytest.raises(ValueError, match="spark.batch.input must be auto, parquet or arrow"):
        make_bolt(Doubler, {"spark.batch.input": "csv"})


def test_a_large_batch_goes_in_as_several_files_in_order(spark: Any, tmp_path: Path) -> None:
    """With spark.batch.parquet.files N (default: the session's parallelism), a Parquet batch of
    at least N * spark.batch.parquet.min.rows rows is written as N files, one Spark task each;
    the result rows come back in the input's order, each anchored to its own input, and the
    files are gone after the flush. A smaller batch is fewer files."""
    seen: list[list[str]] = []

    class Watched(Doubler):
        def transform(self, df: Any, spark: Any) -> Any:
            seen.append(sorted(p.name for p in tmp_path.iterdir()))
            return super().transform(df, spark)

    bolt, coll = make_bolt(Watched, {"spark.batch.size": 7, "spark.batch.dir": str(tmp_path), "spark.batch.input": "parquet",
                                     "spark.batch.parquet.min.rows": 2, "spark.batch.parquet.files": 3})
    inputs = [tup(FIELDS, [f"k{i}", i]) for i in range(7 + 5)]
    for t in inputs[:7]:
        bolt.execute(t)
    bolt.batch_size = 100
    for t in inputs[7:]:
        bolt.execute(t)
    bolt.flush()
    assert [len(names) for names in seen] == [3, 2]  # 7 rows: 3 files (2+2+3); 5 rows: 2 files
    assert all(name.endswith(".parquet") for names in seen for name in names)
    assert [e[1] for e in coll.emitted] == [[f"k{i}", 2 * i] for i in range(12)]  # the input's order
    assert [e[2] for e in coll.emitted] == inputs and coll.acked == inputs and not coll.failed
    assert list(tmp_path.iterdir()) == []
    for bad in ("two", -1):
        with pytest.raises(ValueError, match="spark.batch.parquet.files must be"):
            make_bolt(Doubler, {"spark.batch.parquet.files": bad})


def test_overlap_takes_the_next_batch_while_spark_runs_the_last(spark: Any) -> None:
    """spark.batch.overlap: a full batch goes to the bolt's Spark thread and execute() returns;
    its result is emitted and its inputs acked on the executor's thread (a later execute, a tick
    or flush), in order, after the batch before; a failed batch fails its inputs and emits none
    of its rows."""
    import threading

    spark_threads: set[str] = set()

    class Slow(Doubler):
        def transform(self, df: Any, spark: Any) -> Any:
            spark_threads.add(threading.current_thread().name)
            from pyspark.sql import functions as F

            if df.where(F.col("id") == "boom").count():
                raise RuntimeError("boom")
            return super().transform(df, spark)

    class Recording(FakeCollector):
        def emit(self, values: Any, stream: str = "default", anchors: Any = None, msg_id: Any = None) -> list[int]:
            assert threading.current_thread() is threading.main_thread()
            return super().emit(values, stream, anchors, msg_id)

    bolt, coll = Slow(), Recording()
    bolt.prepare({"topology.tick.tuple.freq.secs": 1, "spark.batch.size": 2, "spark.batch.overlap": True},
                 FakeContext(), coll)
    first = [tup(FIELDS, ["a", 1]), tup(FIELDS, ["b", 2])]
    for t in first:
        bolt.execute(t)
    assert bolt._inflight is not None and not coll.acked  # on the Spark thread; execute returned
    second = [tup(FIELDS, ["boom", 3]), tup(FIELDS, ["c", 4])]
    for t in second:  # the second batch waits for the first, then goes to the Spark thread
        bolt.execute(t)
    assert coll.acked == first and [e[1] for e in coll.emitted] == [["a", 2], ["b", 4]]
    assert [e[2] for e in coll.emitted] == first  # each row anchored to its own input
    third = [tup(FIELDS, ["d", 5])]
    bolt.execute(third[0])
    deadline = time.monotonic() + 120
    while not coll.failed and time.monotonic() < deadline:  # a tick finishes a batch that is done
        time.sleep(0.05)
        bolt.execute(tick())
    assert coll.failed == second and len(coll.errors) == 1 and "boom" in str(coll.errors[0])
    bolt.flush()  # the partial batch, synchronously
    assert coll.acked == first + third and [e[1] for e in coll.emitted] == [["a", 2], ["b", 4], ["d", 10]]
    assert bolt._inflight is None and all(name.startswith("spark-c") for name in spark_threads - {"MainThread"})
    assert any(name.startswith("spark-c") for name in spark_threads)
    bolt.cleanup()


class Passthrough(sq.SparkBatchBolt):
    TYPED = {"id": "string", "ts": "timestamp", "day": "date", "price": "decimal(10,3)", "blob": "binary",
             "ok": "boolean", "ratio": "double", "n": "bigint", "tags": "array<string>",
             "attrs": "map<string,bigint>", "pt": "struct<x:double,y:double>"}
    outputs = {"default": list(TYPED), "errors": sq.ERROR_FIELDS}
    schema = TYPED


@pytest.mark.parametrize("way_in", ["arrow", "parquet"])
def test_batch_bolt_keeps_types_exact_through_arrow(spark: Any, way_in: str) -> None:
    """Values go to Spark and back as themselves (the wire carries datetime, date, Decimal and
    bytes), timestamps as the same instant whatever the session's time zone; through
    createDataFrame and through a Parquet file alike."""
    utc = dt.timezone.utc
    naive = dt.datetime(2024, 3, 31, 1, 30, 0, 250)  # local time, as Spark reads a naive one
    inputs = [
        ["a", dt.datetime(2024, 3, 31, 3, 30, 0, 999999, tzinfo=dt.timezone(dt.timedelta(hours=2))),
         dt.date(2024, 2, 29), decimal.Decimal("12.345"), b"\x00\xff", True, 0.1, 2**62, ["x", None],
         {"k": 1, "j": None}, {"x": 1.5, "y": -2.0}],
        ["b", 1_700_000_000, "2024-01-01", "7", bytearray(b"z"), False, 3, -1, [], {}, None],
        ["c", naive, dt.date(1, 1, 1), None, None, None, None, None, None, None, {"x": None, "y": 0.0}],
    ]
    expected = [
        inputs[0],
        ["b", dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=utc), dt.date(2024, 1, 1), decimal.Decimal("7.000"),
         b"z", False, 3.0, -1, [], {}, None],
        ["c", naive.astimezone(utc), dt.date(1, 1, 1), None, None, None, None, None, None, None, {"x": None, "y": 0.0}],
    ]
    old_tz = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        bolt, coll = make_bolt(Passthrough, {"spark.batch.size": 3, "spark.batch.input": way_in})
        for values in inputs:
            bolt.execute(tup(list(Passthrough.TYPED), values))
    finally:
        spark.conf.set("spark.sql.session.timeZone", old_tz)
    assert bolt.last_input == way_in
    assert not coll.errors and not coll.failed and len(coll.acked) == 3
    got = [values for _, values, _ in coll.emitted]
    assert got == expected
    for row, want in zip(got, expected):
        assert [type(v) for v in row] == [type(v) for v in want]
    assert got[0][1].utcoffset() == dt.timedelta(0)  # emitted in UTC


def test_batch_bolt_falls_back_to_rows_when_arrow_refuses_a_value(spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Spark takes a struct as a tuple in one row and a dict in the next, Arrow does not: such a
    batch goes to Spark row by row (with one warning), and its result is the same."""

    class Points(sq.SparkBatchBolt):
        outputs = {"default": ["id", "pt"], "errors": sq.ERROR_FIELDS}
        schema = {"id": "string", "pt": "struct<x:bigint,y:bigint>"}

    bolt, coll = make_bolt(Points, {"spark.batch.size": 2})
    with caplog.at_level("WARNING", logger="squall.spark"):
        for i in range(4):
            bolt.execute(tup(["id", "pt"], [f"p{i}", {"x": i, "y": -i} if i % 2 else (i, -i)]))
    assert [e[1] for e in coll.emitted] == [[f"p{i}", {"x": i, "y": -i}] for i in range(4)]
    assert len(coll.acked) == 4 and not coll.failed
    warnings = [r.getMessage() for r in caplog.records if "row by row" in r.getMessage()]
    assert len(warnings) == 1 and "field 'pt'" in warnings[0], warnings


SESSION_AT_EXIT = """
import atexit, sys
sys.path.insert(0, sys.argv[1])

def after_exit_hooks():  # registered first, so it runs after squall.spark's own hook
    from pyspark import SparkContext
    from squall import spark as sq
    print("stopped:", sq._session is None and SparkContext._active_spark_context is None, flush=True)

atexit.register(after_exit_hooks)
from squall import spark as sq
session = sq.get_spark({"spark.master": "local[1]"})
assert sq.get_spark({"spark.master": "local[2]"}) is session  # one per process
print("jvm", session._jvm.ProcessHandle.current().pid(), flush=True)
"""


@pytest.mark.timeout(420)
def test_the_session_is_stopped_when_the_process_exits(tmp_path: Path) -> None:
    import os
    import subprocess

    from squall.zkserver import java_available

    if not java_available():
        pytest.skip("no java on PATH")
    script = tmp_path / "session_at_exit.py"
    script.write_text(SESSION_AT_EXIT)
    out = subprocess.run([sys.executable, str(script), str(REPO / "worker_image")], capture_output=True, text=True,
                         timeout=400, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "stopped: True" in lines, out.stdout + out.stderr[-3000:]
    jvm = int(next(line.split()[1] for line in lines if line.startswith("jvm ")))
    deadline = time.monotonic() + 30
    while True:  # the JVM does not outlive the process
        try:
            os.kill(jvm, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"the JVM {jvm} outlived its Python process"
        time.sleep(0.2)


# -- the sink ----------------------------------------------------------------------------------
def test_sink_appends_partitioned_batches_with_ids(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "ds"
    conf = {"spark.batch.size": 3, "spark.sink.path": str(path), "spark.sink.id.field": "id",
            "spark.sink.time.field": "ts", "spark.schema": {"id": "string", "ts": "timestamp", "x": "bigint"}}
    bolt, coll = make_bolt(sq.SparkSinkBolt, conf)
    day = 86_400
    rows = [["m1", 1_700_000_000, 1], ["m2", 1_700_000_000 + day, 2], ["m3", 1_700_000_000, 3]]
    for r in rows:
        bolt.execute(tup(["id", "ts", "x"], r))
    for r in rows[:2] + [["m4", 1_700_000_000, 4]]:  # m1, m2 replayed: duplicates in the dataset
        bolt.execute(tup(["id", "ts", "x"], r))
    bolt.execute(tup(["id", "ts", "x"], [None, 1, 5]))  # no id: rejected
    assert len(coll.acked) == 7 and not coll.failed and not coll.errors
    assert [e[0] for e in coll.emitted] == ["errors"] and "'id' is required" in coll.emitted[0][1][0]
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ["_staging", "dt=2023-11-14", "dt=2023-11-15"]
    assert not list((path / "_staging").iterdir())  # every staged batch moved into place
    raw = spark.read.parquet(str(path))
    assert raw.count() == 6 and raw.select("_batch_id").distinct().count() == 2
    dedup = sq.read_dataset(spark, str(path), id_field="id")
    got = sorted((r.id, r.x, str(r.dt)) for r in dedup.collect())
    assert got == [("m1", 1, "2023-11-14"), ("m2", 2, "2023-11-15"), ("m3", 3, "2023-11-14"), ("m4", 4, "2023-11-14")]


def test_sink_write_failure_fails_the_batch(spark: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    conf = {"spark.batch.size": 1, "spark.sink.path": str(blocker / "ds"), "spark.schema": {"msg_id": "string"}}
    bolt, coll = make_bolt(sq.SparkSinkBolt, conf)
    t = tup(["msg_id"], ["m1"])
    bolt.execute(t)
    assert coll.failed == [t] and not coll.acked and len(coll.errors) == 1


# -- the source --------------------------------------------------------------------------------
def test_source_spout_emits_replays_and_splits_tasks(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "src"
    spark.createDataFrame([(f"id{i}", i) for i in range(20)], "id STRING, v BIGINT").coalesce(2).write.parquet(str(path))
    conf = {"spark.source.path": str(path), "spark.source.id.field": "id", "spark.source.fields": ["id", "v"]}

    def run(task: int, tasks: list[int]) -> tuple[Any, FakeCollector]:
        spout, coll = sq.SparkSourceSpout(), FakeCollector()
        spout.open(conf, FakeContext("src", task, tasks), coll)
        for _ in range(50):
            spout.next_tuple()
        return spout, coll

    spout, coll = run(1, [1])
    assert sorted(v for _, v, _ in coll.emitted) == sorted([f"id{i}", i] for i in range(20))
    assert all(msg_id == v[0] for _, v, msg_id in coll.emitted) and spout.exhausted and not spout.done
    spout.fail("id3")
    spout.fail("id4")
    spout.next_tuple()
    spout.next_tuple()
    assert [e[2] for e in coll.emitted[-2:]] == ["id3", "id4"]  # replayed
    for i in range(20):
        spout.ack(f"id{i}")
    assert spout.done and spout.acked == 20 and spout.failed == 2

    ids = [sorted(e[2] for e in run(task, [1, 2])[1].emitted) for task in (1, 2)]
    assert sorted(ids[0] + ids[1]) == sorted(f"id{i}" for i in range(20)) and ids[0] and ids[1]

    # no id column: ids are generated from the row number and put into the id field
    conf2 = {"spark.source.path": str(path), "spark.source.id.field": "msg_id", "spark.source.id.prefix": "r",
             "spark.source.fields": ["msg_id", "v"]}
    spout2, coll2 = sq.SparkSourceSpout(), FakeCollector()
    spout2.open(conf2, FakeContext("src", 1, [1]), coll2)
    for _ in range(25):
        spout2.next_tuple()
    assert [e[2] for e in coll2.emitted] == [f"r{n}" for n in range(20)]
    assert all(v[0] == m for _, v, m in coll2.emitted)


# -- the clickstream example end to end --------------------------------------------------------
def _wait_for(cond: Callable[[], Any], timeout: float, what: str, cluster: Any) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {n}\n" + "\n".join(t.splitlines()[-40:]) for n, t in cluster.worker_logs().items())
            pytest.fail(f"timed out after {timeout}s waiting for {what}; crashes {cluster.crashes}{logs}")
        time.sleep(0.25)


def test_clickstream_stream_equals_batch_with_replays(zookeeper: Any, spark: Any, tmp_path: Path) -> None:
    from squall_operator.local import LocalCluster

    batch_job, clickstream = import_example(CLICKSTREAM, "batch_job", "clickstream")
    base = tmp_path / "cs"
    n_events = 600
    bad = clickstream.generate(base, n_events)
    clickstream.fit_model(spark, clickstream.paths(base)["history"], clickstream.paths(base)["model"])
    data = yaml.safe_load((CLICKSTREAM / "topology.yaml").read_text())
    data["spec"]["config"].update({
        "clickstream.dir": str(base), "clickstream.events": n_events, "clickstream.fail.mod": 25,
        "clickstream.spark.fail.batches": 1, "clickstream.sink.fail.after.write": 1,
        "spark.master": "local[1]", "spark.batch.size": 200,
    })
    topo = parse_topology(data, source="clickstream")
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    cluster = LocalCluster(nodes=1, slots=1, zookeeper=zookeeper.connect_string, workdir=str(workdir),
                           search_paths=[str(CLICKSTREAM)])
    cluster.start()
    try:
        cluster.submit(topo)
        out = base / "out"
        _wait_for(lambda: list(out.glob("spout-*.done")), 150, "every event to be acked", cluster)
        errors_reported = {c: len(cluster.state.errors(topo.name, c)) for c in ("enrich", "sink")}
        cluster.kill(topo.name, 1.0)
        assert cluster.wait_removed(topo.name, 60)
        _wait_for(lambda: not cluster.worker_pids(topo.name), 60, "the worker to exit", cluster)
        assert not cluster.crashes
    finally:
        cluster.shutdown()

    spout = json.loads(next(out.glob("spout-*.json")).read_text())
    assert spout["done"] and spout["pending"] == 0
    # replays happened: parse failed every 25th event once, enrich's first batch failed in Spark,
    # the sink's first batch was written and then failed
    assert spout["failed"] >= n_events // 25 + 200
    errors = [json.loads(line) for f in out.glob("errors-*.jsonl") for line in f.read_text().splitlines()]
    error_ids = {int(e["values"][0][1:]) for e in errors}
    assert error_ids == set(bad), [e for e in errors if int(e["values"][0][1:]) not in bad]
    assert {e["from"] for e in errors} == {"parse", "enrich"}
    assert all(e["reason"] for e in errors)
    assert errors_reported["enrich"] >= 1 and errors_reported["sink"] >= 1  # reported to ZooKeeper

    sink = spark.read.parquet(str(base / "sink"))
    ids = [r.event_id for r in sink.select("event_id").collect()]
    assert len(ids) > len(set(ids)), "the sink's failed-after-write batch should have left duplicates"
    assert set(ids) == {f"e{i}" for i in range(n_events)} - {f"e{i}" for i in bad}
    assert sorted(p.name for p in (base / "sink").iterdir() if p.name.startswith("dt=")) == ["dt=2023-11-14", "dt=2023-11-15"]

    batch, stream = batch_job.compare(spark, str(base))
    assert len(batch) > 10
    assert stream == batch
    counts = collections.Counter(r.category for r in batch)
    assert "unknown" in counts  # the reference join's miss is kept, not dropped
