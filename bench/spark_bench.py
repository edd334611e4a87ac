"""Rows/s through SparkBatchBolt against batch size and batch interval.

    .venv/bin/python bench/spark_bench.py [--master local[2]] [--quick]

The bolt runs in this process with a collector that only counts (no topology, no network), so
the figures are the bolt's own cost: Python -> DataFrame, the transform, collect, emit, ack.
Two transforms: `identity` (select the input) and `enrich` (a broadcast join with a 100-row
reference table plus a computed column), the clickstream's kind of work.

Part 1, saturated input: N tuples as fast as execute() takes them, per batch size.
Part 2, paced input: tuples arrive at a fixed rate; per batch interval (batch size large, so the
interval decides the flush), the achieved rate and the mean / max time a tuple waited for its ack.
Runs in about 1-2 minutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "worker_image"))

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


class Identity(SparkBatchBolt):
    outputs = {"default": FIELDS, "errors": ["reason", "values"]}
    schema = SCHEMA


class Enrich(Identity):
    outputs = {"default": [*FIELDS, "category", "score"], "errors": ["reason", "values"]}
    ref: Any = None

    def transform(self, df: Any, spark: Any) -> Any:
        from pyspark.sql import functions as F

        if Enrich.ref is None:
            Enrich.ref = spark.createDataFrame([(f"/p{i}", f"cat{i % 7}") for i in range(100)], "page STRING, category STRING").cache()
        return (df.join(F.broadcast(Enrich.ref), "page", "left")
                  .withColumn("score", F.col("dwell_ms") / F.lit(60000.0)))


def make_tuples(n: int) -> list[Tuple]:
    return [Tuple([f"e{i}", 1_700_000_000 + i, f"u{i % 50}", f"/p{i % 100}", 100 + i % 5000], 1, "src", "default", INDEX, None)
            for i in range(n)]


def make_bolt(cls: type, size: int, interval: float) -> tuple[SparkBatchBolt, CountingCollector]:
    bolt, coll = cls(), CountingCollector()
    bolt.prepare({"spark.batch.size": size, "spark.batch.interval.secs": interval,
                  "topology.tick.tuple.freq.secs": 0.05}, Ctx(), coll)
    return bolt, coll


def saturated(cls: type, size: int, n: int) -> float:
    bolt, coll = make_bolt(cls, size, 3600)
    tuples = make_tuples(n)
    t0 = time.perf_counter()
    for t in tuples:
        bolt.execute(t)
    bolt.flush()
    dt = time.perf_counter() - t0
    assert coll.acked == n and coll.emitted == n, (coll.acked, coll.emitted)
    return n / dt


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
    args = ap.parse_args()
    t_start = time.perf_counter()
    t = time.perf_counter()
    spark = get_spark({"spark.master": args.master, "spark.conf.spark.sql.shuffle.partitions": 2})
    spark.sparkContext.setLogLevel("ERROR")
    print(f"SparkSession start: {time.perf_counter() - t:.1f}s (master {args.master}, pyspark {spark.version})")
    # warm up: JIT, the reference table, the first job's setup
    for cls in (Identity, Enrich):
        saturated(cls, 500, 1000)

    sizes = [100, 1000, 5000] if args.quick else [50, 200, 1000, 2000, 5000, 20000]
    print("\nPart 1: saturated input, rows/s by batch size")
    print(f"| batch size | identity rows/s | enrich rows/s | enrich ms/batch |")
    print("| ---: | ---: | ---: | ---: |")
    for size in sizes:
        n = max(2 * size, 2000) if size <= 5000 else size
        r_id = saturated(Identity, size, n)
        r_en = saturated(Enrich, size, n)
        print(f"| {size} | {r_id:,.0f} | {r_en:,.0f} | {size / r_en * 1000:,.0f} |", flush=True)

    rate = 2000.0
    intervals = [0.25, 1.0] if args.quick else [0.1, 0.25, 0.5, 1.0, 2.0]
    print(f"\nPart 2: paced input at {rate:.0f} tuples/s (enrich), by batch interval")
    print("| interval s | achieved rows/s | mean wait to ack ms | max wait ms |")
    print("| ---: | ---: | ---: | ---: |")
    for interval in intervals:
        got, mean_ms, max_ms = paced(Enrich, interval, rate, secs=max(3.0, 2 * interval))
        print(f"| {interval:g} | {got:,.0f} | {mean_ms:,.0f} | {max_ms:,.0f} |", flush=True)
    stop_spark()
    print(f"\ntotal {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main()
