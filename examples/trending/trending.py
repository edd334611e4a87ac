"""Trending words: the top N words of a sliding event-time window, with a late stream.

    events (EventSpout) -> split (SplitWords) -> top (TopWords, a WindowedBolt) -> report
                                                    \\-> late stream -> late (LateLog)

Storm's RollingTopWords on Storm 2's windowing: `top` keeps word counts incrementally from each
window's new and expired tuples (`get_new`, `get_expired`) and emits the window's top N. Event
time is the `ts` field (seconds since the epoch); tuples behind the watermark, or without a usable
timestamp, come out on the late stream instead of being counted.

Two sources:
- live (the default): synthetic events stamped with the wall clock, a few of them out of order
  within the lag and a few far behind it (those go to the late stream);
- a file (`trending.events`, JSON lines {"id", "ts", "text"}): replayed at `trending.rate`
  events/s, failed events replayed; after the last one an untracked, empty event
  `trending.flush.secs` later moves the watermark past every window of the file (a stream that
  ends needs it: windows fire when the watermark passes them). With `trending.out` set, `report`
  and `late` write `windows-<task>.jsonl` and `late-<task>.jsonl` there, and the spout writes
  `spout-<task>.done` once every event is acked. `batch_job.py` recomputes the windows with
  Spark from the same file and compares.
"""

from __future__ import annotations

import collections
import json
import logging
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall import BasicBolt, Spout, Tuple, WindowedBolt

log = logging.getLogger("trending")

WORDS = ("storm spout bolt tuple stream window squall python kafka spark flink trident acker "
         "nimbus worker task topology grouping shuffle fields").split()


def generate(path: Path, n: int, *, start: float = 1_700_000_000.0, step: float = 0.05,
             jitter: float = 1.5, very_late: float = 30.0, seed: int = 7) -> list[dict[str, Any]]:
    """Write `n` events to `path` (JSON lines): ts = start + i * step, moved back by up to
    `jitter` seconds (out of order within a larger lag), every 97th from the 300th on moved
    `very_late` seconds back (late), and two with a missing and a non-numeric timestamp."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) for k in range(len(WORDS))]
    events: list[dict[str, Any]] = []
    for i in range(n):
        ts: Any = round(start + i * step - rng.uniform(0, jitter), 3)
        if i >= 300 and i % 97 == 0:
            ts = round(ts - very_late, 3)
        if i == n // 3:
            ts = None
        elif i == n // 2:
            ts = "soon"
        text = " ".join(rng.choices(WORDS, weights, k=rng.randint(1, 4)))
        events.append({"id": i, "ts": ts, "text": text})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return events


def _out(conf: Mapping[str, Any]) -> Path | None:
    out = conf.get("trending.out")
    if not out:
        return None
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


class EventSpout(Spout):
    outputs = ["id", "ts", "text"]

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.rate = float(conf.get("trending.rate", 200))
        self.lag = float(conf.get("trending.live.jitter.secs", 1.0))
        self.out = _out(conf)
        self.task = context.task_id
        path = conf.get("trending.events")
        self.events: list[dict[str, Any]] | None = None
        if path:
            self.events = [json.loads(line) for line in Path(path).read_text().splitlines()]
        self.flush_secs = float(conf.get("trending.flush.secs", 60))
        self.next = 0
        self.flushed = False
        self.pending: dict[int, dict[str, Any]] = {}
        self.replay: collections.deque[dict[str, Any]] = collections.deque()
        self.acked = self.failed = 0
        self.rng = random.Random()
        self.t0 = time.monotonic()

    def next_tuple(self) -> None:
        if self.replay:
            event = self.replay.popleft()
            self.collector.emit([event["id"], event["ts"], event["text"]], msg_id=event["id"])
            return
        if self.rate and self.next >= self.rate * (time.monotonic() - self.t0):
            return
        if self.events is None:
            event = self._live()
        elif self.next < len(self.events):
            event = self.events[self.next]
        else:
            if not self.flushed:
                self.flushed = True
                last = max((e["ts"] for e in self.events if isinstance(e["ts"], (int, float))), default=0)
                self.collector.emit([-1, last + self.flush_secs, ""])  # untracked: no msg id
            return
        self.next += 1
        self.pending[event["id"]] = event
        self.collector.emit([event["id"], event["ts"], event["text"]], msg_id=event["id"])

    def _live(self) -> dict[str, Any]:
        ts = time.time() - self.rng.uniform(0, self.lag)
        if self.next % 101 == 100:
            ts -= 60.0  # far behind the watermark: the late stream's
        text = " ".join(self.rng.choices(WORDS, [1.0 / (k + 1) for k in range(len(WORDS))],
                                         k=self.rng.randint(1, 4)))
        return {"id": self.next, "ts": round(ts, 3), "text": text}

    def ack(self, msg_id: Any) -> None:
        self.pending.pop(msg_id, None)
        self.acked += 1
        if self.events is not None and self.flushed and not self.pending and self.out is not None:
            (self.out / f"spout-{self.task}.done").write_text(json.dumps(
                {"acked": self.acked, "failed": self.failed}))

    def fail(self, msg_id: Any) -> None:
        self.failed += 1
        event = self.pending.get(msg_id)
        if event is not None:
            self.replay.append(event)


class SplitWords(BasicBolt):
    """(id, ts, text) -> (word, ts) per word; an event without words still moves event time:
    it becomes one (None, ts)."""

    outputs = ["word", "ts"]

    def process(self, tup: Tuple) -> None:
        ts = tup.get("ts")
        words = str(tup.get("text")).lower().split()
        for word in words or [None]:
            self.collector.emit([word, ts])


def rank(counts: Mapping[str, int], n: int) -> list[list[Any]]:
    """The top n (word, count) pairs: most counted first, ties by word."""
    return [[w, c] for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


class TopWords(WindowedBolt):
    """Counts words over the window from its new and expired tuples; emits the top N."""

    outputs = ["start", "end", "top"]

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.n = int(conf.get("trending.top.n", 5))
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, window: Any) -> None:
        for tup in window.get_new():
            if tup.values[0] is not None:
                self.counts[tup.values[0]] += 1
        for tup in window.get_expired():
            word = tup.values[0]
            if word is not None:
                self.counts[word] -= 1
                if not self.counts[word]:
                    del self.counts[word]
        top = rank(self.counts, self.n)
        if top:  # anchored to every tuple of the window (the windowed collector's default)
            self.collector.emit([window.get_start_timestamp(), window.get_end_timestamp(), top])


class _JsonLines:
    def _open(self, conf: Mapping[str, Any], task: int, name: str) -> None:
        out = _out(conf)
        self.file = open(out / f"{name}-{task}.jsonl", "a") if out is not None else None  # noqa: SIM115

    def _write(self, record: Mapping[str, Any]) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def cleanup(self) -> None:
        if self.file is not None:
            self.file.close()


class Report(_JsonLines, BasicBolt):
    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self._open(conf, context.task_id, "windows")

    def process(self, tup: Tuple) -> None:
        start, end, top = tup.values
        self._write({"start": start, "end": end, "top": top})
        log.info("trending in (%s, %s]: %s", start, end, ", ".join(f"{w} {c}" for w, c in top))


class LateLog(_JsonLines, BasicBolt):
    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self._open(conf, context.task_id, "late")

    def process(self, tup: Tuple) -> None:
        values, reason = tup.values
        self._write({"values": values, "reason": reason, "from": tup.source_component})
        log.info("late (%s): %s", reason, values)
