"""Stateful word count: totals kept in a state provider (Redis), exact after a crash.

    sentences (StatefulSpout) -> split (BasicBolt) -> count (StatefulBolt, fields on word)

The spout reads a deterministic, numbered input (sentence `i` is `sentence(i)`; task k of n
reads i = k, k + n, k + 2n, ...) and keeps its read position in its state. Every
`topology.state.checkpoint.interval.ms` the checkpoint spout checkpoints the spout's position and
the counters' totals together; after a crash (kill -9 of a worker) every state rolls back to the
last checkpoint and the spout reads on from its position there, so each sentence is counted
exactly once: the totals in Redis equal `expected_counts(limit)`.

Config (spec.config in topology.yaml):
  wordcount.limit   read this many sentences in all, then stop (0: run until killed)
  wordcount.rate    sentences per second per spout task (0: as fast as it goes)
"""

from __future__ import annotations

import collections
import time
from typing import Any

from squall import BasicBolt, StatefulBolt, StatefulSpout, Tuple

WORDS = ["storm", "squall", "gale", "breeze", "tempest", "cyclone", "gust", "zephyr", "monsoon",
         "typhoon", "hurricane", "whirlwind", "draft", "blast", "flurry", "sirocco", "mistral"]


def sentence(i: int) -> str:
    """The input's sentence number `i` (1 to 6 words)."""
    return " ".join(WORDS[(i * 7 + k * 13 + i // 17) % len(WORDS)] for k in range(1 + i % 6))


def expected_counts(limit: int) -> dict[str, int]:
    """A recount of the whole input: what the totals must be once `limit` sentences were read."""
    c: collections.Counter[str] = collections.Counter()
    for i in range(limit):
        c.update(sentence(i).split())
    return dict(c)


class SentenceSpout(StatefulSpout):
    outputs = ["sentence"]

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.limit = int(conf.get("wordcount.limit", 0))
        rate = float(conf.get("wordcount.rate", 0))
        self.gap = 1.0 / rate if rate > 0 else 0.0
        tasks = context.this_component_tasks()
        self.stride = len(tasks)
        self.first = tasks.index(context.task_id)
        self.next_at = 0.0

    def init_state(self, state: Any) -> None:
        # called at start and after every rollback: read on from the committed position
        super().init_state(state)
        self.position = int(state.get("position", self.first))

    def next_tuple(self) -> None:
        i = self.position
        if self.limit and i >= self.limit:
            return
        if self.gap:
            now = time.monotonic()
            if now < self.next_at:
                return
            self.next_at = max(self.next_at + self.gap, now - 1.0)
        self.collector.emit([sentence(i)], msg_id=i)
        self.position = i + self.stride
        self.state.put("position", self.position)

    def fail(self, msg_id: Any) -> None:
        pass  # no replay here: a rollback rewinds the position to the last checkpoint


class SplitSentence(BasicBolt):
    outputs = ["word"]

    def process(self, tup: Tuple) -> None:
        for word in tup.values[0].split():
            self.collector.emit([word])


class WordCount(StatefulBolt):
    outputs = ["word", "count"]

    def execute(self, tup: Tuple) -> None:
        word = tup.values[0]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)  # acked for real once the checkpoint holding this count commits
