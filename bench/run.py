"""Squall's benchmark: the ceiling, a no-op topology (acking off and on), word count and word
count with a sliding-window counter, in one run on one machine, each as tuples/s, complete
latency p50/p99 and the ratio to the ceiling.

    .venv/bin/python bench/run.py [--seconds 10] [--json results.json]

Throughput is measured from the workers' heartbeats over a window after a warm-up, so start-up
is not counted. Figures are only comparable within one run: report ratios, not absolutes.
"per cpu-s" divides by the CPU seconds of the busiest process (each process is bound to one
core by the GIL), which is what the case would reach on a quiet machine and is much less
sensitive to other load than wall-clock rates.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ceiling import cpu_secs, run as ceiling_run  # noqa: E402

from squall import _native, stats  # noqa: E402
from squall.builder import TopologyBuilder  # noqa: E402
from squall.models.v1alpha1 import Topology  # noqa: E402
from squall.validation import check_topology, load_topology, parse_topology  # noqa: E402
from squall_operator.local import LocalCluster  # noqa: E402


def noop_topology(ack: bool) -> Topology:
    b = TopologyBuilder("bench-noop-ack" if ack else "bench-noop")
    b.set_spout("numbers", "noop:NumberSpout")
    b.set_bolt("sink", "noop:AckBolt").shuffle_grouping("numbers")
    return b.build(
        num_workers=2,
        num_ackers=2 if ack else 0,
        max_spout_pending=2000 if ack else None,
        config={"bench.ack": ack},
    )


def snapshot(cluster: LocalCluster, name: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for beat in cluster.state.get_worker_heartbeats(name).values():
        for ex in beat.executors.values():
            s = out.setdefault(ex.component, {"acked": 0, "executed": 0, "emitted": 0, "pending": 0, "hist": {},
                                              "t": 0.0})
            s["pending"] += ex.pending
            s["acked"] += ex.acked
            s["executed"] += ex.executed
            s["emitted"] += ex.emitted
            s["hist"] = stats.merge([s["hist"], ex.latency_hist])
            s["t"] = max(s["t"], beat.time_secs)
    return out


def windowed_wordcount(anchored: bool = True, pending: int = 300000, length: str = "2s", slide: str = "1s") -> Topology:
    """The word count with its counter as a sliding window (2 s, every 1 s unless told), acking
    on; the same file otherwise but for maxSpoutPending."""
    data = yaml.safe_load((HERE.parent / "examples/wordcount/topology.yaml").read_text())
    data["metadata"]["name"] = "wordcount-windowed"
    count = next(b for b in data["spec"]["bolts"] if b["name"] == "count")
    count["class"] = "windowed:SlidingWordCount"
    count.pop("config", None)
    count["window"] = {"windowLength": length, "slidingInterval": slide}
    # a sentence's tree completes when its words leave the window (2-3 s later): by Little's
    # law maxSpoutPending must be >= rate x 3 s, or the spout waits on the window, not the work.
    # 150,000 (320k words/s) capped it on a quiet machine (docs/performance.md, 2026-11-26)
    data["spec"]["maxSpoutPending"] = pending
    if not anchored:
        data["metadata"]["name"] = "wordcount-windowed-unanchored"
        count["config"] = {"bench.windowed.unanchored": True}
    return parse_topology(data, source="wordcount-windowed")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def workers_allocator(pids: list[int]) -> str:
    """What the workers run on (squall.worker.allocator; windowed topologies on jemalloc by
    default): "jemalloc", "pymalloc" (CPython's own) or "mixed"."""
    found = set()
    for pid in pids:
        with open(f"/proc/{pid}/maps") as f:
            found.add("jemalloc" if "libjemalloc" in f.read() else "pymalloc")
    return found.pop() if len(found) == 1 else "mixed"


def measure(topology: Topology, search: Path | list[Path], seconds: float, rate_of: tuple[str, str],
            warmup: float = 4.0, curve: bool = False, sample: bool = False) -> dict[str, Any]:
    """One case's rates and complete latency. `sample`: also read the spouts' pending trees and
    the workers' RSS about once a second in the window (the windowed cases: whether the spout
    waits at maxSpoutPending, and what the windows hold in memory)."""
    paths = [str(p) for p in (search if isinstance(search, list) else [search])]
    check_topology(topology, search_paths=paths)
    name = topology.name
    with LocalCluster(nodes=1, slots=2, search_paths=paths, curve=curve) as cluster:
        cluster.submit(topology)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snap = snapshot(cluster, name)
            if snap.get(rate_of[0], {}).get(rate_of[1], 0) > 0:
                break
            time.sleep(0.2)
        time.sleep(warmup)
        pids = list(cluster.worker_pids(name).values())
        allocator = workers_allocator(pids)
        a = snapshot(cluster, name)
        cpu0 = {p: cpu_secs(p) for p in pids}
        pend: list[int] = []  # the spouts' pending trees, from each heartbeat in the window
        rss: list[float] = []  # the workers' resident memory together, MiB
        if sample:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
                pend.append(sum(s["pending"] for s in snapshot(cluster, name).values()))
                rss.append(sum(rss_mib(p) for p in pids))
        else:
            time.sleep(seconds)
        b = snapshot(cluster, name)
        used = [cpu_secs(p) - c for p, c in cpu0.items()]
        busiest = max(used)
        cluster.kill(name, 0)
        cluster.wait_removed(name, 20)
    comp, field = rate_of
    dt = max(1e-6, b[comp]["t"] - a[comp]["t"])
    spout = next(c for c in ("numbers", "sentences") if c in b)
    hist = {k: v - a[spout]["hist"].get(k, 0) for k, v in b[spout]["hist"].items()}
    count = b[comp][field] - a[comp][field]
    out = {
        "tuples_per_sec": count / dt,
        # heartbeats are 1 s apart, CPU is read at the sleeps: scale the count to the CPU window
        "tuples_per_cpu_sec": count * (seconds / dt) / max(busiest, 1e-6),
        # the same per CPU second of all the workers together: the per-tuple cost, whichever
        # worker did the work (the load-aware shuffle moves it between them from run to run)
        "tuples_per_cpu_sec_all": count * (seconds / dt) / max(sum(used), 1e-6),
        "p50_ms": stats.percentile(hist, 0.5),
        "p99_ms": stats.percentile(hist, 0.99),
        "allocator": allocator,
    }
    cap = topology.spec.max_spout_pending
    if pend and cap:
        out["pending_mean"] = sum(pend) / len(pend)
        # the share of the heartbeats read in the window whose spouts were at the cap (within 1%)
        out["at_pending_cap"] = sum(1 for n in pend if n >= 0.99 * cap) / len(pend)
    if rss:
        out["rss_mib_max"] = max(rss)
    return out


def scrape_overhead(topology: Topology, search: Path, seconds: float, rate_of: tuple[str, str],
                    every: float = 0.1, rounds: int = 3, warmup: float = 4.0) -> dict[str, float]:
    """The cost of /metrics: one cluster, windows of `seconds` alternately without and with every
    worker's /metrics scraped (and parsed) every `every` seconds; returns the rates of each
    kind (summed over its windows) and their ratio (with / without)."""
    import threading
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    check_topology(topology, search_paths=[str(search)])
    name = topology.name
    comp, field = rate_of
    totals = {"off": [0.0, 0.0], "on": [0.0, 0.0]}  # count, seconds
    scrapes = 0
    took: list[float] = []  # seconds per scrape, request to last byte
    with LocalCluster(nodes=1, slots=2, search_paths=[str(search)]) as cluster:
        cluster.submit(topology)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not snapshot(cluster, name).get(comp, {}).get(field, 0):
            time.sleep(0.2)
        time.sleep(warmup)
        ports = [e.metrics_port for e in cluster.state.get_endpoints(name).values()]
        for i in range(2 * rounds):
            kind = "on" if i % 2 else "off"
            stop = threading.Event()

            def scrape() -> None:
                nonlocal scrapes
                while not stop.wait(every):
                    for port in ports:
                        t0 = time.perf_counter()
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                            body = r.read().decode()
                        took.append(time.perf_counter() - t0)
                        for _ in text_string_to_metric_families(body):
                            pass
                        scrapes += 1

            t = threading.Thread(target=scrape, daemon=True)
            if kind == "on":
                t.start()
            a = snapshot(cluster, name)
            time.sleep(seconds)
            b = snapshot(cluster, name)
            stop.set()
            if kind == "on":
                t.join(10)
            totals[kind][0] += b[comp][field] - a[comp][field]
            totals[kind][1] += max(1e-6, b[comp]["t"] - a[comp]["t"])
        cluster.kill(name, 0)
        cluster.wait_removed(name, 20)
    off, on = (totals[k][0] / totals[k][1] for k in ("off", "on"))
    return {"tuples_per_sec_off": off, "tuples_per_sec_on": on, "ratio_on_off": on / off,
            "scrapes_per_sec": scrapes / totals["on"][1],
            "scrape_ms_p50": 1000 * sorted(took)[len(took) // 2] if took else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window per case")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--warmup", type=float, default=4.0, help="seconds of warm-up before each window")
    ap.add_argument("--windowed-warmup", type=float, default=25.0,
                    help="warm-up of the windowed cases: a window holds every tree for its length, so the "
                         "spout works off its first maxSpoutPending trees before the rate is steady")
    ap.add_argument("--windowed-pending", type=int, default=300000,
                    help="maxSpoutPending of the windowed cases (a window's worth of sentences, twice over)")
    ap.add_argument("--only", action="append",
                    help="run only these cases (ceiling, noop, noop-ack, wordcount, windowed; "
                         "windowed-unanchored, metrics, noop-ack-curve and wordcount-curve (the same with the "
                         "transport sealed): not by default)")
    ap.add_argument("--scrape-every", type=float, default=0.1,
                    help="metrics case: seconds between scrapes of each worker's /metrics")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # a venv built before a pulled change to a compiled module runs all of the hot path interpreted
    print(f"hot path: {_native.reason}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    want = set(args.only or ["ceiling", "noop", "noop-ack", "wordcount", "windowed"])
    if "ceiling" in want:
        results["(a) ceiling: bare pyzmq + msgpack, XOR acks back"] = ceiling_run(args.seconds, True)
    if "noop" in want:
        results["(b) no-op spout -> bolt, 2 workers, acking off"] = measure(
            noop_topology(False), HERE / "topologies", args.seconds, ("sink", "executed"), warmup=args.warmup)
    if "noop-ack" in want:
        results["(b) no-op spout -> bolt, 2 workers, acking on"] = measure(
            noop_topology(True), HERE / "topologies", args.seconds, ("numbers", "acked"), warmup=args.warmup)
    if "noop-ack-curve" in want:
        results["(b) no-op, acking on, CURVE (sealed transport)"] = measure(
            noop_topology(True), HERE / "topologies", args.seconds, ("numbers", "acked"), warmup=args.warmup, curve=True)
    if "wordcount" in want:
        wc = load_topology(HERE.parent / "examples/wordcount/topology.yaml")
        results["(c) wordcount, acking on (words/s)"] = measure(
            wc, HERE.parent / "examples/wordcount", args.seconds, ("count", "executed"), warmup=args.warmup)
    if "windowed" in want:
        results["(d) wordcount, counter a 2 s window sliding 1 s (words/s)"] = measure(
            windowed_wordcount(pending=args.windowed_pending), [HERE.parent / "examples/wordcount", HERE / "topologies"],
            args.seconds, ("count", "executed"), warmup=args.windowed_warmup, sample=True)
    if "windowed-unanchored" in want:
        results["(e) the same, the window's output not anchored (words/s)"] = measure(
            windowed_wordcount(anchored=False, pending=args.windowed_pending),
            [HERE.parent / "examples/wordcount", HERE / "topologies"], args.seconds, ("count", "executed"),
            warmup=args.windowed_warmup, sample=True)
    if "wordcount-curve" in want:
        wc = load_topology(HERE.parent / "examples/wordcount/topology.yaml")
        results["(c) wordcount, CURVE (sealed transport)"] = measure(
            wc, HERE.parent / "examples/wordcount", args.seconds, ("count", "executed"), warmup=args.warmup,
            curve=True)
    ceiling = next((v["tuples_per_sec"] for k, v in results.items() if k.startswith("(a)")), None)
    ceiling_cpu = next((v["tuples_per_cpu_sec"] for k, v in results.items() if k.startswith("(a)")), None)
    print(f"{'case':52} {'tuples/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'/ceiling':>8} {'per cpu-s':>10} {'/ceiling':>8}")
    for case, r in results.items():
        ratio = f"{r['tuples_per_sec'] / ceiling:8.2f}" if ceiling else "       -"
        cratio = f"{r['tuples_per_cpu_sec'] / ceiling_cpu:8.2f}" if ceiling_cpu else "       -"
        print(f"{case:52} {r['tuples_per_sec']:10,.0f} {r['p50_ms']:7.2f} {r['p99_ms']:7.2f} {ratio}"
              f" {r['tuples_per_cpu_sec']:10,.0f} {cratio}")
    print("allocators: " + ", ".join(f"{case[:3]} {r['allocator']}" for case, r in results.items() if "allocator" in r))
    for case, r in results.items():
        if "pending_mean" in r:
            print(f"{case[:3]} spout pending: mean {r['pending_mean']:,.0f}, at maxSpoutPending in "
                  f"{r['at_pending_cap']:.0%} of the heartbeats; workers' RSS at most {r['rss_mib_max']:,.0f} MiB")
    wc = next((v for k, v in results.items() if k.startswith("(c)")), None)
    win = next((v for k, v in results.items() if k.startswith("(d)")), None)
    if wc and win:
        print(f"windowed / plain word count: {win['tuples_per_sec'] / wc['tuples_per_sec']:.2f} (words/s), "
              f"{win['tuples_per_cpu_sec'] / wc['tuples_per_cpu_sec']:.2f} (per cpu-s)")
    if "metrics" in want:
        m = scrape_overhead(noop_topology(True), HERE / "topologies", args.seconds, ("numbers", "acked"),
                            every=args.scrape_every)
        print(f"metrics: no-op acking on, alternating windows: {m['tuples_per_sec_off']:,.0f} tuples/s without "
              f"scrapes, {m['tuples_per_sec_on']:,.0f} with every worker's /metrics scraped "
              f"{m['scrapes_per_sec']:.1f} times/s: ratio {m['ratio_on_off']:.3f}; one scrape {m['scrape_ms_p50']:.2f} ms (p50)")
        results["metrics"] = m
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
