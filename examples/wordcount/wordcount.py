"""Word count, Storm's hello world: sentences -> split -> count (fields grouping) -> report.

The spout replays a sentence when its tuple tree fails or times out, so every sentence is
counted at least once. Config (spec.config in topology.yaml):
  wordcount.limit   emit this many sentences, then stop (0: run until killed)
  wordcount.out     a directory; the spout writes acked/failed ids, counters their final counts
"""

from __future__ import annotations

import collections
import json
import os
import random
from pathlib import Path
from typing import Any

from squall import BasicBolt, Bolt, Spout, Tuple

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


def _out_dir(conf: Any) -> Path | None:
    out = conf.get("wordcount.out")
    if not out:
        return None
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


class SentenceSpout(Spout):
    outputs = ["sentence"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.limit = int(conf.get("wordcount.limit", 0))
        self.out = _out_dir(conf)
        self.task = context.task_id
        self.next_id = 0
        self.pending: dict[str, str] = {}
        self.replay: collections.deque[tuple[str, str]] = collections.deque()
        self.acked = 0
        self.failed = 0
        self.rng = random.Random(self.task)

    def next_tuple(self):
        if self.replay:
            msg_id, sentence = self.replay.popleft()
        elif self.limit and self.next_id >= self.limit:
            return
        else:
            msg_id = f"{self.task}-{self.next_id}"
            sentence = SENTENCES[self.next_id % len(SENTENCES)] if self.limit else self.rng.choice(SENTENCES)
            self.next_id += 1
        self.pending[msg_id] = sentence
        self.collector.emit([sentence], msg_id=msg_id)

    def ack(self, msg_id):
        self.pending.pop(msg_id, None)
        self.acked += 1

    def fail(self, msg_id):
        self.failed += 1
        sentence = self.pending.get(msg_id)
        if sentence is not None:
            self.replay.append((msg_id, sentence))

    def close(self):
        if self.out is not None:
            (self.out / f"spout-{self.task}.json").write_text(
                json.dumps({"emitted": self.next_id, "acked": self.acked, "failed": self.failed,
                            "unacked": sorted(self.pending)})
            )


class SplitSentence(BasicBolt):
    outputs = ["word"]

    def process(self, tup: Tuple) -> None:
        for word in tup.values[0].split():
            self.collector.emit([word])


class WordCount(Bolt):
    """Counts words; on each tick tuple it emits the counts that changed since the last one."""

    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: collections.Counter[str] = collections.Counter()
        self.changed: set[str] = set()
        self.out = _out_dir(conf)
        self.task = context.task_id

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            for word in sorted(self.changed):
                self.collector.emit([word, self.counts[word]])
            self.changed.clear()
            return
        word = tup.values[0]
        self.counts[word] += 1
        self.changed.add(word)
        self.collector.ack(tup)

    def cleanup(self) -> None:
        if self.out is not None:
            (self.out / f"count-{self.task}.json").write_text(json.dumps(self.counts))


class Reporter(Bolt):
    """Keeps the latest count of every word and logs the top ten on each tick."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.latest: dict[str, int] = {}

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            top = sorted(self.latest.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
            if top:
                print("top words:", ", ".join(f"{w}={c}" for w, c in top), flush=True)
            return
        self.latest[tup.values[0]] = tup.values[1]
        self.collector.ack(tup)
