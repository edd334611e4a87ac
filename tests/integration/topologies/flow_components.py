"""Components for the hot-update and backpressure tests (test_hot_update.py,
test_backpressure.py); the spout and sinks come from engine_components.

Config keys: test.sleep_ms   SlowPassBolt: milliseconds to sleep per tuple before forwarding it.
             test.pad_bytes PaddedIdSpout: bytes carried by every tuple (default 10000).
"""

from __future__ import annotations

import time

from engine_components import IdSpout

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


class _PadCollector:
    """A spout collector that appends the same padding to every emitted tuple."""

    def __init__(self, collector, pad):
        self.collector = collector
        self.pad = pad

    def emit(self, values, stream="default", msg_id=None):
        return self.collector.emit([*values, self.pad], stream=stream, msg_id=msg_id)


class PaddedIdSpout(IdSpout):
    """IdSpout whose tuples also carry `test.pad_bytes` bytes, to fill sockets quickly."""

    outputs = ["id", "pad"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.collector = _PadCollector(collector, b"x" * int(conf.get("test.pad_bytes", 10000)))
