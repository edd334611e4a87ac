"""Fills the `clicks` topic with live click events, and reads a topic back.

    python produce.py --rate 200 --seconds 30                 # clicks to 127.0.0.1:9092, topic clicks
    python produce.py --bootstrap-servers kafka:9092 --topic clicks --seconds 0   # until Ctrl-C
    python produce.py --show click-counts --max 10            # the last records of a topic

A click is the JSON object {"user": "user-17", "page": "/news/world", "ts": 1764250000.123}, keyed
by its user (a user's clicks stay in order on one partition), with the record timestamp set to
`ts` (milliseconds): the topology's event time. Clicks are stamped with the wall clock as they are
sent, as a site's would be; one in 40 is on a page that sections.csv does not know (section
`other`).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from kafka_clicks import load_sections, section_of, window_of  # this folder's module

USERS = 50
UNKNOWN_PAGES = ("/promo/black-friday", "/careers")


def make_click(rng: random.Random, pages: list[str], ts_ms: int) -> dict[str, Any]:
    """One click at `ts_ms` (milliseconds since the epoch): a user of USERS, a page of `pages`
    (the first ones more often), now and then one of UNKNOWN_PAGES."""
    if rng.random() < 1 / 40:
        page = rng.choice(UNKNOWN_PAGES)
    else:
        page = rng.choices(pages, [1.0 / (k + 1) for k in range(len(pages))])[0]
    return {"user": f"user-{rng.randrange(USERS)}", "page": page, "ts": ts_ms / 1000}


def produce(bootstrap_servers: str, topic: str, *, rate: float = 200, seconds: float = 30,
            seed: int | None = None, clock: Callable[[], float] = time.time,
            stop: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
    """Send clicks at `rate` per second for `seconds` (0: until `stop()`), each stamped with
    `clock()`; returns them once the broker has confirmed every one."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    pages = sorted(load_sections())
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "linger.ms": 20})
    sent: list[dict[str, Any]] = []
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    t0 = time.monotonic()
    while not stop() and (seconds <= 0 or time.monotonic() - t0 < seconds):
        due = int(rate * (time.monotonic() - t0)) + 1 - len(sent)
        if due <= 0:
            producer.poll(min(0.05, 1 / rate))
            continue
        for _ in range(due):
            ts_ms = int(clock() * 1000)
            click = make_click(rng, pages, ts_ms)
            while True:
                try:
                    producer.produce(topic, key=click["user"].encode(), value=json.dumps(click).encode(),
                                     timestamp=ts_ms, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let the broker catch up
                    producer.poll(0.1)
            sent.append(click)
        producer.poll(0)
    left = producer.flush(30)
    if left or failed:
        raise RuntimeError(f"{left} clicks not delivered to {topic} at {bootstrap_servers}; errors: {failed[:3]}")
    return sent


def recount(clicks: list[dict[str, Any]], window_s: float,
            sections: dict[str, str] | None = None) -> dict[tuple[str, float], int]:
    """The clicks per (section, window end) of tumbling windows of `window_s` seconds: what the
    topology counts, computed in one pass."""
    sections = load_sections() if sections is None else sections
    out: dict[tuple[str, float], int] = {}
    for c in clicks:
        key = (section_of(sections, c.get("page")), window_of(c["ts"], window_s)[1])
        out[key] = out.get(key, 0) + 1
    return out


def show(bootstrap_servers: str, topic: str, last: int) -> None:
    """Print the last `last` records of `topic` (all partitions, by timestamp)."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"show-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        tps = []
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                tps.append(TopicPartition(topic, p, max(low, high - last)))
        c.assign(tps)
        todo, records = len(tps), []
        deadline = time.monotonic() + 10
        ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                partition, offset = m.partition(), m.offset()
                if m.error() is None and partition is not None and offset is not None:
                    records.append(m)
                    if offset + 1 >= ends[partition]:
                        todo -= 1
        records.sort(key=lambda m: m.timestamp()[1])
        for m in records[-last:]:
            key, value = m.key(), m.value()
            print(f"{topic} [{m.partition()}] {key.decode() if key else None}: {value.decode() if value else None}")
        if not records:
            print(f"{topic}: no records")
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--rate", type=float, default=200, help="clicks per second")
    ap.add_argument("--seconds", type=float, default=30, help="how long (0: until Ctrl-C)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--show", metavar="TOPIC", help="print the last records of TOPIC instead")
    ap.add_argument("--max", type=int, default=10, help="with --show: how many")
    args = ap.parse_args(argv)
    if args.show:
        show(args.bootstrap_servers, args.show, args.max)
        return 0
    stopping = False

    def on_signal(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sent = produce(args.bootstrap_servers, args.topic, rate=args.rate, seconds=args.seconds, seed=args.seed,
                   stop=lambda: stopping)
    print(f"produced {len(sent)} clicks to {args.topic} at {args.bootstrap_servers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
