"""Components for the hot-update and backpressure tests (test_hot_update.py,
test_backpressure.py); the spout and sinks come from engine_components.

Config keys: test.sleep_ms  SlowPassBolt: milliseconds to sleep per tuple before forwarding it.
"""

from __future__ import annotations

import time

from squall import BasicBolt, Tuple


class SlowPassBolt(BasicBolt):
    """Sleeps `test.sleep_ms` per tuple, then forwards the id anchored (BasicBolt acks it)."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.sleep = float(conf.get("test.sleep_ms", 1)) / 1000.0

    def process(self, tup: Tuple) -> None:
        time.sleep(self.sleep)
        self.collector.emit([tup.values[0]])
