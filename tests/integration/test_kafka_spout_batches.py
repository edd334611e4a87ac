"""The KafkaSpout's batches on the session's real broker, the spout opened by hand (no workers):
a `next_tuple` call emits up to `emitBatch` polled records, never more than maxSpoutPending less
the tuples in flight (at least one), one call in `yieldEvery` records emits nothing, and with
`emitBatch: 1` each call emits one record, as Storm's spout."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from squall.kafka import KafkaSpout
from squall.kafka.broker import EmbeddedKafka
from kafka_fixtures import SpoutCollector, SpoutContext, new_topic, produce

pytestmark = pytest.mark.integration


def opened(broker: EmbeddedKafka, topic: str, pending: int | None, **cfg: Any) -> tuple[KafkaSpout, SpoutCollector]:
    spout = KafkaSpout()
    out = SpoutCollector()
    conf: dict[str, Any] = {"kafka.spout": {"bootstrapServers": broker.bootstrap_servers, "topics": [topic],
                                            "groupId": f"batches-{uuid.uuid4().hex[:8]}",
                                            "firstPollOffsetStrategy": "EARLIEST", **cfg}}
    if pending is not None:
        conf["topology.max.spout.pending"] = pending
    spout.open(conf, SpoutContext("batches", ["offset", "value"]), out)  # type: ignore[arg-type]
    return spout, out


def until_buffered(spout: KafkaSpout, out: SpoutCollector, n: int) -> int:
    """Calls next_tuple until it emits something with at least `n` records polled and waiting
    (librdkafka's first fetch); how many that call emitted."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not spout.assigned:
            if spout.meta.out.queue:  # the metadata thread's first hand-over: the partitions
                spout._take_metadata(spout.clock())
        else:
            spout._poll()  # what librdkafka has fetched so far, into the spout's buffer
        if len(spout.buffer) >= n:
            before = len(out.values)
            spout.next_tuple()
            return len(out.values) - before
        time.sleep(0.01)
    raise AssertionError(f"fewer than {n} records polled in 60 s: {out.errors}")


def test_a_batch_stops_at_max_spout_pending_and_yields_every_so_often(kafka_broker: EmbeddedKafka) -> None:
    topic = new_topic(kafka_broker, 1, prefix="batches")
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(3000)], partition=0)

    # maxSpoutPending 100: the first call emits 64 (emitBatch), the second the 36 left to 100,
    # then one per call while nothing is acked (the executor would not call at all); acked, 64 again
    spout, out = opened(kafka_broker, topic, 100, emitBatch=64, yieldEvery=0)
    try:
        assert until_buffered(spout, out, 200) == 64
        spout.next_tuple()
        assert len(out.values) == 100 and len(spout.in_flight) == 100
        spout.next_tuple()
        assert len(out.values) == 101
        for msg_id in out.ids:
            spout.ack(msg_id)
        out.ids.clear()
        spout.next_tuple()
        assert len(out.values) == 165
        assert [v[0] for v in out.values] == list(range(165))  # in order, none twice
    finally:
        spout.close()

    # yieldEvery 100 with batches of 64: 64, 36, then a call that emits nothing, then 64 again
    spout, out = opened(kafka_broker, topic, None, emitBatch=64, yieldEvery=100)
    try:
        counts = [until_buffered(spout, out, 400)]
        for _ in range(4):
            before = len(out.values)
            spout.next_tuple()
            counts.append(len(out.values) - before)
        assert counts == [64, 36, 0, 64, 36], counts
    finally:
        spout.close()

    # emitBatch 1: one record per call, never an empty call while records wait
    spout, out = opened(kafka_broker, topic, 1000, emitBatch=1)
    try:
        counts = [until_buffered(spout, out, 300)]
        for _ in range(299):
            before = len(out.values)
            spout.next_tuple()
            counts.append(len(out.values) - before)
        assert counts == [1] * 300
    finally:
        spout.close()
