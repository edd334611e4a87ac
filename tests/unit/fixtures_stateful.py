"""Stateful components for the checkpoint unit tests (importable by `module:Class`)."""

from __future__ import annotations

from typing import Any

from squall import Bolt, StatefulBolt, StatefulSpout, StatefulWindowedBolt


class CountWords(StatefulBolt):
    outputs = ["word", "count"]

    def execute(self, tup: Any) -> None:
        word = tup.values[0]
        n = self.state.get(word, 0) + 1
        self.state.put(word, n)
        self.collector.emit([word, n], anchors=tup)
        self.collector.ack(tup)


class Split(Bolt):
    outputs = ["word"]

    def execute(self, tup: Any) -> None:
        for w in tup.values[0].split():
            self.collector.emit([w], anchors=tup)
        self.collector.ack(tup)


class Lines(StatefulSpout):
    outputs = ["sentence"]

    def next_tuple(self) -> None:
        pass


class NotStateful(Bolt):
    outputs = ["x"]

    def execute(self, tup: Any) -> None:
        pass


class Sums(StatefulWindowedBolt):
    """Records each window's sum under its first id."""

    outputs = ["first", "sum"]

    def execute(self, window: Any) -> None:
        ids = [t.values[0] for t in window.get()]
        self.state.put(ids[0], sum(ids))
        self.collector.emit([ids[0], sum(ids)])
