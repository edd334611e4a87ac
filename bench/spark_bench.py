"""Rows/s through SparkBatchBolt against batch size and batch interval.

    .venv/bin/python bench/spark_bench.py [--master local[2]] [--quick] [--sizes 1000,20000] [--no-paced]
        [--stages] [--input auto|parquet|arrow] [--overlap] [--conf spark.key=value ...] [--alternate 1000,5000]

The bolt runs in this process with a collector that only counts (no topology, no network), so
the figures are the bolt's own cost: Python -> DataFrame (an Arrow table), the transform,
collect (as Arrow), emit, ack. `--stages` prints, after each enrich run, where its time went
(wall, Python CPU and the JVM's CPU per 1000 rows, per part of the work). `--alternate SIZES`
only compares the ways into Spark and adaptive execution on and off, flush by flush in turn.
Two transforms: `identity` (select the input) and `enrich` (a broadcast join with a 100-row
reference table plus a computed column), the clickstream's kind of work.

Part 1, saturated input: N tuples as fast as execute() takes them, per batch size.
Part 2, paced input: tuples arrive at a fixed rate; per batch interval (batch size large, so the
interval decides the flush), the achieved rate and the mean / max time a tuple waited for its ack.
Runs in about 1-2 minutes on a quiet machine. The load average is printed at the start and the
end: on a shared machine compare runs taken in one sitting, as ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "worker_image"))

import squall.spark  # noqa: E402
from squall.components import Tuple  # noqa: E402
from squall.spark import SparkBatchBolt, get_spark, stop_spark  # noqa: E402

FIELDS = ["event_id", "ts", "user", "page", "dwell_ms"]
INDEX = {f: i for i, f in enumerate(FIELDS)}
SCHEMA = {"event_id": "string", "ts": "timestamp", "user": "string", "page": "string", "dwell_ms": "bigint"}


class Ctx:
    topology_id = "bench"
    component_id = "bolt"
    task_id = 1
    worker_port = 0


class CountingCollector:
    def __init__(self) -> None:
        self.emitted = self.acked = self.failed = 0
        self.ack_times: list[float] = []
        self.arrival: dict[int, float] = {}

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> list[int]:
        self.emitted += 1
        return [1]

    def ack(self, tup: Tuple) -> None:
        self.acked += 1
        t0 = self.arrival.pop(id(tup), None)
        if t0 is not None:
            self.ack_times.append(time.perf_counter() - t0)

    def fail(self, tup: Tuple) -> None:
        self.failed += 1

    def report_error(self, exc: BaseException) -> None:
        raise exc


class Stages:
    """Wall, Python CPU and JVM CPU seconds spent in each named part of the bolt's work."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0, c0, j0 = time.perf_counter(), time.process_time(), jvm_cpu()
        try:
            yield
        finally:
            tot = self.totals.setdefault(name, [0.0, 0.0, 0.0])
            tot[0] += time.perf_counter() - t0
            tot[1] += time.process_time() - c0
            tot[2] += jvm_cpu() - j0

    def get(self, name: str) -> list[float]:
        return self.totals.get(name, [0.0, 0.0, 0.0])


STAGES = Stages()


def _timed_values(column: Any) -> list[Any]:
    with STAGES("values"):
        return _arrow_to_values(column)


_arrow_to_values = squall.spark.batch.arrow_to_values
squall.spark.batch.arrow_to_values = _timed_values  # the bolt's name for it, timed as its own stage (bench only)


class Identity(SparkBatchBolt):
    """The bolt, with each part of a flush timed (STAGES)."""

    outputs = {"default": FIELDS, "errors": ["reason", "values"]}
    schema = SCHEMA

    def flush(self) -> None:
        with STAGES("flush"):
            super().flush()

    def dataframe(self, *args: Any, **kw: Any) -> Any:
        with STAGES("dataframe"):
            return super().dataframe(*args, **kw)

    def arrow_dataframe(self, *args: Any, **kw: Any) -> Any:
        with STAGES("arrow_dataframe"):
            return super().arrow_dataframe(*args, **kw)

    def handle_result(self, *args: Any, **kw: Any) -> None:
        with STAGES("handle_result"):
            super().handle_result(*args, **kw)

    def collect_columns(self, df: Any) -> Any:
        with STAGES("collect_columns"):
            return super().collect_columns(df)

    def transform(self, df: Any, spark: Any) -> Any:
        with STAGES("transform"):
            return self.plan(df, spark)

    def plan(self, df: Any, spark: Any) -> Any:
        return df


