"""The plain twin of examples/stateful-wordcount for bench/stateful.py: the same sentences,
split and counted in a dict, no state provider, no checkpoints."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from squall import Bolt, Spout, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "stateful-wordcount"))
from stateful_wordcount import SplitSentence, sentence  # noqa: E402,F401 - SplitSentence: the same split


class PlainSentenceSpout(Spout):
    outputs = ["sentence"]

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self) -> None:
        self.collector.emit([sentence(self.i)], msg_id=self.i)
        self.i += 1


class PlainWordCount(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup: Tuple) -> None:
        word = tup.values[0]
        n = self.counts.get(word, 0) + 1
        self.counts[word] = n
        self.collector.emit([word, n], anchors=tup)
        self.collector.ack(tup)
