"""The word count's counter as a sliding window (bench/run.py, case "windowed"): counts the words
of the last 2 s every second from each window's new and expired tuples, and emits the window's
top word, anchored to the window's tuples (Storm's default for windowed bolts; case (e): not
anchored)."""

from __future__ import annotations

import collections
from operator import attrgetter, itemgetter
from typing import Any

from squall import WindowedBolt

_values = attrgetter("values")
_first = itemgetter(0)


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
        # a window's words counted in C (Counter over a map), not a Python loop per tuple
        counts.update(map(_first, map(_values, window.get_new())))
        expired = window.get_expired()
        if expired:
            counts.subtract(collections.Counter(map(_first, map(_values, expired))))
            for word in [w for w, n in counts.items() if n <= 0]:
                del counts[word]
        if counts:
            word, n = max(counts.items(), key=_second)
            self.collector.emit([word, n], anchors=self.anchors)


def _second(kv: tuple[str, int]) -> int:
    return kv[1]
