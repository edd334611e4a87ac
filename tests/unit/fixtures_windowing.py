"""Components for the window-declaration tests (imported by validation from this directory)."""

from __future__ import annotations

from typing import Any

from squall import WindowedBolt


class EventSpout:
    outputs = {"default": ["word", "ts"], "untimed": ["word"]}

    def next_tuple(self) -> None:
        pass


class WindowCount(WindowedBolt):
    outputs = ["count"]

    def execute(self, window: Any) -> None:
        self.collector.emit([len(window.get())])


class PlainBolt:
    def execute(self, tup: Any) -> None:
        pass