class Enrich(Identity):
    outputs = {"default": [*FIELDS, "category", "score"], "errors": ["reason", "values"]}
    ref: Any = None

    def plan(self, df: Any, spark: Any) -> Any:
        from pyspark.sql import functions as F

        if Enrich.ref is None:
            Enrich.ref = spark.createDataFrame([(f"/p{i}", f"cat{i % 7}") for i in range(100)], "page STRING, category STRING").cache()
        return (df.join(F.broadcast(Enrich.ref), "page", "left")
                  .withColumn("score", F.col("dwell_ms") / F.lit(60000.0)))


def make_tuples(n: int) -> list[Tuple]:
    return [Tuple([f"e{i}", 1_700_000_000 + i, f"u{i % 50}", f"/p{i % 100}", 100 + i % 5000], 1, "src", "default", INDEX, None)
            for i in range(n)]


INPUT = ["auto"]  # spark.batch.input for the bolts (--input)
OVERLAP = [False]  # spark.batch.overlap for the bolts (--overlap)
BOLT_CONF: dict[str, Any] = {}  # more bolt config (--bolt KEY=VALUE)


def make_bolt(cls: type, size: int, interval: float) -> tuple[SparkBatchBolt, CountingCollector]:
    bolt, coll = cls(), CountingCollector()
    bolt.prepare({"spark.batch.size": size, "spark.batch.interval.secs": interval,
                  "topology.tick.tuple.freq.secs": 0.05, "spark.batch.input": INPUT[0],
                  "spark.batch.overlap": OVERLAP[0], **BOLT_CONF}, Ctx(), coll)
    return bolt, coll


JVM_PID = 0  # the SparkSession's JVM, for its CPU time (Linux /proc); 0: not measured


