"""Components for the live spec change tests (tests/integration/test_live_update.py): a bolt
that says which config it was prepared with."""

from __future__ import annotations

import os
import time
from pathlib import Path

from squall import BasicBolt, Bolt, Tuple


class TagPassBolt(BasicBolt):
    """Forwards the id (anchored) after `test.sleep_ms`; at `prepare` appends
    `<task> <pid> <test.tag>` to `prepared.txt` in `test.out`, so a test sees each executor
    start with the config it was given."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.sleep = float(conf.get("test.sleep_ms", 0)) / 1000.0
        out = Path(conf["test.out"])
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "prepared.txt", "a", encoding="utf-8") as f:
            f.write(f"{context.task_id} {os.getpid()} {conf.get('test.tag')}\n")

    def process(self, tup: Tuple) -> None:
        if self.sleep:
            time.sleep(self.sleep)
        self.collector.emit([tup.values[0]])


class TickHoldBolt(Bolt):
    """Holds every tuple (acks none: its trees time out at the spout) and appends the monotonic
    time of each tick tuple to `ticks.txt` in `test.out`."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.ticks = Path(conf["test.out"]) / "ticks.txt"
        self.ticks.parent.mkdir(parents=True, exist_ok=True)

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            with open(self.ticks, "a", encoding="utf-8") as f:
                f.write(f"{time.monotonic()}\n")
