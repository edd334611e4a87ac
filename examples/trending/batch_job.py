"""The trending example's referee: the same windows recomputed in one Spark batch.

    python batch_job.py --generate EVENTS [--events N]       # write an events file
    python batch_job.py --compare EVENTS OUT [--length 20 --slide 5 --top 5]

`--compare` reads the events the spout replayed and what the topology wrote to OUT (the windows
`report` wrote, the tuples `late` received), recomputes every window in Spark (windows `(end -
length, end]`, ends multiples of the slide, the top words by count, ties by word) over the words
that were not late, and exits 1 when a window differs.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def words_of(events: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """(word, ts) as SplitWords emits them, for the events with a numeric timestamp."""
    out = []
    for e in events:
        ts = e["ts"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            continue
        out.extend((w, float(ts)) for w in str(e["text"]).lower().split())
    return out


def read_late(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("late-*.jsonl")) for line in f.read_text().splitlines()]


def stream_windows(out: Path) -> dict[float, list[list[Any]]]:
    windows: dict[float, list[list[Any]]] = {}
    for f in sorted(out.glob("windows-*.jsonl")):
        for line in f.read_text().splitlines():
            w = json.loads(line)
            if w["end"] in windows:
                raise AssertionError(f"window ending at {w['end']} reported twice")
            windows[float(w["end"])] = w["top"]
    return windows


def recompute(spark: Any, rows: list[tuple[str, float]], length: float, slide: float,
              top: int) -> dict[float, list[list[Any]]]:
    """Top `top` words of every window holding a word, in Spark."""
    from pyspark.sql import Window, functions as F

    if not rows:
        return {}
    df = spark.createDataFrame(rows, "word string, ts double")
    k = int(-(-length // slide))  # windows a word can be in
    first_end = F.ceil(F.col("ts") / slide) * slide
    ends = (df.withColumn("j", F.explode(F.sequence(F.lit(0), F.lit(k - 1))))
              .withColumn("end", (first_end + F.col("j") * slide).cast("double"))
              .where(F.col("end") - length < F.col("ts")))
    counts = ends.groupBy("end", "word").count()
    ranked = counts.withColumn(
        "rank", F.row_number().over(Window.partitionBy("end").orderBy(F.desc("count"), F.asc("word"))))
    result: dict[float, list[list[Any]]] = collections.defaultdict(list)
    for r in ranked.where(F.col("rank") <= top).orderBy("end", "rank").collect():
        result[float(r["end"])].append([r["word"], int(r["count"])])
    return dict(result)


def compare(spark: Any, events_path: Path, out: Path, *, length: float = 20.0, slide: float = 5.0,
            top: int = 5) -> tuple[dict[float, list[list[Any]]], dict[float, list[list[Any]]]]:
    """(batch, stream): the batch over the words that were not late, and what the stream wrote."""
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    late = collections.Counter(
        (r["values"][0], float(r["values"][1])) for r in read_late(out) if r["reason"] == "late")
    rows: list[tuple[str, float]] = []
    for row in words_of(events):
        if late[row]:
            late[row] -= 1
        else:
            rows.append(row)
    assert not +late, f"late tuples that are not words of the events: {+late}"
    return recompute(spark, rows, length, slide, top), stream_windows(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generate", type=Path, metavar="EVENTS")
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("EVENTS", "OUT"))
    parser.add_argument("--length", type=float, default=20.0)
    parser.add_argument("--slide", type=float, default=5.0)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args(argv)
    if args.generate:
        sys.path.insert(0, str(HERE))
        import trending

        trending.generate(args.generate, args.events)
        print(f"wrote {args.events} events to {args.generate}")
    if args.compare:
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[1]").appName("trending-batch")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        try:
            batch, stream = compare(spark, *args.compare, length=args.length, slide=args.slide, top=args.top)
        finally:
            spark.stop()
        diff = sorted(e for e in set(batch) | set(stream) if batch.get(e) != stream.get(e))
        for end in diff[:20]:
            print(f"window ending {end}: batch {batch.get(end)} stream {stream.get(end)}")
        print(f"{len(batch)} windows in the batch, {len(stream)} from the stream, {len(diff)} differ")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
