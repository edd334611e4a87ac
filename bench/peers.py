"""Squall side by side with its peers: Apache Storm, Spark Structured Streaming and Bytewax.

    bench/peers [--seconds 15] [--warmup 10] [--pending 1000] [--only CASE ...] [--json PATH]
    bench/peers --workers 1,2,4,8          # Squall's word count scaling curve instead

(`bench/peers` runs bench/setup, which builds or installs whatever the peers need and is
missing, then this file with the project's venv.)

Shapes, the same on every engine that has them:
- noop: one spout emitting integers with a message id, shuffle-grouped to one bolt that only
  acks; 2 workers, 2 ackers, `maxSpoutPending` --pending. Rate: trees acked per second.
- wordcount: examples/wordcount (a spout of five sentences of 6-8 words, split with anchored
  emits into 2 executors, a fields-grouped count of 2 executors / 4 tasks, a global reporter),
  acking on, 2 workers, 2 ackers, `maxSpoutPending` --pending. Rate: words counted per second.
  Spark and Bytewax run the same sentences through split and a keyed count (no acks).

Storm runs in a LocalCluster with Netty over loopback between its 2 workers (`storm-*-inproc`:
with its in-memory transport instead, a LocalCluster's default and the faster Storm), message
timeouts on, log level ERROR, twice for word count: with its default load-aware shuffle (which keeps
sentences in the spout's worker) and with `topology.disable.loadaware.messaging`. Squall runs
three times: with its default `shuffle` (Storm 2's load-aware, locality-preferring shuffle, as
Storm's default), with `topology.disable.loadaware.messaging` (uniform) and with
`localOrShuffle`. Pairings: defaults (both load-aware, so also like-for-like), uniform (both with
load-aware messaging off) and local (Squall localOrShuffle vs Storm's default).

Complete latency (spout emit to ack) is bucketed the same way on both sides (squall.stats) and
read over the same window. Besides wall-clock rates, "per CPU-s" divides by the CPU seconds every
process of the engine used in the window (Storm: its one JVM; Squall: its workers and
ZooKeeper; Spark: the JVM and the driver; Bytewax: its process), which is much less sensitive
to other load on a shared machine. Compare figures within one run only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ceiling import cpu_secs  # noqa: E402
from run import snapshot  # noqa: E402

from squall import _native, stats  # noqa: E402
from squall.builder import TopologyBuilder  # noqa: E402
from squall.models.v1alpha1 import Topology  # noqa: E402
from squall.validation import check_topology, load_topology  # noqa: E402
from squall_operator.local import LocalCluster  # noqa: E402

STORM_DIR = HERE / "storm"
BYTEWAX_PY = HERE / ".venv-bytewax" / "bin" / "python"
WORDCOUNT_DIR = ROOT / "examples" / "wordcount"

Result = dict[str, Any]


# -- Squall ------------------------------------------------------------------------------------
def squall_noop(pending: int) -> Topology:
    b = TopologyBuilder("bench-peer-noop")
    b.set_spout("numbers", "noop:NumberSpout")
    b.set_bolt("sink", "noop:AckBolt").shuffle_grouping("numbers")
    return b.build(num_workers=2, num_ackers=2, max_spout_pending=pending, config={"bench.ack": True})


def squall_wordcount(pending: int, grouping: str = "shuffle", workers: int = 2, scale: bool = False,
                     loadaware: bool = True) -> Topology:
    """examples/wordcount with the bench's pending, worker and acker counts. `scale`: every
    component but the reporter gets one executor per worker (count: two tasks per worker), so
    the topology can use the workers it is given. `loadaware=False`: shuffle is uniform
    (`topology.disable.loadaware.messaging`), as Storm's with the same setting."""
    spec = load_topology(WORDCOUNT_DIR / "topology.yaml").model_dump(by_alias=True, exclude_none=True)
    spec["metadata"]["name"] = "bench-peer-wordcount"
    s = spec["spec"]
    s.update(numWorkers=workers, numAckers=workers, maxSpoutPending=pending)
    comps = {c["name"]: c for c in [*s["spouts"], *s["bolts"]]}
    comps["split"]["inputs"][0]["grouping"] = grouping
    if not loadaware:
        s.setdefault("config", {})["topology.disable.loadaware.messaging"] = True
    if scale:
        for name in ("sentences", "split", "count"):
            comps[name]["parallelism"] = workers
        comps["count"]["numTasks"] = 2 * workers
    return Topology.model_validate(spec)


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def squall_case(topology: Topology, search: Path, seconds: float, warmup: float,
                others: dict[str, int] | None = None) -> Result:
    """Runs one topology in a local cluster (one node, a slot per worker) and reads the workers'
    heartbeats over the window: spout acks and latency histogram, the count bolt's executions.
    `others`: name -> pid of processes outside the engine (a Kafka broker) whose CPU seconds over
    the window are reported apart, in "others_cpu_s"."""
    check_topology(topology, search_paths=[str(search)])
    name = topology.name
    spout = topology.spec.spouts[0].name
    workers = topology.spec.num_workers
    with LocalCluster(nodes=1, slots=workers, search_paths=[str(search)]) as cluster:
        t0 = time.monotonic()
        cluster.submit(topology)
        while snapshot(cluster, name).get(spout, {}).get("acked", 0) == 0:
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"squall: no tree of {name} completed within 180 s")
            time.sleep(0.2)
        startup = time.monotonic() - t0
        time.sleep(warmup)
        slots = cluster.worker_pids(name)
        worker_pids = [*slots.values()]
        pids = list(worker_pids)
        if cluster.zk is not None and cluster.zk.pid is not None:
            pids.append(cluster.zk.pid)
        a = snapshot(cluster, name)
        per_a = per_worker(cluster, name)
        cpu0 = {p: cpu_secs(p) for p in pids}
        others0 = {k: cpu_secs(p) for k, p in (others or {}).items()}
        rss: list[tuple[float, float]] = []  # (seconds into the window, MB of all workers)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            rss.append((seconds - left, sum(rss_mb(p) for p in worker_pids)))
            time.sleep(min(left, max(1.0, seconds / 300)))
        rss.append((seconds, sum(rss_mb(p) for p in worker_pids)))
        b = snapshot(cluster, name)
        per_b = per_worker(cluster, name)
        cpu = sum(cpu_secs(p) - c for p, c in cpu0.items())
        worker_cpu = {str(slot): (cpu_secs(p) - cpu0[p]) / seconds for slot, p in slots.items()}
        others_cpu = {k: cpu_secs((others or {})[k]) - c for k, c in others0.items()}
        scope_changes = [ln.split(" INFO ", 1)[-1] for text in cluster.worker_logs().values()
                         for ln in text.splitlines() if "load-aware shuffle of" in ln]
        cluster.kill(name, 0)
        cluster.wait_removed(name, 30)
    dt = max(1e-6, b[spout]["t"] - a[spout]["t"])
    hist = {k: v - a[spout]["hist"].get(k, 0) for k, v in b[spout]["hist"].items()}
    out: Result = {
        "startup_s": startup,
        "window_s": dt,
        "acked_per_sec": (b[spout]["acked"] - a[spout]["acked"]) / dt,
        # heartbeats are about 1 s apart, CPU is read at the sleeps: scale CPU to the window
        "cpu_s": cpu * dt / seconds,
        "hist": hist,
        "acked_total": b[spout]["acked"],
        # the workers' resident memory over the window: flat means bounded queues and books
        "rss_mb": {"start": rss[0][1], "end": rss[-1][1], "max": max(m for _, m in rss), "samples": rss},
    }
    if others:
        out["others_cpu_s"] = {k: v * dt / seconds for k, v in others_cpu.items()}
    if "count" in b:
        out["words_per_sec"] = (b["count"]["executed"] - a["count"]["executed"]) / dt
    # where the work ran: per worker, what each component executed (spouts: acked) in the window
    work = {w: {c: n - per_a.get(w, {}).get(c, 0) for c, n in comps.items()} for w, comps in per_b.items()}
    out["per_worker"] = work
    # each worker's CPU seconds per second of the window (a worker is one engine loop: at most
    # about 1.0 for the loop, plus its client libraries' threads)
    out["worker_cores"] = worker_cpu
    if "split" in b:
        out["split_kept_local"] = kept_local(work, spout, "split")
        out["scope_changes"] = scope_changes
    return out


