"""The windowed word count's cost per word against how long tuples are held and how many trees
are in flight (a diagnostic, not one of bench/run.py's cases).

    .venv/bin/python bench/window_hold.py c c/300000 2s/1s 100ms/50ms 100ms/50ms/10000 ...

Each argument is one run, in the order given (alternate them in one sitting): `c` is the plain
word count (examples/wordcount, maxSpoutPending 500 as in bench/run.py's (c)), `c/N` the same
with maxSpoutPending N; `LENGTH/SLIDE[/N]` is bench/run.py's (d) (the bench's
`SlidingWordCount`) with that window and maxSpoutPending N (default 300,000, as (d)). Prints
words/s, words per CPU-second of both workers ("all CPU") and of the busiest, the complete
latency's p50, the spout's mean pending trees and the workers' largest RSS.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import measure, windowed_wordcount  # noqa: E402

from squall.validation import parse_topology  # noqa: E402

WORDCOUNT = HERE.parent / "examples/wordcount"


def topology(case: str) -> tuple[Any, list[Path], float]:
    """The topology of one argument, its search paths and its warm-up."""
    data = yaml.safe_load((WORDCOUNT / "topology.yaml").read_text())
    parts = case.split("/")
    if parts[0] == "c":
        if len(parts) > 1:
            data["spec"]["maxSpoutPending"] = int(parts[1])
        return parse_topology(data, source=case), [WORDCOUNT], 15.0
    pending = int(parts[2]) if len(parts) > 2 else 300_000
    return windowed_wordcount(pending=pending, length=parts[0], slide=parts[1]), [WORDCOUNT, HERE / "topologies"], 20.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+", help="c, c/PENDING, LENGTH/SLIDE or LENGTH/SLIDE/PENDING")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    for case in args.cases:
        topo, paths, warmup = topology(case)
        t, load = time.strftime("%H:%M:%S", time.gmtime()), os.getloadavg()[0]
        r = measure(topo, paths, args.seconds, ("count", "executed"), warmup=warmup, sample=True)
        print(f"{t} load {load:.1f}-{os.getloadavg()[0]:.1f} {case:18} {r['tuples_per_sec']:9,.0f} words/s, "
              f"all CPU {r['tuples_per_cpu_sec_all']:9,.0f}, busiest {r['tuples_per_cpu_sec']:9,.0f} words/CPU-s, "
              f"p50 {r['p50_ms']:.0f} ms, pending {r.get('pending_mean', 0):,.0f}, "
              f"RSS {r.get('rss_mib_max', 0):,.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
