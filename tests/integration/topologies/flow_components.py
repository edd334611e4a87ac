"""Components for the hot-update and backpressure tests (test_hot_update.py,
test_backpressure.py); the spout and sinks come from engine_components.

Config keys: test.sleep_ms   SlowPassBolt: milliseconds to sleep per tuple before forwarding it;
                            OrderCheckBolt: milliseconds to sleep every 10 tuples.
             test.pad_bytes PaddedIdSpout, SeqSpout: bytes carried by every tuple (default 10000).
             test.out       OrderCheckBolt: the directory of its order-<task>.json.
"""

from __future__ import annotations

import time

from engine_components import IdSpout, _out, _write_json

from squall import BasicBolt, Bolt, Spout, Tuple


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


class SeqSpout(Spout):
    """Emits [seq, pad] with seq 0, 1, 2, ... as fast as it can, unanchored (no message id, so
    no maxSpoutPending and no replays: what arrives downstream is what was emitted, in order)."""

    outputs = ["seq", "pad"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.pad = b"x" * int(conf.get("test.pad_bytes", 10000))
        self.seq = 0

    def next_tuple(self):
        self.collector.emit([self.seq, self.pad])
        self.seq += 1


class OrderCheckBolt(Bolt):
    """Checks that each source task's sequence numbers arrive in the order emitted (ascending,
    gaps allowed) and sleeps `test.sleep_ms` every 10 tuples; writes what it saw to
    `order-<task>.json` every half second and at cleanup: received, out_of_order and the first
    few [source, previous, seq] that went backwards."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.sleep = float(conf.get("test.sleep_ms", 1)) / 1000.0
        self.path = _out(conf) / f"order-{context.task_id}.json"
        self.last: dict[int, int] = {}
        self.received = 0
        self.out_of_order = 0
        self.examples: list[list[int]] = []
        self.next_write = 0.0

    def execute(self, tup: Tuple) -> None:
        seq, src = tup.values[0], tup.source_task
        prev = self.last.get(src, -1)
        if seq <= prev:
            self.out_of_order += 1
            if len(self.examples) < 10:
                self.examples.append([src, prev, seq])
        self.last[src] = seq
        self.received += 1
        if self.received % 10 == 0:
            time.sleep(self.sleep)
            now = time.monotonic()
            if now >= self.next_write:
                self.next_write = now + 0.5
                self._write()

    def _write(self) -> None:
        _write_json(self.path, {"received": self.received, "out_of_order": self.out_of_order,
                                "examples": self.examples})

    def cleanup(self) -> None:
        self._write()