def kept_local(work: dict[str, dict[str, int]], source: str, target: str) -> float | None:
    """The routing share of source -> target that stayed in the source's workers: of the tuples
    `target` executed in the window (`work`: worker -> component -> count), the fraction executed
    in a worker that runs `source` (exact when every worker runs `target` and only the `source`
    feeds it). None when `target` executed nothing."""
    total = sum(comps.get(target, 0) for comps in work.values())
    kept = sum(comps.get(target, 0) for comps in work.values() if source in comps)
    return kept / total if total else None


def per_worker(cluster: LocalCluster, name: str) -> dict[str, dict[str, int]]:
    """Worker slot -> component -> tuples executed (spouts: trees acked) so far."""
    out: dict[str, dict[str, int]] = {}
    for slot, beat in cluster.state.get_worker_heartbeats(name).items():
        comps = out.setdefault(str(slot), {})
        for ex in beat.executors.values():
            comps[ex.component] = comps.get(ex.component, 0) + max(ex.executed, ex.acked)
    return out


# -- the peers, each in its own process ---------------------------------------------------------
def run_result(cmd: list[str], timeout: float, cwd: Path = ROOT) -> Result:
    """Runs a peer's command and returns the JSON of its "RESULT " line."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            res: Result = json.loads(line[len("RESULT "):])
            return res
    lines = (proc.stderr or proc.stdout).splitlines()
    causes = [ln for ln in lines if "Caused by" in ln or "Exception:" in ln][:6]
    tail = "\n".join([*causes, "...", *lines[-10:]])
    raise RuntimeError(f"{cmd[0]} exited {proc.returncode} without a result:\n{tail}")


def storm_case(shape: str, seconds: float, warmup: float, pending: int, loadaware: bool, workers: int = 2,
               transport: str = "netty") -> Result:
    jar = STORM_DIR / "target" / "storm-bench-1.jar"
    cp_file = STORM_DIR / "target" / "classpath.txt"
    if not jar.exists() or not cp_file.exists():
        raise RuntimeError("Storm's bench is not built: run bench/setup")
    java = shutil.which("java") or "java"
    cmd = [java, "-Xmx1g", f"-Dlog4j2.configurationFile={STORM_DIR / 'src/main/resources/log4j2-bench.xml'}",
           "-cp", f"{jar}:{cp_file.read_text().strip()}", "squallbench.StormBench",
           "--case", shape, "--seconds", str(seconds), "--warmup", str(warmup), "--pending", str(pending),
           "--workers", str(workers), "--ackers", str(workers), "--loadaware", str(loadaware).lower(),
           "--transport", transport]
    # a worker's Netty port is probed free before the cluster starts and bound later; on a busy
    # machine another process can take it in between (the worker then halts the JVM): try again
    errors = []
    for _attempt in range(3):
        try:
            res = run_result(cmd, timeout=240 + warmup + seconds)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            errors.append(str(exc))
            print(f"    storm failed, trying again: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
            continue
        res["hist"] = {int(k): v for k, v in res["hist"].items()}
        res["failed_attempts"] = errors
        return res
    raise RuntimeError("\n".join(errors))


def spark_case(seconds: float, warmup: float, rows_per_batch: int) -> Result:
    cmd = [sys.executable, str(HERE / "peer_spark.py"), "--seconds", str(seconds), "--warmup", str(warmup),
           "--rows-per-batch", str(rows_per_batch)]
    return run_result(cmd, timeout=400 + warmup + seconds)


def bytewax_case(seconds: float, warmup: float) -> Result:
    if not BYTEWAX_PY.exists():
        raise RuntimeError("Bytewax's venv is missing: run bench/setup")
    cmd = [str(BYTEWAX_PY), str(HERE / "peer_bytewax.py"), "--seconds", str(seconds), "--warmup", str(warmup)]
    return run_result(cmd, timeout=120 + warmup + seconds)


# -- the cases ----------------------------------------------------------------------------------
# id -> (shape, engine label, how to run it)
def cases(args: argparse.Namespace) -> dict[str, tuple[str, str, Callable[[], Result]]]:
    s, w, p = args.seconds, args.warmup, args.pending
    topo = HERE / "topologies"
    return {
        "storm-noop": ("noop", "Storm (defaults)", lambda: storm_case("noop", s, w, p, True)),
        "squall-noop": ("noop", "Squall (defaults)", lambda: squall_case(squall_noop(p), topo, s, w)),
        "storm-wc": ("wordcount", "Storm (defaults: load-aware shuffle)", lambda: storm_case("wordcount", s, w, p, True)),
        "storm-noop-inproc": ("noop", "Storm (in-process transport)",
                              lambda: storm_case("noop", s, w, p, True, transport="inproc")),
        "storm-wc-inproc": ("wordcount", "Storm (in-process transport)",
                            lambda: storm_case("wordcount", s, w, p, True, transport="inproc")),
        "storm-wc-uniform": ("wordcount", "Storm (load-aware messaging off)",
                             lambda: storm_case("wordcount", s, w, p, False)),
        "squall-wc": ("wordcount", "Squall (defaults: load-aware shuffle)",
                      lambda: squall_case(squall_wordcount(p), WORDCOUNT_DIR, s, w)),
        "squall-wc-uniform": ("wordcount", "Squall (load-aware messaging off)",
                              lambda: squall_case(squall_wordcount(p, loadaware=False), WORDCOUNT_DIR, s, w)),
        "squall-wc-local": ("wordcount", "Squall (localOrShuffle)",
                            lambda: squall_case(squall_wordcount(p, "localOrShuffle"), WORDCOUNT_DIR, s, w)),
        "spark-wc": ("wordcount", "Spark Structured Streaming (local[2])",
                     lambda: spark_case(s, w, args.spark_rows_per_batch)),
        "bytewax-wc": ("wordcount", "Bytewax (1 worker, no acks)", lambda: bytewax_case(s, w)),
    }


def rate(r: Result, shape: str) -> float:
    return float(r["words_per_sec"] if shape == "wordcount" else r["acked_per_sec"])


def latency(r: Result) -> tuple[float | None, float | None]:
    if r.get("hist"):
        return stats.percentile(r["hist"], 0.5), stats.percentile(r["hist"], 0.99)
    if "batch_ms_p50" in r:
        return r["batch_ms_p50"], r["batch_ms_p99"]
    return None, None


def summarize(results: dict[str, Result], shapes: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """Adds rates, percentiles and CPU rates to every result; returns the pairings."""
    for cid, r in results.items():
        if "error" in r:
            continue
        shape = shapes[cid][0]
        r["rate"] = rate(r, shape)
        r["p50_ms"], r["p99_ms"] = latency(r)
        r["rate_per_cpu_s"] = r["rate"] * r["window_s"] / r["cpu_s"] if r.get("cpu_s") else None

    def ratio(a: str, b: str, key: str = "rate") -> float | None:
        ra, rb = results.get(a, {}), results.get(b, {})
        if ra.get(key) and rb.get(key):
            return float(ra[key]) / float(rb[key])
        return None

    pairs = [
        ("noop: Squall / Storm (defaults; one bolt task, so load-aware shuffle has no choice)", "squall-noop", "storm-noop"),
        ("wordcount, defaults (both load-aware shuffle): Squall / Storm", "squall-wc", "storm-wc"),
        ("noop: Squall / Storm with its in-process transport (LocalCluster's default)", "squall-noop",
         "storm-noop-inproc"),
        ("wordcount: Squall / Storm with its in-process transport (LocalCluster's default)", "squall-wc",
         "storm-wc-inproc"),
        ("wordcount, uniform (load-aware messaging off on both): Squall / Storm", "squall-wc-uniform", "storm-wc-uniform"),
        ("wordcount, like-for-like local: Squall localOrShuffle / Storm load-aware", "squall-wc-local", "storm-wc"),
        ("wordcount: Squall shuffle / Spark Structured Streaming", "squall-wc", "spark-wc"),
        ("wordcount: Squall localOrShuffle / Spark Structured Streaming", "squall-wc-local", "spark-wc"),
        ("wordcount: Squall shuffle / Bytewax", "squall-wc", "bytewax-wc"),
        ("wordcount: Squall localOrShuffle / Bytewax", "squall-wc-local", "bytewax-wc"),
    ]
    out = {}
    for label, a, b in pairs:
        if a in results and b in results:
            p99a, p99b = results[a].get("p99_ms"), results[b].get("p99_ms")
            out[label] = {
                "of": [a, b],
                "rate": ratio(a, b),
                "per_cpu_s": ratio(a, b, "rate_per_cpu_s"),
                "p99_ms": [p99a, p99b],
            }
    return out


def fmt(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def print_table(results: dict[str, Result], shapes: dict[str, tuple[str, str]], pairs: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title="Squall and its peers, one run", title_justify="left")
    for col, just in (("shape", "left"), ("engine", "left"), ("tuples/s", "right"), ("p50 ms", "right"),
                      ("p99 ms", "right"), ("÷ Storm", "right"), ("per CPU-s", "right"), ("÷ Storm", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    storm_of = {"noop": "storm-noop", "wordcount": "storm-wc"}
    for cid, r in results.items():
        shape, label = shapes[cid]
        if "error" in r:
            table.add_row(shape, label, f"[red]failed: {r['error'].splitlines()[0][:60]}[/red]", "", "", "", "", "")
            continue
        base = results.get(storm_of[shape], {})
        ratio = r["rate"] / base["rate"] if base.get("rate") else None
        cbase = base.get("rate_per_cpu_s")
        cratio = r["rate_per_cpu_s"] / cbase if cbase and r.get("rate_per_cpu_s") else None
        mark = " †" if "batch_ms_p50" in r else ""
        table.add_row(shape, label, f"{r['rate']:,.0f}", fmt(r["p50_ms"], ".1f") + mark, fmt(r["p99_ms"], ".1f") + mark,
                      fmt(ratio, ".2f"), fmt(r.get("rate_per_cpu_s"), ",.0f"), fmt(cratio, ".2f"))
    console.print(table)
    console.print("tuples/s: trees acked per second (noop), words counted per second (wordcount). "
                  "÷ Storm: against Storm with its defaults, same shape.  † Spark: micro-batch duration, "
                  "it has no per-tuple acks.  Bytewax: no acks, no latency.")
    for cid, r in results.items():
        if r.get("split_kept_local") is not None:
            console.print(f"{cid}: sentences split in the spout's worker {r['split_kept_local']:.1%}, "
                          f"load-aware scope changes {len(r.get('scope_changes', []))}")
    if pairs:
        ptable = Table(title="Pairings", title_justify="left")
        for col, just in (("pairing", "left"), ("rate ratio", "right"), ("per CPU-s ratio", "right"), ("p99 ms (a / b)", "right")):
            ptable.add_column(col, justify=just)  # type: ignore[arg-type]
        for label, p in pairs.items():
            a, b = p["p99_ms"]
            ptable.add_row(label, fmt(p["rate"], ".2f"), fmt(p["per_cpu_s"], ".2f"), f"{fmt(a, '.1f')} / {fmt(b, '.1f')}")
        console.print(ptable)


def scaling(args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table

    counts = [int(x) for x in args.workers.split(",")]
    rows: dict[str, Any] = {}
    for n in counts:
        print(f"... squall wordcount, {n} worker(s)", file=sys.stderr, flush=True)
        try:
            r = squall_case(squall_wordcount(args.pending, workers=n, scale=True), WORDCOUNT_DIR, args.seconds, args.warmup)
            r["rate"] = r["words_per_sec"]
            r["p50_ms"], r["p99_ms"] = latency(r)
            r["rate_per_cpu_s"] = r["rate"] * r["window_s"] / r["cpu_s"] if r.get("cpu_s") else None
        except Exception as exc:  # one failed point must not lose the others
            r = {"error": str(exc)}
        rows[str(n)] = r
    table = Table(title=f"Squall word count by workers (ackers, spouts, splits, counts to match; "
                        f"maxSpoutPending {args.pending} per spout), {os.cpu_count()} cores", title_justify="left")
    for col in ("workers", "words/s", "÷ 1 worker", "p50 ms", "p99 ms", "per CPU-s"):
        table.add_column(col, justify="right")
    base = rows.get(str(counts[0]), {}).get("rate")
    for n, r in rows.items():
        if "error" in r:
            table.add_row(n, f"failed: {r['error'][:60]}", "", "", "", "")
            continue
        table.add_row(n, f"{r['rate']:,.0f}", fmt(r["rate"] / base if base else None, ".2f"),
                      fmt(r["p50_ms"], ".1f"), fmt(r["p99_ms"], ".1f"), fmt(r["rate_per_cpu_s"], ",.0f"))
    Console(width=None if sys.stdout.isatty() else 150).print(table)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0, help="measurement window per case (default 15)")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="warm-up after the first tuples, per case (default 10: the JVMs' JIT needs it)")
    ap.add_argument("--pending", type=int, default=1000, help="maxSpoutPending on every engine that has it (default 1000)")
    ap.add_argument("--only", action="append", metavar="CASE",
                    help="run only these cases: storm-noop, storm-noop-inproc, squall-noop, storm-wc, storm-wc-inproc, "
                         "storm-wc-uniform, squall-wc, "
                         "squall-wc-uniform, squall-wc-local, spark-wc, bytewax-wc (repeatable)")
    ap.add_argument("--spark-rows-per-batch", type=int, default=20000, help="sentences per Spark micro-batch")
    ap.add_argument("--workers", help="instead of the peers: Squall's word count at these worker counts, e.g. 1,2,4,8")
    ap.add_argument("--json", type=Path, help="write the results here (default .squall/bench/peers-<time>.json)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or ROOT / ".squall" / "bench" / f"{'scaling' if args.workers else 'peers'}-{stamp}.json"
    meta = {"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(),
            "loadavg_before": os.getloadavg(), "seconds": args.seconds, "warmup": args.warmup,
            "pending": args.pending, "argv": sys.argv[1:], "hot_path": _native.reason}
    # a venv built before a pulled change to a compiled module runs all of the hot path interpreted
    print(f"hot path: {_native.reason}", flush=True)
    if args.workers:
        doc: dict[str, Any] = {"meta": meta, "scaling": scaling(args)}
    else:
        all_cases = cases(args)
        unknown = set(args.only or []) - set(all_cases)
        if unknown:
            ap.error(f"unknown case(s) {sorted(unknown)}; known: {', '.join(all_cases)}")
        want = [c for c in all_cases if not args.only or c in args.only]
        shapes = {c: (all_cases[c][0], all_cases[c][1]) for c in want}
        results: dict[str, Result] = {}
        for cid in want:
            print(f"... {cid}: {all_cases[cid][1]}", file=sys.stderr, flush=True)
            try:
                results[cid] = all_cases[cid][2]()
            except Exception as exc:  # a peer that fails is reported, the others still run
                results[cid] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"    failed: {results[cid]['error']}", file=sys.stderr, flush=True)
        pairs = summarize(results, shapes)
        print_table(results, shapes, pairs)
        doc = {"meta": meta, "cases": {c: {"shape": shapes[c][0], "engine": shapes[c][1], **r} for c, r in results.items()},
               "pairings": pairs}
    meta["loadavg_after"] = os.getloadavg()
    print(f"load average before {meta['loadavg_before'][0]:.1f}, after {meta['loadavg_after'][0]:.1f} "
          f"({os.cpu_count()} cores)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
