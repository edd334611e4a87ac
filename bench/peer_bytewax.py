"""Bytewax's side of the peer bench: word count over the same five sentences.

    bench/.venv-bytewax/bin/python bench/peer_bytewax.py [--seconds 15] [--warmup 5] [--batch 1000]

Runs in bench/.venv-bytewax (made by bench/setup; Bytewax is not a dependency of Squall). One
dataflow on one worker in this process (`run_main`): a source drawing the sentences at random in
batches of `--batch` until the time is up, `flat_map` split into words, `key_on` the word, a
`stateful_map` keeping each word's count and emitting it, a sink that counts what arrives.
Bytewax has no acks or replay: no complete latency, and nothing is tracked per sentence.

Words/s are the words the sink received between the end of the warm-up and the last batch,
divided by that time. Prints one JSON line, prefixed "RESULT ".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import random
import resource
import time
from typing import Any

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class Sentences(StatelessSourcePartition[str]):
    def __init__(self, seed: int, batch: int, until: float) -> None:
        self.rng = random.Random(seed)
        self.batch = batch
        self.until = until

    def next_batch(self) -> list[str]:
        if time.monotonic() >= self.until:
            raise StopIteration()
        return self.rng.choices(SENTENCES, k=self.batch)


class SentenceSource(DynamicSource[str]):
    def __init__(self, batch: int, until: float) -> None:
        self.batch = batch
        self.until = until

    def build(self, step_id: str, worker_index: int, worker_count: int) -> Sentences:
        return Sentences(worker_index, self.batch, self.until)


class Meter:
    """What the sink saw: a count, and its value and time at the end of the warm-up and last."""

    def __init__(self, warm_until: float) -> None:
        self.warm_until = warm_until
        self.count = 0
        # (time, count, CPU seconds of this process)
        self.start: tuple[float, int, float] | None = None
        self.last: tuple[float, int, float] | None = None


class CountingSink(StatelessSinkPartition[Any]):
    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def write_batch(self, items: list[Any]) -> None:
        m = self.meter
        m.count += len(items)
        now = time.monotonic()
        if m.start is None:
            if now >= m.warm_until:
                m.start = (now, m.count, cpu_secs())
        else:
            m.last = (now, m.count, cpu_secs())


class MeterSink(DynamicSink[Any]):
    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def build(self, step_id: str, worker_index: int, worker_count: int) -> CountingSink:
        return CountingSink(self.meter)


def cpu_secs() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def count(state: int | None, word: str) -> tuple[int, int]:
    n = (state or 0) + 1
    return n, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=1000, help="sentences per source batch")
    args = ap.parse_args()
    t0 = time.monotonic()
    meter = Meter(t0 + args.warmup)
    flow = Dataflow("wordcount")
    sentences = op.input("sentences", flow, SentenceSource(args.batch, t0 + args.warmup + args.seconds))
    words = op.flat_map("split", sentences, str.split)
    keyed = op.key_on("key", words, lambda w: w)
    counts = op.stateful_map("count", keyed, count)
    op.output("out", counts, MeterSink(meter))
    run_main(flow)
    if meter.start is None or meter.last is None:
        raise SystemExit("bytewax: the run ended before the window (raise --seconds)")
    dt = meter.last[0] - meter.start[0]
    out = {
        "bytewax": importlib.metadata.version("bytewax"),
        "window_s": dt,
        "words_per_sec": (meter.last[1] - meter.start[1]) / dt,
        "batch": args.batch,
        "cpu_s": meter.last[2] - meter.start[2],
    }
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
