"""Where a Squall word count's CPU goes: per worker, per thread, and (with perf) per library.

    .venv/bin/python bench/profile_workers.py [--seconds 8] [--warmup 8] [--pending 1000] [--json PATH]

Runs bench/peers.py's Squall word count (examples/wordcount, 2 workers, 2 ackers, the default
load-aware shuffle) in a local cluster and, after the warm-up, reads over one window:
- each worker's threads' CPU (utime + stime from /proc/PID/task/TID/stat), in cores; a thread
  by the kernel's name the worker gives it (`engine`: the loop that steps every executor;
  `transfer-data`, an isolated executor's `split-3`: squall.worker.threads)
  and its id;
- each thread's voluntary and involuntary context switches per second (/proc/.../status);
- with `perf` on PATH (and the right to use it): a `perf record -F 999` of both workers over
  the same window, split by shared object (the interpreter, the compiled hot path, msgpack,
  libzmq, the kernel) and the top symbols;
- the topology's words/s and complete latency over the window, from the heartbeats.

Answers "which worker is the bottleneck and what is it doing" (docs/performance.md, "How far
from the targets, and why"). Figures are for one machine and one run: compare shares, not rates.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ceiling import cpu_secs  # noqa: E402
from peers import WORDCOUNT_DIR, squall_wordcount  # noqa: E402
from run import snapshot  # noqa: E402

from squall import _native, stats  # noqa: E402
from squall_operator.local import LocalCluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def thread_counters(pid: int) -> dict[int, tuple[int, int, int, str]]:
    """Thread id -> (CPU ticks, voluntary, involuntary context switches, the kernel's name)."""
    out: dict[int, tuple[int, int, int, str]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except OSError:  # the thread ended
            continue
        vol = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)
        inv = re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M)
        out[int(tid)] = (int(fields[11]) + int(fields[12]), int(vol.group(1)) if vol else 0,
                         int(inv.group(1)) if inv else 0, _comm(pid, int(tid)))
    return out


