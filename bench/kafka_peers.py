"""Squall's KafkaSpout side by side with Apache Storm's storm-kafka-client KafkaSpout, one run.

    bench/kafka-peers [--records 8000000] [--partitions 4] [--seconds 15] [--warmup 10]
                      [--pending 1000] [--spouts 1] [--commit-ms 1000] [--only CASE ...] [--json PATH]
                      [--emit-batch N] [--consumer-props K=V,K=V] [--eo-pending 20000]
                      [--eo-interval-ms 1000]

(`bench/kafka-peers` runs bench/setup, which builds bench/storm with storm-kafka-client, then
this file with the project's venv. The broker's jars come from scripts/setup.)

One Apache Kafka broker (squall.kafka.broker, KRaft, loopback) is started; one topic of
--partitions partitions is created and pre-filled with --records sentences drawn from the word
count's five (confluent-kafka, batched). Then each case reads that topic from its first offset on
a consumer group of its own, one case after the other:

- noop: the Kafka spout (AT_LEAST_ONCE, acking on, the record's value as the one field)
  shuffle-grouped to one bolt that only acks. Rate: records acked per second.
- wordcount: the Kafka spout into examples/wordcount's split (2), fields-grouped count (2
  executors, 4 tasks) and global reporter. Rate: records (sentences) acked per second; words
  counted per second beside it.

Both engines: 2 workers, 2 ackers, --spouts spout tasks, maxSpoutPending --pending, message
timeout 30 s, offsetCommitPeriodMs --commit-ms (1000 unless told: with both spouts' default of
30000, Squall's pauses each partition at its maxUncommittedOffsets, 100,000, until the next
commit, so it reads at most 100,000 x partitions / 30 s), their spouts' other settings at their
defaults. Storm 2.8.3 runs in a LocalCluster
(Netty between its workers) with kafka-clients 4.1.0; Squall runs its KafkaSpout
(confluent-kafka, librdkafka) in a local cluster. Complete latency (emit to ack) goes into the
same buckets on both sides (Storm: storm-kafka-client's KafkaTupleListener hook).

- squall-k2k, squall-k2k-eo (Squall alone, run with --only): the topic copied to another topic
  of as many partitions through 2 sink tasks, at least once (KafkaSpout -> KafkaBolt, acks on the
  delivery report) and exactly once (StatefulKafkaSpout -> TransactionalKafkaBolt, states in a
  redis-server of its own, checkpoints every --eo-interval-ms, maxSpoutPending --eo-pending since
  an ack waits for its checkpoint's commit). Rate: records acked per second; the pairing
  "k2k" is exactly once / at least once.

"per CPU-s" divides by the CPU seconds the engine used in the window (Storm: its JVM; Squall: its
workers and ZooKeeper), as bench/peers does; "incl. broker" adds the broker's CPU over the same
window. A case whose spout acked every record of the topic before its window ended ran the topic
dry: its rate is wrong and is flagged (raise --records). Compare figures within one run only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ceiling import cpu_secs  # noqa: E402
from peers import STORM_DIR, WORDCOUNT_DIR, Result, fmt, latency, squall_case  # noqa: E402

from squall import _native  # noqa: E402
from squall.builder import TopologyBuilder  # noqa: E402
from squall.models.v1alpha1 import Topology  # noqa: E402

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]
SHAPES = ("noop", "wordcount")
ENGINES = ("storm", "squall")
# Kafka to Kafka, Squall alone: at least once (KafkaSpout -> KafkaBolt) and exactly once
# (StatefulKafkaSpout -> TransactionalKafkaBolt, states in a redis-server)
K2K = ("squall-k2k", "squall-k2k-eo")
CASES = [f"{e}-{s}" for s in SHAPES for e in ENGINES] + list(K2K)  # storm first: Squall's ratio is to it
TIMEOUT_S = 30


# -- the topic ----------------------------------------------------------------------------------
def fill_topic(bootstrap: str, topic: str, records: int, partitions: int, *, compression: str = "none",
               seed: int = 1) -> float:
    """Writes `records` sentences (drawn with `seed`) round-robin over the partitions; returns
    the records per second the producer reached."""
    from confluent_kafka import Producer

    sentences = [s.encode() for s in SENTENCES]
    rng = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": compression,
                  "acks": "all", "enable.idempotence": True})
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    t0 = time.monotonic()
    produce = p.produce
    for i in range(records):
        value = sentences[rng.randrange(5)]
        while True:
            try:
                produce(topic, value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left or errors:
        raise RuntimeError(f"filling {topic}: {left} records not delivered; errors: {errors}")
    return records / (time.monotonic() - t0)


# -- Squall -------------------------------------------------------------------------------------
def squall_topology(shape: str, bootstrap: str, topic: str, group: str, pending: int, spouts: int = 1,
                    commit_ms: int | None = None, emit_batch: int | None = None, *, workers: int = 2,
                    bolts: int = 1, props: dict[str, Any] | None = None,
                    spout_extra: dict[str, Any] | None = None, spout_class: str = "squall.kafka:KafkaSpout") -> Topology:
    """The shape with Squall's KafkaSpout reading `topic` from its first offset on `group`;
    `commit_ms`: offsetCommitPeriodMs, `emit_batch`: emitBatch (None: the spout's default),
    `bolts`: the no-op bolt's executors, `props`: librdkafka properties, `spout_extra`: other
    kafka.spout settings."""
    spout_cfg: dict[str, Any] = {"bootstrapServers": bootstrap, "topics": [topic], "groupId": group,
                                 "firstPollOffsetStrategy": "EARLIEST", "processingGuarantee": "AT_LEAST_ONCE"}
    if commit_ms is not None:
        spout_cfg["offsetCommitPeriodMs"] = commit_ms
    if emit_batch is not None:
        spout_cfg["emitBatch"] = emit_batch
    if props:
        spout_cfg["props"] = dict(props)
    spout_cfg.update(spout_extra or {})
    b = TopologyBuilder(f"bench-kafka-{shape}")
    b.set_spout("kafka", spout_class, spouts, config={"kafka.spout": spout_cfg}, outputs=["value"])
    if shape == "noop":
        b.set_bolt("sink", "noop:AckBolt", bolts).shuffle_grouping("kafka")
    elif shape == "wordcount":
        b.set_bolt("split", "wordcount:SplitSentence", 2).shuffle_grouping("kafka")
        b.set_bolt("count", "wordcount:WordCount", 2, num_tasks=4,
                   config={"topology.tick.tuple.freq.secs": 1}).fields_grouping("split", ["word"])
        b.set_bolt("report", "wordcount:Reporter", 1,
                   config={"topology.tick.tuple.freq.secs": 2}).global_grouping("count")
    else:
        raise ValueError(f"shape must be one of {SHAPES}, not {shape!r}")
    return b.build(num_workers=workers, num_ackers=2, max_spout_pending=pending, message_timeout_secs=TIMEOUT_S)


def k2k_topology(exactly_once: bool, bootstrap: str, topic: str, out: str, group: str, args: argparse.Namespace,
                 redis_port: int | None) -> Topology:
    """`topic` -> the spout -> 2 sink tasks -> `out`: at least once (KafkaSpout, KafkaBolt) or exactly
    once (StatefulKafkaSpout, TransactionalKafkaBolt, checkpoints every --eo-interval-ms in Redis)."""
    spout_cfg: dict[str, Any] = {"bootstrapServers": bootstrap, "topics": [topic], "groupId": group,
                                 "firstPollOffsetStrategy": "EARLIEST", "offsetCommitPeriodMs": args.commit_ms}
    sink_cfg: dict[str, Any] = {"bootstrapServers": bootstrap, "topic": out, "keyField": None}
    b = TopologyBuilder("bench-kafka-k2k-eo" if exactly_once else "bench-kafka-k2k")
    config: dict[str, Any] = {}
    if exactly_once:
        b.set_spout("kafka", "squall.kafka:StatefulKafkaSpout", args.spouts, config={"kafka.spout": spout_cfg},
                    outputs=["value"], stateful=True)
        b.set_bolt("sink", "squall.kafka:TransactionalKafkaBolt", 2, config={"kafka.bolt": sink_cfg},
                   stateful=True).shuffle_grouping("kafka")
        config = {"topology.state.provider": "redis",
                  "topology.state.provider.config": {"host": "127.0.0.1", "port": redis_port},
                  "topology.state.checkpoint.interval.ms": args.eo_interval_ms}
        pending = args.eo_pending
    else:
        b.set_spout("kafka", "squall.kafka:KafkaSpout", args.spouts, config={"kafka.spout": spout_cfg},
                    outputs=["value"])
        b.set_bolt("sink", "squall.kafka:KafkaBolt", 2,
                   config={"kafka.bolt": sink_cfg, "topology.tick.tuple.freq.secs": 0.2}).shuffle_grouping("kafka")
        pending = args.pending
    return b.build(num_workers=2, num_ackers=2, max_spout_pending=pending, message_timeout_secs=TIMEOUT_S,
                   config=config)


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on a free loopback port, no persistence to disk (the exactly-once case's states)."""
    import socket

    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (scripts/setup installs Debian's)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir, "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(host="127.0.0.1", port=port).ping()
            return proc, port
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def squall_k2k_case(cid: str, bootstrap: str, topic: str, args: argparse.Namespace, broker_pid: int) -> Result:
    from squall.kafka.admin import create_topics

    exactly_once = cid.endswith("-eo")
    out = f"bench-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {out: args.partitions})
    group = f"squall-k2k-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="squall-bench-redis-") as tmp:
        proc, port = start_redis(tmp) if exactly_once else (None, None)
        try:
            topo = k2k_topology(exactly_once, bootstrap, topic, out, group, args, port)
            res = squall_case(topo, HERE / "topologies", args.seconds, args.warmup, others={"broker": broker_pid})
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
    res["broker_cpu_s"] = res.pop("others_cpu_s", {}).get("broker")
    res["group"] = group
    return res


def squall_kafka_case(shape: str, bootstrap: str, topic: str, group: str, args: argparse.Namespace,
                      broker_pid: int) -> Result:
    search = HERE / "topologies" if shape == "noop" else WORDCOUNT_DIR
    topo = squall_topology(shape, bootstrap, topic, group, args.pending, args.spouts, args.commit_ms,
                           args.emit_batch, props=consumer_props(args.consumer_props))
    res = squall_case(topo, search, args.seconds, args.warmup, others={"broker": broker_pid})
    res["broker_cpu_s"] = res.pop("others_cpu_s", {}).get("broker")
    res["group"] = group
    return res


def consumer_props(spec: str | None) -> dict[str, str]:
    """--consumer-props "K=V,K=V" as a dict (librdkafka takes the values as strings)."""
    out: dict[str, str] = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--consumer-props: {item!r} is not K=V")
        out[key.strip()] = value.strip()
    return out


# -- Storm --------------------------------------------------------------------------------------
def storm_cmd(shape: str, bootstrap: str, topic: str, group: str, args: argparse.Namespace) -> list[str]:
    jar = STORM_DIR / "target" / "storm-bench-1.jar"
    cp_file = STORM_DIR / "target" / "classpath.txt"
    if not jar.exists() or not cp_file.exists():
        raise RuntimeError("Storm's bench is not built: run bench/setup")
    java = shutil.which("java") or "java"
    return [java, "-Xmx1g", f"-Dlog4j2.configurationFile={STORM_DIR / 'src/main/resources/log4j2-bench.xml'}",
            "-cp", f"{jar}:{cp_file.read_text().strip()}", "squallbench.StormKafkaBench",
            "--case", shape, "--bootstrap", bootstrap, "--topic", topic, "--group", group,
            "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--pending", str(args.pending),
            "--workers", "2", "--ackers", "2", "--spouts", str(args.spouts), "--timeout", str(TIMEOUT_S),
            "--commit-ms", str(args.commit_ms)]


def run_marked(cmd: list[str], timeout: float, on_mark: Callable[[str], None]) -> Result:
    """Runs the command, calling `on_mark(name)` at each "MARK name" line of its stdout as it
    comes, and returns the JSON of its "RESULT " line."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        result: Result | None = None
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("MARK "):
                    on_mark(line.split()[1])
                elif line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT "):])
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if result is not None:
            return result
        err.seek(0)
        lines = err.read().splitlines()
    causes = [ln for ln in lines if "Caused by" in ln or "Exception:" in ln][:6]
    tail = "\n".join([*causes, "...", *lines[-10:]])
    raise RuntimeError(f"{cmd[0]} exited {proc.returncode} without a result:\n{tail}")


def storm_kafka_case(shape: str, bootstrap: str, topic: str, args: argparse.Namespace, broker_pid: int) -> Result:
    # a worker's Netty port is probed free before the cluster starts and bound later; on a busy
    # machine another process can take it in between (as in bench/peers): try again, new group
    errors = []
    for _attempt in range(3):
        group = f"storm-{shape}-{uuid.uuid4().hex[:8]}"
        marks: dict[str, float] = {}
        try:
            res = run_marked(storm_cmd(shape, bootstrap, topic, group, args), 240 + args.warmup + args.seconds,
                             lambda m: marks.__setitem__(m, cpu_secs(broker_pid)))
        except RuntimeError as exc:
            errors.append(str(exc))
            print(f"    storm failed, trying again: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
            continue
        res["hist"] = {int(k): v for k, v in res["hist"].items()}
        if "window-start" in marks and "window-end" in marks:
            res["broker_cpu_s"] = marks["window-end"] - marks["window-start"]
        res["failed_attempts"] = errors
        return res
    raise RuntimeError("\n".join(errors))


# -- the figures --------------------------------------------------------------------------------
def ran_dry(r: Result, records: int) -> bool:
    """True when the case's spout had acked every record of the topic by its window's end (it then
    waited on an empty topic for part of the window, and its rate is too low)."""
    return int(r.get("acked_total", 0)) >= records


def summarize(results: dict[str, Result], records: int) -> dict[str, Any]:
    """Adds rates, percentiles and CPU rates to every result; returns Squall / Storm per shape."""
    for r in results.values():
        if "error" in r:
            continue
        r["rate"] = float(r["acked_per_sec"])
        r["p50_ms"], r["p99_ms"] = latency(r)
        cpu = r.get("cpu_s")
        r["rate_per_cpu_s"] = r["rate"] * r["window_s"] / cpu if cpu else None
        broker = r.get("broker_cpu_s")
        r["rate_per_cpu_s_with_broker"] = r["rate"] * r["window_s"] / (cpu + broker) if cpu and broker else None
        r["ran_dry"] = ran_dry(r, records)
    out: dict[str, Any] = {}
    eo, alo = results.get("squall-k2k-eo", {}), results.get("squall-k2k", {})
    if "rate" in eo and "rate" in alo:
        out["k2k"] = {"of": ["squall-k2k-eo", "squall-k2k"], "rate": ratio(eo.get("rate"), alo.get("rate")),
                      "per_cpu_s": ratio(eo.get("rate_per_cpu_s"), alo.get("rate_per_cpu_s")),
                      "p99_ms": [eo.get("p99_ms"), alo.get("p99_ms")]}
    for shape in SHAPES:
        a, b = results.get(f"squall-{shape}", {}), results.get(f"storm-{shape}", {})
        if "rate" not in a or "rate" not in b:
            continue
        out[shape] = {
            "of": [f"squall-{shape}", f"storm-{shape}"],
            "rate": ratio(a.get("rate"), b.get("rate")),
            "per_cpu_s": ratio(a.get("rate_per_cpu_s"), b.get("rate_per_cpu_s")),
            "per_cpu_s_with_broker": ratio(a.get("rate_per_cpu_s_with_broker"), b.get("rate_per_cpu_s_with_broker")),
            "p99_ms": [a.get("p99_ms"), b.get("p99_ms")],
        }
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return float(a) / float(b) if a and b else None


def print_table(results: dict[str, Result], labels: dict[str, str], pairs: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title="Kafka spouts, one broker, one topic, one run", title_justify="left")
    for col in ("case", "engine", "records/s", "words/s", "p50 ms", "p99 ms", "÷ Storm", "per CPU-s", "÷ Storm",
                "incl. broker", "÷ Storm"):
        table.add_column(col, justify="left" if col in ("case", "engine") else "right")
    for cid, r in results.items():
        if "error" in r:
            table.add_row(cid, labels[cid], f"[red]failed: {r['error'].splitlines()[0][:70]}[/red]", *[""] * 8)
            continue
        shape = cid.split("-", 1)[1]
        base = results.get("squall-k2k" if cid == "squall-k2k-eo" else f"storm-{shape}", {})
        words = r.get("words_per_sec") if shape == "wordcount" else None
        dry = " [red](ran dry)[/red]" if r.get("ran_dry") else ""
        table.add_row(cid, labels[cid], f"{r['rate']:,.0f}{dry}", fmt(words, ",.0f"), fmt(r["p50_ms"], ".1f"),
                      fmt(r["p99_ms"], ".1f"), fmt(ratio(r["rate"], base.get("rate")), ".2f"),
                      fmt(r["rate_per_cpu_s"], ",.0f"), fmt(ratio(r["rate_per_cpu_s"], base.get("rate_per_cpu_s")), ".2f"),
                      fmt(r["rate_per_cpu_s_with_broker"], ",.0f"),
                      fmt(ratio(r["rate_per_cpu_s_with_broker"], base.get("rate_per_cpu_s_with_broker")), ".2f"))
    console.print(table)
    console.print("records/s: records acked per second (trees completed at the spout).  per CPU-s: records per CPU "
                  "second of the engine; incl. broker: of the engine and the broker together.  ÷ Storm: Squall / "
                  "Storm (squall-k2k-eo: exactly once / at least once), "
                  "Storm, same shape, same run.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--records", type=int, default=8_000_000, help="records pre-filled into the topic (default 8M)")
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    ap.add_argument("--compression", default="none", choices=["none", "lz4", "zstd", "snappy", "gzip"],
                    help="the producer's compression of the pre-filled topic (default none)")
    ap.add_argument("--seconds", type=float, default=15.0, help="measurement window per case (default 15)")
    ap.add_argument("--warmup", type=float, default=10.0, help="warm-up after the first acked record (default 10)")
    ap.add_argument("--pending", type=int, default=1000, help="maxSpoutPending on both engines (default 1000)")
    ap.add_argument("--spouts", type=int, default=1, help="Kafka spout tasks on both engines (default 1)")
    ap.add_argument("--commit-ms", type=int, default=1000,
                    help="offsetCommitPeriodMs on both engines (default 1000; both spouts' own default is 30000, "
                         "with which Squall's stalls: see docs/performance-log.md)")
    ap.add_argument("--emit-batch", type=int, default=None,
                    help="Squall's emitBatch, records per next_tuple call (default: the spout's, 64; 1: one per "
                         "call, as Storm's spout)")
    ap.add_argument("--consumer-props", metavar="K=V,K=V",
                    help="librdkafka consumer properties for Squall's no-op and word count spouts (e.g. "
                         "fetch.queue.backoff.ms=1000, librdkafka's default, for the run before the spout set 100)")
    ap.add_argument("--eo-pending", type=int, default=20000,
                    help="maxSpoutPending of squall-k2k-eo (default 20000: an ack waits for the checkpoint's "
                         "commit, so it must cover an interval's records)")
    ap.add_argument("--eo-interval-ms", type=int, default=1000,
                    help="topology.state.checkpoint.interval.ms of squall-k2k-eo (default 1000, Storm's)")
    ap.add_argument("--only", action="append", metavar="CASE", choices=CASES,
                    help=f"run only these cases: {', '.join(CASES)} (repeatable)")
    ap.add_argument("--json", type=Path, help="write the results here (default .squall/bench/kafka-peers-<time>.json)")
    args = ap.parse_args()
    if min(args.records, args.partitions, args.spouts, args.pending, args.commit_ms) < 1:
        ap.error("--records, --partitions, --spouts, --pending and --commit-ms must be at least 1")
    try:
        consumer_props(args.consumer_props)
    except ValueError as exc:
        ap.error(str(exc))
    logging.basicConfig(level=logging.WARNING)
    from squall.kafka.admin import create_topics
    from squall.kafka.broker import EmbeddedKafka

    path = args.json or ROOT / ".squall" / "bench" / f"kafka-peers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(), "loadavg_before": os.getloadavg(),
        "records": args.records, "partitions": args.partitions, "compression": args.compression,
        "seconds": args.seconds, "warmup": args.warmup, "pending": args.pending, "spouts": args.spouts,
        "commit_ms": args.commit_ms, "emit_batch": args.emit_batch, "eo_pending": args.eo_pending,
        "consumer_props": consumer_props(args.consumer_props),
        "eo_interval_ms": args.eo_interval_ms,
        "argv": sys.argv[1:], "hot_path": _native.reason,
    }
    print(f"hot path: {_native.reason}", flush=True)
    labels = {"storm-noop": "Storm 2.8.3 storm-kafka-client", "squall-noop": "Squall KafkaSpout",
              "storm-wordcount": "Storm 2.8.3 storm-kafka-client", "squall-wordcount": "Squall KafkaSpout",
              "squall-k2k": "KafkaSpout -> KafkaBolt (at least once)",
              "squall-k2k-eo": "StatefulKafkaSpout -> TransactionalKafkaBolt (exactly once)"}
    want = [c for c in CASES if not args.only or c in args.only]
    results: dict[str, Result] = {}
    with EmbeddedKafka(heap="1g") as broker:
        bootstrap, pid = broker.bootstrap_servers, broker.pid
        assert pid is not None
        topic = f"bench-sentences-{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, {topic: args.partitions})
        print(f"... filling {topic} ({args.partitions} partitions) with {args.records:,} sentences",
              file=sys.stderr, flush=True)
        meta["fill_records_per_sec"] = fill_topic(bootstrap, topic, args.records, args.partitions,
                                                  compression=args.compression)
        print(f"    {meta['fill_records_per_sec']:,.0f} records/s", file=sys.stderr, flush=True)
        meta["topic"] = topic
        for cid in want:
            engine, shape = cid.split("-", 1)
            print(f"... {cid}: {labels[cid]}", file=sys.stderr, flush=True)
            try:
                if cid in K2K:
                    results[cid] = squall_k2k_case(cid, bootstrap, topic, args, pid)
                elif engine == "storm":
                    results[cid] = storm_kafka_case(shape, bootstrap, topic, args, pid)
                else:
                    group = f"squall-{shape}-{uuid.uuid4().hex[:8]}"
                    results[cid] = squall_kafka_case(shape, bootstrap, topic, group, args, pid)
            except Exception as exc:  # a case that fails is reported, the others still run
                results[cid] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"    failed: {results[cid]['error']}", file=sys.stderr, flush=True)
            path.parent.mkdir(parents=True, exist_ok=True)  # what is done so far, in case the run is cut
            path.write_text(json.dumps({"meta": meta, "cases": results}, indent=2, default=str))
    pairs = summarize(results, args.records)
    print_table(results, labels, pairs)
    for cid, r in results.items():
        if "rate" in r and r.get("cpu_s"):
            # the cores each engine used: Storm's JVM as a whole; Squall's workers one by one
            # (with ZooKeeper in the total), where each is one engine loop
            per = "".join(f", {w.split('port=')[-1].rstrip(')')}: {c:.2f}" for w, c in r.get("worker_cores", {}).items())
            print(f"{cid}: {r['cpu_s'] / r['window_s']:.2f} cores{' (workers' + per[1:] + ')' if per else ''}",
                  flush=True)
    for cid, r in results.items():
        if r.get("ran_dry"):
            print(f"{cid} acked every record of the topic before its window ended: raise --records", flush=True)
    meta["loadavg_after"] = os.getloadavg()
    print(f"load average before {meta['loadavg_before'][0]:.1f}, after {meta['loadavg_after'][0]:.1f} "
          f"({os.cpu_count()} cores)")
    doc = {"meta": meta, "cases": {c: {"engine": labels[c], **r} for c, r in results.items()}, "pairings": pairs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
