"""The clickstream's batch job: recompute the windowed aggregates from the raw input with one
Spark job, compute them from the streaming sink (deduplicated by event_id), and compare.

    python examples/clickstream/batch_job.py [--dir /tmp/squall-clickstream] [--master local[2]]

Exits 0 when the two agree exactly, 1 otherwise (the differing rows are printed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clickstream  # noqa: E402

from squall.spark import read_dataset  # noqa: E402


def batch_aggregates(spark: Any, base: str) -> Any:
    """The batch recompute: raw input -> parse -> enrich -> window aggregates."""
    p = clickstream.ensure_data({"clickstream.dir": base}, spark)
    events = clickstream.parse_raw(spark, p["raw"])
    return clickstream.window_aggregates(clickstream.enrich(events, spark, p))


def stream_aggregates(spark: Any, base: str) -> Any:
    """The same aggregates from what the stream wrote, each event counted once."""
    p = clickstream.paths(base)
    return clickstream.window_aggregates(read_dataset(spark, str(p["sink"]), id_field="event_id"))


def compare(spark: Any, base: str) -> tuple[list[Any], list[Any]]:
    """(batch rows, stream rows), as sorted lists of Rows."""
    return batch_aggregates(spark, base).collect(), stream_aggregates(spark, base).collect()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=clickstream.DEFAULT_DIR)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("clickstream-batch")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        batch, stream = compare(spark, args.dir)
        for row in batch:
            print(f"{row.window_start}  {row.category:<10} events={row.events:<5} dwell_ms={row.dwell_ms:<9}"
                  f" users={row.users:<3} high_score={row.high_score}")
        if batch == stream:
            print(f"OK: the stream's sink (deduplicated) equals the batch recompute ({len(batch)} rows)")
            return 0
        print("MISMATCH")
        print("only in batch: ", [r for r in batch if r not in stream])
        print("only in stream:", [r for r in stream if r not in batch])
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
