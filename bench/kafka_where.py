"""Where Squall's Kafka no-op topology spends its cores: per worker and per thread, one run.

    .venv/bin/python bench/kafka_where.py [--spouts 1] [--workers 2] [--records 6000000]
                                          [--seconds 10] [--warmup 6] [--pending 1000] [--probe]
                                          [--props K=V,K=V ...] [--spout K=V ...]

Starts a broker, fills a topic (4 partitions), runs bench/kafka_peers.py's noop topology (its
Squall side, `squall_topology`) and reads, over the window, each worker's CPU seconds thread by
thread (/proc/PID/task/TID: the engine loop, librdkafka's rdk:* threads, the metadata helper...),
what each worker ran (components, tuples), and the rate. A worker's loop thread near 1.0 CPU-s
per second is bound by the one core it can use; well below, it waits (on an empty prefetch
queue, on maxSpoutPending, on acks). `--props` runs the topology once per set of librdkafka consumer
properties given (on one broker and topic, a fresh group each); `--probe` swaps in a KafkaSpout
that logs its polls, the empty ones, and its calls at maxSpoutPending.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ceiling import TICK  # noqa: E402
from kafka_peers import fill_topic, squall_topology  # noqa: E402
from peers import per_worker  # noqa: E402
from run import snapshot  # noqa: E402

from squall.validation import check_topology  # noqa: E402
from squall_operator.local import LocalCluster  # noqa: E402


def threads(pid: int) -> dict[str, float]:
    """Thread name (with its id) -> CPU seconds so far, for one process."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rpartition(")")[2].split()
        out[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spouts", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bolts", type=int, default=1)
    ap.add_argument("--records", type=int, default=6_000_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=6.0)
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--props", action="append", default=[],
                    help="librdkafka consumer properties K=V,K=V: one run each (repeatable; '' for the defaults)")
    ap.add_argument("--probe", action="store_true",
                    help="run bench/topologies/kafka_probe.py's ProbeSpout: it logs its polls, the empty ones "
                         "and its calls at maxSpoutPending every 2 s")
    ap.add_argument("--spout", action="append", default=[], help="a kafka.spout setting K=V (int)")
    args = ap.parse_args()
    from squall.kafka.admin import create_topics
    from squall.kafka.broker import EmbeddedKafka

    with EmbeddedKafka(heap="1g") as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"where-{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, {topic: 4})
        print(f"fill: {fill_topic(bootstrap, topic, args.records, 4):,.0f} records/s", flush=True)
        tries = args.props or [""]
        for i, spec in enumerate(tries):
            props = dict(p.split("=", 1) for p in spec.split(",") if p)
            print(f"--- {i + 1}/{len(tries)} props {props or 'default'}", flush=True)
            measure(args, bootstrap, topic, props)


def measure(args: argparse.Namespace, bootstrap: str, topic: str, props: dict[str, str]) -> None:
    topo = squall_topology("noop", bootstrap, topic, f"where-{uuid.uuid4().hex[:6]}", args.pending,
                           args.spouts, 1000, None, workers=args.workers, bolts=args.bolts, props=props,
                           spout_extra={k: int(v) for k, v in (s.split("=", 1) for s in args.spout)},
                           spout_class="kafka_probe:ProbeSpout" if args.probe else "squall.kafka:KafkaSpout")
    paths = [str(HERE / "topologies")]
    check_topology(topo, search_paths=paths)
    with LocalCluster(nodes=1, slots=args.workers, search_paths=paths) as cluster:
        cluster.submit(topo)
        t0 = time.monotonic()
        while snapshot(cluster, topo.name).get("kafka", {}).get("acked", 0) == 0:
            if time.monotonic() - t0 > 120:
                raise SystemExit("nothing acked in 120 s")
            time.sleep(0.2)
        time.sleep(args.warmup)
        pids = cluster.worker_pids(topo.name)
        a, wa = snapshot(cluster, topo.name), per_worker(cluster, topo.name)
        c0 = {s: threads(p) for s, p in pids.items()}
        l0 = os.getloadavg()
        time.sleep(args.seconds)
        c1 = {s: threads(p) for s, p in pids.items()}
        b, wb = snapshot(cluster, topo.name), per_worker(cluster, topo.name)
        dt = b["kafka"]["t"] - a["kafka"]["t"]
        rate = (b["kafka"]["acked"] - a["kafka"]["acked"]) / dt
        total = 0.0
        lines = []
        for slot, pid in pids.items():
            work = {c: n - wa.get(str(slot), {}).get(c, 0) for c, n in wb.get(str(slot), {}).items()}
            used = {t: c1[slot].get(t, 0.0) - c0[slot].get(t, 0.0) for t in c1[slot]}
            cpu = sum(used.values()) / args.seconds
            total += cpu
            lines.append(f"worker {slot} pid {pid}: {cpu:.2f} cores; ran {work}")
            for t, secs in sorted(used.items(), key=lambda kv: -kv[1]):
                if secs / args.seconds >= 0.01:
                    lines.append(f"    {t:28s} {secs / args.seconds:.2f}")
        print(f"rate {rate:,.0f} records/s over {dt:.1f} s, {total:.2f} cores, {rate / max(total, 1e-9):,.0f} "
              f"per CPU-s; load {l0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
        print("\n".join(lines))
        for text in cluster.worker_logs().values():
            for ln in text.splitlines():
                if "PROBE" in ln:
                    print(ln[ln.index("PROBE"):])
        cluster.kill(topo.name, 0)
        cluster.wait_removed(topo.name, 30)


if __name__ == "__main__":
    main()
