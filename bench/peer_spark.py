"""Spark Structured Streaming's side of the peer bench: word count over the same five sentences.

    .venv/bin/python bench/peer_spark.py [--seconds 15] [--warmup 10] [--rows-per-batch 20000]

A `rate-micro-batch` source hands every micro-batch `--rows-per-batch` sentences at once (no
waiting for a clock), so the query runs saturated; each sentence is the one Squall's and Storm's
spouts draw from (value mod 5), split and exploded into words, and counted in a stateful
`groupBy(word).count()` (output mode update, a no-op sink, a checkpoint in a temporary folder),
on `local[2]` with 2 shuffle partitions: the same 2 cores, the same fields-grouped count.

Words/s are the words of the micro-batches that finished inside the window (after the warm-up),
counted from the end of the first of them to the end of the last. Spark has no per-tuple acks: the latency reported is the micro-batch
duration (`triggerExecution`), the least time from a sentence entering the query to its count
being committed. Prints one JSON line, prefixed "RESULT ".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import tempfile
import time

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]
WORDS_PER_5 = sum(len(s.split()) for s in SENTENCES)


def self_cpu() -> float:
    """CPU seconds of this (the driver's Python) process; the JVM's are read from /proc."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_pids() -> list[int]:
    """The JVM(s) this process started (pyspark's gateway is a child of ours)."""
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except OSError:
            continue
        if ppid == me:
            out.append(int(d))
    return out


def batch_end(progress: dict) -> float:
    """When a micro-batch ended, in seconds since the epoch."""
    start = datetime.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return start.timestamp() + progress["durationMs"]["triggerExecution"] / 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--rows-per-batch", type=int, default=20000, help="sentences per micro-batch")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    if args.rows_per_batch % 5:
        ap.error("--rows-per-batch must be a multiple of 5 (every sentence equally often)")

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    spark = (SparkSession.builder.master(args.master).appName("squall-bench-peer")
             .config("spark.sql.shuffle.partitions", 2)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", 10000)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="squall-bench-spark-") as ckpt:
        src = (spark.readStream.format("rate-micro-batch")
               .option("rowsPerBatch", args.rows_per_batch)
               .option("numPartitions", 2)
               .load())
        sentence = F.element_at(F.array(*[F.lit(s) for s in SENTENCES]), (F.col("value") % 5 + 1).cast("int"))
        words = src.select(F.explode(F.split(sentence, " ")).alias("word"))
        counts = words.groupBy("word").count()
        query = (counts.writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", ckpt)
                 .trigger(processingTime="0 seconds")
                 .start())
        try:
            # the first micro-batches pay for code generation and the state store's setup
            while len(query.recentProgress) < 3:
                if time.monotonic() - t0 > 300:
                    raise SystemExit("spark: no micro-batch finished within 300 s")
                time.sleep(0.2)
            startup = time.monotonic() - t0
            time.sleep(args.warmup)
            jvms = jvm_pids()
            cpu_a = self_cpu() + sum(proc_cpu(p) for p in jvms)
            seen = {p["batchId"] for p in query.recentProgress}
            w0 = time.monotonic()
            time.sleep(args.seconds)
            dt = time.monotonic() - w0
            cpu = self_cpu() + sum(proc_cpu(p) for p in jvms) - cpu_a
            done = [p for p in query.recentProgress if p["batchId"] not in seen]
        finally:
            query.stop()
    version = spark.version
    spark.stop()
    durations = sorted(p["durationMs"]["triggerExecution"] for p in done)
    # rate over whole micro-batches: the rows of the batches that ended after the first one in
    # the window, over the time from that first end to the last (no partial batch at either edge)
    ends = sorted((batch_end(p), p["numInputRows"]) for p in done)
    if len(ends) >= 2:
        rows, dt = sum(n for _, n in ends[1:]), ends[-1][0] - ends[0][0]
    else:
        rows = sum(n for _, n in ends)

    def pct(q: float) -> float:
        return float(durations[min(len(durations) - 1, int(q * len(durations)))]) if durations else 0.0

    out = {
        "pyspark": version,
        "startup_s": startup,
        "window_s": dt,
        "batches": len(done),
        "rows_per_batch": args.rows_per_batch,
        "sentences_per_sec": rows / dt,
        "words_per_sec": rows * WORDS_PER_5 / 5 / dt,
        "batch_ms_p50": pct(0.5),
        "batch_ms_p99": pct(0.99),
        "cpu_s": cpu,
    }
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