def jvm_cpu() -> float:
    """CPU seconds the JVM has used so far (0.0 where it cannot be read)."""
    try:
        stat = Path(f"/proc/{JVM_PID}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


CPU: dict[str, float] = {}  # class name -> CPU ms (Python + JVM) per 1000 rows, of the last run


def saturated(cls: type, size: int, n: int) -> float:
    bolt, coll = make_bolt(cls, size, 3600)
    tuples = make_tuples(n)
    STAGES.totals.clear()
    t0, c0, j0 = time.perf_counter(), time.process_time(), jvm_cpu()
    with STAGES("all"):
        for t in tuples:
            bolt.execute(t)
        bolt.flush()
    dt = time.perf_counter() - t0
    CPU[cls.__name__] = (time.process_time() - c0 + jvm_cpu() - j0) / n * 1e6
    assert coll.acked == n and coll.emitted == n, (coll.acked, coll.emitted)
    return n / dt


# the parts of the bolt's work: (name, stages added, stages subtracted)
PARTS = [
    ("take: execute() per tuple, checking types", ["all"], ["flush"]),
    ("to Arrow: the batch's columns", ["dataframe"], ["arrow_dataframe"]),
    ("into Spark: Parquet file or createDataFrame", ["arrow_dataframe"], []),
    ("transform (planning in Python)", ["transform"], []),
    ("Spark job, result as Arrow (toArrow)", ["collect_columns"], ["values"]),
    ("Arrow -> tuple values", ["values"], []),
    ("emit", ["handle_result"], ["collect_columns"]),
    ("ack, the rest of flush", ["flush"], ["dataframe", "transform", "handle_result"]),
]


def print_stages(n: int) -> None:
    """Where the last saturated run's time went, per 1000 rows."""
    print(f"\n| part ({n} rows) | wall ms / 1000 rows | Python CPU ms | JVM CPU ms |")
    print("| --- | ---: | ---: | ---: |")
    for name, plus, minus in PARTS:
        fig = [sum(STAGES.get(p)[k] for p in plus) - sum(STAGES.get(m)[k] for m in minus) for k in range(3)]
        print(f"| {name} | {fig[0] / n * 1e6:.1f} | {fig[1] / n * 1e6:.1f} | {fig[2] / n * 1e6:.1f} |")
    tot = STAGES.get("all")
    print(f"| all | {tot[0] / n * 1e6:.1f} | {tot[1] / n * 1e6:.1f} | {tot[2] / n * 1e6:.1f} |", flush=True)


def one_flush(cls: type, n: int) -> float:
    """CPU seconds (Python + JVM) of one flush of n rows, triggered by the batch's last tuple."""
    bolt, coll = make_bolt(cls, n, 3600)
    tuples = make_tuples(n)
    for t in tuples[:-1]:
        bolt.execute(t)
    c0, j0 = time.process_time(), jvm_cpu()
    bolt.execute(tuples[-1])
    assert coll.acked == n
    return time.process_time() - c0 + jvm_cpu() - j0


def alternate(spark: Any, sizes: list[int], rounds: int = 5) -> None:
    """The fixed cost per batch: enrich flushes with each setting in turn, batch by batch, so a
    load change on a shared machine hits every setting alike; the median CPU per flush."""
    settings = {
        "createDataFrame, adaptive on": ("arrow", "true"),
        "createDataFrame, adaptive off": ("arrow", "false"),
        "Parquet, adaptive on": ("parquet", "true"),
        "Parquet, adaptive off": ("parquet", "false"),
    }
    got: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for size in sizes:
            for name, (way_in, adaptive) in settings.items():
                INPUT[0] = way_in
                spark.conf.set("spark.sql.adaptive.enabled", adaptive)
                got.setdefault((name, size), []).append(one_flush(Enrich, size))
    print(f"\nPython + JVM CPU s per enrich flush, median of {rounds}, settings alternated")
    print("| setting | " + " | ".join(f"{size} rows" for size in sizes) + " |")
    print("| --- |" + " ---: |" * len(sizes))
    for name in settings:
        print(f"| {name} | " + " | ".join(f"{statistics.median(got[name, size]):.3f}" for size in sizes) + " |")


def compare(variants: list[str], size: int, batches: int, rounds: int) -> None:
    """Bolt settings against each other: saturated enrich runs with each variant in turn, round
    after round in one session, so that a load change on a shared machine hits every variant
    alike; the median rows/s and CPU (Python + JVM ms per 1000 rows) of each."""
    got: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            BOLT_CONF.clear()
            BOLT_CONF.update(c.split("=", 1) for c in v.split(";") if c)
            rate = saturated(Enrich, size, size * batches)
            got[v].append((rate, CPU["Enrich"]))
    BOLT_CONF.clear()
    print(f"\nenrich, {size}-row batches, {batches} per run, {rounds} rounds, variants alternated")
    print("| bolt settings | rows/s median | rows/s each | CPU ms / 1000 rows, median |")
    print("| --- | ---: | --- | ---: |")
    for v, runs in got.items():
        rates = [r for r, _ in runs]
        print(f"| {v or '(defaults)'} | {statistics.median(rates):,.0f} | {', '.join(f'{r:,.0f}' for r in rates)}"
              f" | {statistics.median(c for _, c in runs):.1f} |", flush=True)


def paced(cls: type, interval: float, rate: float, secs: float) -> tuple[float, float, float]:
    bolt, coll = make_bolt(cls, 1_000_000, interval)
    tick = Tuple([1], -1, "__system", "__tick", {"rate_secs": 0}, None)
    n = int(rate * secs)
    tuples = make_tuples(n)
    t0 = time.perf_counter()
    next_tick = t0
    i = 0
    while i < n:
        now = time.perf_counter()
        due = min(n, int((now - t0) * rate) + 1)
        while i < due:
            coll.arrival[id(tuples[i])] = time.perf_counter()
            bolt.execute(tuples[i])
            i += 1
        if now >= next_tick:  # the executor's tick tuples, every 50 ms
            bolt.execute(tick)
            next_tick = now + 0.05
        time.sleep(0.002)
    while coll.acked < n:
        time.sleep(0.05)
        bolt.execute(tick)
    dt = time.perf_counter() - t0
    return n / dt, statistics.mean(coll.ack_times) * 1000, max(coll.ack_times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true", help="fewer points, for a smoke run")
    ap.add_argument("--sizes", help="batch sizes of part 1, comma-separated (default 50 ... 100000)")
    ap.add_argument("--no-paced", action="store_true", help="skip part 2")
    ap.add_argument("--alternate", metavar="SIZES",
                    help="only compare the ways in and adaptive execution at these batch sizes, alternated")
    ap.add_argument("--stages", action="store_true", help="where each enrich run's time went, per part")
    ap.add_argument("--input", choices=["auto", "parquet", "arrow"], default="auto",
                    help="spark.batch.input: how batches get into Spark (auto: Parquet for batches of 5000+ rows with a local master)")
    ap.add_argument("--batches", type=int, default=2, help="batches per saturated run (default 2)")
    ap.add_argument("--overlap", action="store_true",
                    help="spark.batch.overlap: take the next batch while Spark runs the last")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable), e.g. spark.sql.adaptive.enabled=false")
    ap.add_argument("--bolt", action="append", default=[], metavar="KEY=VALUE",
                    help="a bolt setting (repeatable), e.g. spark.batch.parquet.files=1")
    ap.add_argument("--compare", action="append", default=[], metavar="KEY=VALUE[;KEY=VALUE]",
                    help="only compare these bolt settings (repeatable; '' is the defaults), alternated run by run")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of --compare (default 4)")
    args = ap.parse_args()
    BOLT_CONF.update(c.split("=", 1) for c in args.bolt)
    print("load average at start: %.1f %.1f %.1f" % os.getloadavg())
    t_start = time.perf_counter()
    t = time.perf_counter()
    conf: dict[str, Any] = {"spark.master": args.master, "spark.conf.spark.sql.shuffle.partitions": 2}
    conf.update({f"spark.conf.{k}": v for k, v in (c.split("=", 1) for c in args.conf)})
    INPUT[0] = args.input
    OVERLAP[0] = args.overlap
    spark = get_spark(conf)
    spark.sparkContext.setLogLevel("ERROR")
    global JVM_PID
    try:
        jvm: Any = spark._jvm
        JVM_PID = int(jvm.ProcessHandle.current().pid())
    except Exception:  # a remote master, or no py4j access: wall-clock figures only
        JVM_PID = 0
    print(f"SparkSession start: {time.perf_counter() - t:.1f}s (master {args.master}, pyspark {spark.version})")
    # warm up: the JVM's JIT, the reference table, the first job's setup (a worker runs for
    # hours; its steady state is what counts)
    for cls in (Identity, Enrich):
        for _ in range(3):
            saturated(cls, 5000, 10000)

    if args.compare:
        compare(args.compare, int((args.sizes or "100000").split(",")[0]), args.batches, args.rounds)
        stop_spark()
        print(f"\ntotal {time.perf_counter() - t_start:.0f}s; load average at end: %.1f %.1f %.1f" % os.getloadavg())
        return
    if args.alternate:
        alternate(spark, [int(x) for x in args.alternate.split(",")])
        stop_spark()
        print(f"\ntotal {time.perf_counter() - t_start:.0f}s; load average at end: %.1f %.1f %.1f" % os.getloadavg())
        return
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    else:
        sizes = [100, 1000, 20000] if args.quick else [50, 200, 1000, 2000, 5000, 20000, 50000, 100000]
    print("\nPart 1: saturated input, rows/s by batch size")
    print("(CPU: Python + JVM CPU ms per 1000 rows, less sensitive than rows/s to other load)")
    print("| batch size | identity rows/s | enrich rows/s | enrich ms/batch | identity CPU | enrich CPU |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in sizes:
        n = max(args.batches * size, 2000)
        r_id = saturated(Identity, size, n)
        r_en = saturated(Enrich, size, n)
        cpu_id = CPU["Identity"]
        print(f"| {size} | {r_id:,.0f} | {r_en:,.0f} | {size / r_en * 1000:,.0f} | {cpu_id:,.0f} | {CPU['Enrich']:,.0f} |",
              flush=True)
        if args.stages:
            print_stages(n)

    if args.no_paced:
        stop_spark()
        print(f"\ntotal {time.perf_counter() - t_start:.0f}s; load average at end: %.1f %.1f %.1f" % os.getloadavg())
        return
    rate = 2000.0
    intervals = [0.25, 1.0] if args.quick else [0.1, 0.25, 0.5, 1.0, 2.0]
    print(f"\nPart 2: paced input at {rate:.0f} tuples/s (enrich), by batch interval")
    print("| interval s | achieved rows/s | mean wait to ack ms | max wait ms |")
    print("| ---: | ---: | ---: | ---: |")
    for interval in intervals:
        got, mean_ms, max_ms = paced(Enrich, interval, rate, secs=max(3.0, 2 * interval))
        print(f"| {interval:g} | {got:,.0f} | {mean_ms:,.0f} | {max_ms:,.0f} |", flush=True)
    stop_spark()
    print(f"\ntotal {time.perf_counter() - t_start:.0f}s; load average at end: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
