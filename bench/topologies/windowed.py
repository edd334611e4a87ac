"""The word count's counter as a sliding window (bench/run.py, case "windowed"): counts the words
of the last 2 s every second from each window's new and expired tuples, and emits the window's
top word, anchored to the window's tuples (Storm's default for windowed bolts; case (e): not
anchored)."""

from __future__ import annotations

import collections
from typing import Any

from squall import WindowedBolt


class SlidingWordCount(WindowedBolt):
    outputs = ["word", "count"]

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        # bench.windowed.unanchored: emit unanchored, to see the windows' cost without the
        # anchoring's (each tuple then reaches the acker once more, not once per window)
        self.anchors = [] if conf.get("bench.windowed.unanchored") else None
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, window: Any) -> None:
        counts = self.counts
        for tup in window.get_new():
            counts[tup.values[0]] += 1
        for tup in window.get_expired():
            word = tup.values[0]
            counts[word] -= 1
            if not counts[word]:
                del counts[word]
        if counts:
            word, n = max(counts.items(), key=lambda kv: kv[1])
            self.collector.emit([word, n], anchors=self.anchors)
