"""Components of the Kafka integration tests (tests/integration/test_kafka_topology.py), between
a KafkaSpout and a KafkaBolt.

Config keys:
  test.sleep_ms   Tag: milliseconds to sleep per tuple (slows the run down for a kill mid-run)
  test.fail_mod   Tag: a record whose offset % mod == 0 fails the first time this process sees it
  test.fail_key   Tag: a value (a dict: the json decoder's) with this key set fails every time
"""

from __future__ import annotations

import time
from typing import Any

from squall import BasicBolt, FailedException, StatefulBolt, Tuple


class Tag(BasicBolt):
    """(partition, offset, value) -> (key, "partition:offset:value"): the output names its input."""

    outputs = ["key", "value"]

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.sleep = float(conf.get("test.sleep_ms", 0)) / 1000.0
        self.fail_mod = int(conf.get("test.fail_mod", 0))
        self.fail_key = conf.get("test.fail_key")
        self.seen: set[tuple[int, int]] = set()

    def process(self, tup: Tuple) -> None:
        partition, offset, value = tup.get("partition"), tup.get("offset"), tup.get("value")
        if self.fail_mod and offset % self.fail_mod == 0 and (partition, offset) not in self.seen:
            self.seen.add((partition, offset))
            raise FailedException()
        if self.fail_key and isinstance(value, dict) and value.get(self.fail_key):
            raise FailedException()
        if self.sleep:
            time.sleep(self.sleep)
        tag = f"{partition}:{offset}:{value}"
        self.collector.emit([tag, tag])


class WordTotals(StatefulBolt):
    """Counts its input's `value` in its checkpointed state (the exactly-once test's totals)."""

    outputs: list[str] = []

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.sleep = float(conf.get("test.sleep_ms", 0)) / 1000.0

    def execute(self, tup: Tuple) -> None:
        word = tup.get("value")
        self.state.put(word, self.state.get(word, 0) + 1)
        if self.sleep:
            time.sleep(self.sleep)
        self.collector.ack(tup)  # acked for real once the checkpoint holding the count commits
