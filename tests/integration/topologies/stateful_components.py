"""Components for tests/integration/test_stateful.py: a stateful spout reading ids by position
and a stateful windowed bolt recording each tumbling window's sum in its state."""

from __future__ import annotations

import time
from typing import Any

from squall import StatefulSpout, StatefulWindowedBolt


class IdSpout(StatefulSpout):
    outputs = ["id"]

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.limit = int(conf["test.count"])
        self.gap = 1.0 / float(conf["test.rate"])
        self.next_at = 0.0

    def init_state(self, state: Any) -> None:
        super().init_state(state)
        self.position = int(state.get("position", 0))

    def next_tuple(self) -> None:
        if self.position >= self.limit:
            return
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = max(self.next_at + self.gap, now - 1.0)
        self.collector.emit([self.position], msg_id=self.position)
        self.position += 1
        self.state.put("position", self.position)


class WindowSums(StatefulWindowedBolt):
    outputs = ["first", "sum"]

    def execute(self, window: Any) -> None:
        ids = [t.values[0] for t in window.get()]
        self.state.put(ids[0], [len(ids), sum(ids)])