def _comm(pid: int, tid: int) -> str:
    """The kernel's name of a thread, with its id (squall.worker.threads names the worker's; zmq
    names its I/O threads)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f"{f.read().strip()} ({tid})"
    except OSError:
        return str(tid)


def perf_split(path: str) -> dict[str, Any]:
    """Shares by shared object and the top symbols of a perf.data file."""
    def report(sort: str) -> list[tuple[float, str]]:
        text = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", sort, "--stdio", "-g", "none"],
                              capture_output=True, text=True, timeout=120).stdout
        rows = []
        for line in text.splitlines():
            m = re.match(r"\s*([\d.]+)%\s+(.*\S)", line)
            if m:
                rows.append((float(m.group(1)), m.group(2)))
        return rows

    def dso(name: str) -> str:
        for key, label in (("libpython", "interpreter (libpython)"), ("__mypyc", "compiled hot path (mypyc)"),
                           ("kernel", "kernel"), ("msgpack", "msgpack"), ("libzmq", "libzmq"), ("_zmq", "pyzmq"),
                           ("libc", "libc")):
            if key in name:
                return label
        return "other"

    shares: dict[str, float] = {}
    for pct, name in report("dso"):
        shares[dso(name)] = shares.get(dso(name), 0.0) + pct
    return {"by_library": shares, "top_symbols": report("sym")[:25]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measurement window (default 8)")
    ap.add_argument("--warmup", type=float, default=8.0, help="warm-up after the first tree completes (default 8)")
    ap.add_argument("--pending", type=int, default=1000, help="maxSpoutPending (default 1000, as bench/peers)")
    ap.add_argument("--no-perf", action="store_true", help="skip perf even when it is installed")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    print(f"hot path: {_native.reason}", flush=True)

    topology = squall_wordcount(args.pending)
    name, spout = topology.name, topology.spec.spouts[0].name
    result: dict[str, Any] = {"time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                              "pending": args.pending, "hot_path": _native.reason,
                              "loadavg_before": os.getloadavg(), "workers": {}}
    with LocalCluster(nodes=1, slots=2, search_paths=[str(WORDCOUNT_DIR)]) as cluster:
        cluster.submit(topology)
        t0 = time.monotonic()
        while snapshot(cluster, name).get(spout, {}).get("acked", 0) == 0:
            if time.monotonic() - t0 > 120:
                raise SystemExit("no tree completed within 120 s")
            time.sleep(0.2)
        time.sleep(args.warmup)
        pids = sorted(cluster.worker_pids(name).values())
        perf_data = None
        perf = None
        if not args.no_perf and shutil.which("perf"):
            fd, perf_data = tempfile.mkstemp(prefix="squall-perf-", suffix=".data")
            os.close(fd)
            perf = subprocess.Popen(["perf", "record", "-F", "999", "-p", ",".join(map(str, pids)), "-o", perf_data,
                                     "--", "sleep", str(args.seconds)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        a = snapshot(cluster, name)
        before = {p: thread_counters(p) for p in pids}
        cpu0 = {p: cpu_secs(p) for p in pids}
        time.sleep(args.seconds)
        after = {p: thread_counters(p) for p in pids}
        cpu = {p: cpu_secs(p) - cpu0[p] for p in pids}
        b = snapshot(cluster, name)
        where = {p: sorted(c for c, n in comps.items() if n) for p, comps in _components(cluster, name).items()}
        if perf is not None:
            perf.wait(timeout=args.seconds + 60)
        cluster.kill(name, 0)
        cluster.wait_removed(name, 30)
    dt = max(1e-6, b[spout]["t"] - a[spout]["t"])
    hist = {k: v - a[spout]["hist"].get(k, 0) for k, v in b[spout]["hist"].items()}
    words = (b["count"]["executed"] - a["count"]["executed"]) / dt
    result.update(words_per_sec=words, p50_ms=stats.percentile(hist, 0.5), p99_ms=stats.percentile(hist, 0.99),
                  loadavg_after=os.getloadavg())
    print(f"word count: {words:,.0f} words/s, p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
          f"{sum(cpu.values()) / args.seconds:.2f} cores in the workers "
          f"({words * args.seconds / max(sum(cpu.values()), 1e-6):,.0f} words per CPU-s)")
    for p in pids:
        rows = []
        for tid, (ticks, vol, inv, comm) in after[p].items():
            t0_, v0, i0, _ = before[p].get(tid, (0, 0, 0, ""))
            cores = (ticks - t0_) / TICK / args.seconds
            if cores >= 0.005:
                rows.append({"thread": comm, "cores": cores,
                             "voluntary_per_s": (vol - v0) / args.seconds, "involuntary_per_s": (inv - i0) / args.seconds})
        rows.sort(key=lambda r: -r["cores"])
        result["workers"][str(p)] = {"cores": cpu[p] / args.seconds, "threads": rows, "hosts": where.get(p, [])}
        print(f"worker {p} ({', '.join(where.get(p, []))}): {cpu[p] / args.seconds:.2f} cores")
        for r in rows:
            print(f"  {r['cores']:5.2f}  {r['voluntary_per_s']:7.0f} vol/s {r['involuntary_per_s']:6.0f} invol/s  {r['thread']}")
    if perf_data is not None and perf is not None and perf.returncode != 0:
        os.unlink(perf_data)
        print(f"perf record exited {perf.returncode} (not allowed here? see kernel.perf_event_paranoid): "
              "no split by library", file=sys.stderr)
        perf_data = None
    if perf_data is not None:
        try:
            result["perf"] = perf_split(perf_data)
        finally:
            os.unlink(perf_data)
        print("perf, both workers, by library: " + ", ".join(
            f"{k} {v:.1f}%" for k, v in sorted(result["perf"]["by_library"].items(), key=lambda kv: -kv[1])))
        for pct, sym in result["perf"]["top_symbols"][:12]:
            print(f"  {pct:5.2f}%  {sym}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


def _components(cluster: LocalCluster, name: str) -> dict[int, dict[str, int]]:
    """Worker pid -> component -> tuples executed (spouts: trees acked), from the heartbeats."""
    pid_of = cluster.worker_pids(name)
    out: dict[int, dict[str, int]] = {}
    for slot, beat in cluster.state.get_worker_heartbeats(name).items():
        if slot not in pid_of:
            continue
        comps = out.setdefault(pid_of[slot], {})
        for ex in beat.executors.values():
            comps[ex.component] = comps.get(ex.component, 0) + max(ex.executed, ex.acked)
    return out


if __name__ == "__main__":
    main()
