"""The KafkaSpout's own CPU per record, in one thread, against a real broker.

    .venv/bin/python bench/kafka_spout_cost.py [--records 300000] [--partitions 4] [--rounds 3]
                                               [--outputs value] [--headers N] [--profile] [--lag]

Starts one Apache Kafka broker (squall.kafka.broker, loopback), fills a topic with the word
count's sentences, then each round opens a fresh `KafkaSpout` (its own consumer group, EARLIEST,
AT_LEAST_ONCE, offsets committed every second) with a plain context and a collector that keeps
the message ids, calls `next_tuple()` until every record was emitted, and acks the ids in runs of
100 as they come, after letting librdkafka prefetch the topic for `--settle` seconds. What it prints per round: the spout thread's CPU (`time.thread_time`, so the
machine's other load costs wall time, not this figure) per record for `next_tuple` + `ack`, the
wall time, and how many `next_tuple` calls emitted nothing (librdkafka's fetch not ready); after
the topic is read, 20,000 more calls time an empty call, and the figure net of the empty calls
(the per-record cost the summary line gives) subtracts them. The
executor's own per-tuple work is not in it. `--profile`: a cProfile of the last round.
`--lag`: each round twice, the spout's lag off (`lagRefreshPeriodMs: 0`, the spout as it was
before it had one) and on (watermarks every 200 ms, and a thread reading `offset_metrics()`
every 100 ms as the worker's heartbeat and /metrics do, far more often than they do), and the
ratio of the medians, on / off.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from squall.kafka import KafkaSpout  # noqa: E402

EMPTY_CALLS = 20_000
from squall.kafka.admin import create_topics  # noqa: E402
from squall.kafka.broker import EmbeddedKafka  # noqa: E402


class Context:
    topology_id = "cost-1"
    task_id = 1
    component_id = "kafka"
    worker_port = 0

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields

    def component_tasks(self, component: str) -> list[int]:
        return [1]

    def task_component(self, task: int) -> str:
        return "kafka"

    def this_component_tasks(self) -> list[int]:
        return [1]

    def output_fields(self, stream: str = "default") -> list[str]:
        return self.fields


class Collector:
    """Keeps the message ids; the loop acks them in runs of 100."""

    def __init__(self) -> None:
        self.ids: list[Any] = []
        self.emitted = 0
        self.errors: list[BaseException] = []

    def emit(self, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> list[int]:
        self.emitted += 1
        if msg_id is not None:
            self.ids.append(msg_id)
        return [2]

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", msg_id: Any = None) -> None:
        self.emit(values, stream, msg_id)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


def fill(bootstrap: str, topic: str, records: int, partitions: int, headers: int) -> None:
    from confluent_kafka import Producer

    from kafka_peers import SENTENCES  # the word count's five sentences

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.num.messages": 10000, "queue.buffering.max.messages": 500000})
    hdrs = [(f"h{i}", b"v") for i in range(headers)] or None
    for i in range(records):
        while True:
            try:
                p.produce(topic, SENTENCES[i % len(SENTENCES)].encode(), partition=i % partitions, headers=hdrs)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(60):
        raise RuntimeError(f"filling {topic}: records not delivered")


def one_round(bootstrap: str, topic: str, records: int, fields: list[str], settle_s: float,
              run: Callable[[Callable[[], None]], None], lag: bool | None = None) -> dict[str, float]:
    """One round; `lag` True / False: the spout's lag on (read every 100 ms by another thread) /
    off; None: the spout's defaults."""
    spout = KafkaSpout()
    cfg: dict[str, Any] = {"bootstrapServers": bootstrap, "topics": [topic], "groupId": f"cost-{uuid.uuid4().hex}",
                           "firstPollOffsetStrategy": "EARLIEST", "processingGuarantee": "AT_LEAST_ONCE",
                           "offsetCommitPeriodMs": 1000}
    if lag is not None:
        cfg["lagRefreshPeriodMs"] = 200 if lag else 0
    conf = {"kafka.spout": cfg}
    collector = Collector()
    spout.open(conf, Context(fields), collector)  # type: ignore[arg-type]
    stop = threading.Event()
    reads = [0]

    def read_lag() -> None:
        while not stop.wait(0.1):
            spout.offset_metrics()
            reads[0] += 1

    reader = threading.Thread(target=read_lag, daemon=True) if lag else None
    if reader is not None:
        reader.start()
    try:
        deadline = time.monotonic() + 60
        while collector.emitted == 0:  # the metadata thread's first hand-over, the first fetch
            spout.next_tuple()
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing read from {topic} in 60 s: {collector.errors}")
        time.sleep(settle_s)  # librdkafka prefetches the topic: the loop then measures the spout, not the fetch
        result: dict[str, float] = {}

        def loop() -> None:
            ids = collector.ids
            next_tuple, ack = spout.next_tuple, spout.ack
            empty = 0
            w0, c0 = time.monotonic(), time.thread_time()
            while collector.emitted < records:
                before = collector.emitted
                next_tuple()
                if collector.emitted == before:
                    empty += 1
                if len(ids) >= 100:
                    for m in ids:
                        ack(m)
                    ids.clear()
            for m in ids:
                ack(m)
            ids.clear()
            c1, w1 = time.thread_time(), time.monotonic()
            # what an empty call costs (the topic is read to its end: every call now finds nothing)
            e0 = time.thread_time()
            for _ in range(EMPTY_CALLS):
                next_tuple()
            empty_us = (time.thread_time() - e0) * 1e6 / EMPTY_CALLS
            cpu_us = (c1 - c0) * 1e6 / records
            result.update(cpu_us=cpu_us, wall_s=w1 - w0, empty=empty, empty_us=empty_us,
                          net_us=cpu_us - empty * empty_us / records)

        run(loop)
        result["lag_reads"] = reads[0]
        return result
    finally:
        stop.set()
        if reader is not None:
            reader.join(5)
        spout.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--outputs", default="value", help="the spout's declared fields, comma-separated (default value)")
    ap.add_argument("--headers", type=int, default=0, help="headers on each record (default 0)")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds to let librdkafka prefetch before the timed loop (default 3)")
    ap.add_argument("--profile", action="store_true", help="cProfile the last round")
    ap.add_argument("--lag", action="store_true",
                    help="each round with the spout's lag off and on, and the ratio (see the module doc)")
    args = ap.parse_args(argv)
    fields = args.outputs.split(",")
    with EmbeddedKafka() as broker:
        topic = f"cost-{uuid.uuid4().hex[:8]}"
        create_topics(broker.bootstrap_servers, {topic: args.partitions})
        fill(broker.bootstrap_servers, topic, args.records, args.partitions, args.headers)
        if args.lag:
            return compare_lag(broker.bootstrap_servers, topic, args, fields)
        cpu = []
        for r in range(args.rounds):
            prof = cProfile.Profile() if args.profile and r == args.rounds - 1 else None

            def run(loop: Callable[[], None]) -> None:
                if prof is None:
                    loop()
                else:
                    prof.runcall(loop)

            res = one_round(broker.bootstrap_servers, topic, args.records, fields, args.settle, run)
            cpu.append(res["net_us"])
            print(f"round {r + 1}: {res['net_us']:.2f} us CPU/record net of empty calls ({res['cpu_us']:.2f} with them), "
                  f"{res['wall_s']:.2f} s wall, {args.records / res['wall_s']:,.0f} records/s, "
                  f"{res['empty']:.0f} empty next_tuple calls at {res['empty_us']:.2f} us"
                  + (" (profiled)" if prof is not None else ""), flush=True)
            if prof is not None:
                pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        plain = cpu[:-1] if args.profile and len(cpu) > 1 else cpu
        print(f"median {statistics.median(plain):.2f} us CPU/record (net of empty calls) over {len(plain)} rounds "
              f"({args.records:,} records, {args.partitions} partitions, outputs {fields}, "
              f"{args.headers} headers; load {os.getloadavg()[0]:.1f})")
    return 0


def compare_lag(bootstrap: str, topic: str, args: argparse.Namespace, fields: list[str]) -> int:
    """Each round the spout with its lag off, then on, in this one run; the medians' ratio."""
    got: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for lag in (False, True):
            res = one_round(bootstrap, topic, args.records, fields, args.settle, lambda loop: loop(), lag=lag)
            got[lag].append(res["net_us"])
            print(f"round {r + 1}, lag {'on ' if lag else 'off'}: {res['net_us']:.2f} us CPU/record net of empty "
                  f"calls ({res['cpu_us']:.2f} with them), {res['wall_s']:.2f} s wall, "
                  f"{res['lag_reads']:.0f} lag reads", flush=True)
    off, on = statistics.median(got[False]), statistics.median(got[True])
    print(f"median lag off {off:.2f}, on {on:.2f} us CPU/record: on / off {on / off:.3f} over {args.rounds} rounds "
          f"({args.records:,} records, {args.partitions} partitions; load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
