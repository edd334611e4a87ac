"""How the load-aware shuffle settles: word count from its first tuple on, second by second.

    .venv/bin/python bench/settle.py [--runs 3] [--seconds 30] [--cpu/--no-cpu] [--json out.json]

Each run submits examples/wordcount (2 workers, as bench/run.py) with
`topology.localityaware.trace: true` and, every second from the first counted word, reads the
heartbeats: words counted in that second (the rate bench/run.py measures over its window) and
the share of sentences split in the spout's worker. After the run it reads the spout's trace
lines (one per re-weighing: scope, weights, each target's load and its worker's busy fraction)
and prints them next to the rates. Use it to see how long the shuffle takes to settle and which
way it leans on its way there."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import snapshot  # noqa: E402

from squall.models.v1alpha1 import Topology  # noqa: E402
from squall.validation import check_topology, load_topology  # noqa: E402
from squall_operator.local import LocalCluster  # noqa: E402

WORDCOUNT = HERE.parent / "examples/wordcount"
TRACE = re.compile(r"^(\S+ \S+) worker \S+ INFO \S+: load-aware trace of sentences: acked (\d+) executed \d+ "
                   r"local share (\S+) scope (\S+) weights (\{.*?\}) loads (\{.*?\}) busy (\{.*?\}|None)")


def topology(cpu: bool) -> Topology:
    spec = load_topology(WORDCOUNT / "topology.yaml").model_dump(by_alias=True, exclude_none=True)
    conf = spec["spec"].setdefault("config", {})
    conf["topology.localityaware.trace"] = True
    conf["topology.localityaware.cpu"] = cpu
    return Topology.model_validate(spec)


def _wall(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def one_run(topo: Topology, seconds: float, warmup: float, window: float) -> dict[str, Any]:
    """One submission: the spout's trace from its first re-weighing until `seconds` after the
    first counted word, and the words/s bench/run.py would report (heartbeats over `window`
    seconds after `warmup`)."""
    check_topology(topo, search_paths=[str(WORDCOUNT)])
    name = topo.name
    with LocalCluster(nodes=1, slots=2, search_paths=[str(WORDCOUNT)]) as cluster:
        cluster.submit(topo)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and snapshot(cluster, name).get("count", {}).get("executed", 0) == 0:
            time.sleep(0.2)
        t0 = time.time()
        time.sleep(warmup)
        a = snapshot(cluster, name)
        time.sleep(window)
        b = snapshot(cluster, name)
        time.sleep(max(0.0, seconds - (time.time() - t0)))
        text = "\n".join(cluster.worker_logs().values())
        cluster.kill(name, 0)
        cluster.wait_removed(name, 20)
    trace = []
    for line in text.splitlines():
        m = TRACE.match(line)
        if m:
            trace.append({"t": round(_wall(m[1]) - t0, 2), "acked": int(m[2]), "local_share": float(m[3]),
                          "scope": m[4], "weights": m[5], "loads": m[6], "busy": m[7]})
    dt = max(1e-6, b["count"]["t"] - a["count"]["t"])
    return {"words_per_sec": (b["count"]["executed"] - a["count"]["executed"]) / dt, "trace": trace}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=25.0, help="trace this long after the first counted word")
    ap.add_argument("--warmup", type=float, default=4.0, help="the rate's window starts this long after it (as bench/run.py)")
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--no-cpu", action="store_true", help="topology.localityaware.cpu: false (queues only)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs = []
    for i in range(args.runs):
        r = one_run(topology(not args.no_cpu), args.seconds, args.warmup, args.window)
        runs.append(r)
        print(f"run {i + 1}: {r['words_per_sec']:,.0f} words/s from {args.warmup:g} s to {args.warmup + args.window:g} s")
        print("      t  sentences/s  local  scope         weights             busy (queue load)")
        prev = None
        for tr in r["trace"]:
            rate = "            -"
            if prev is not None and tr["t"] > prev["t"]:
                rate = f"{(tr['acked'] - prev['acked']) / (tr['t'] - prev['t']):13,.0f}"
            prev = tr
            print(f"  {tr['t']:5.1f} {rate} {tr['local_share']:6.1%}  {tr['scope']:12}  {tr['weights']:18}  "
                  f"{tr['busy']} ({tr['loads']})")
        sys.stdout.flush()
    rates = [r["words_per_sec"] for r in runs]
    print("words/s:", ", ".join(f"{x:,.0f}" for x in sorted(rates)))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
