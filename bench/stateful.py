"""Stateful word count against the plain word count in the same run, and the cost of one
checkpoint with 100k keys in Redis.

    .venv/bin/python bench/stateful.py [--seconds 10] [--keys 100000] [--json results.json]

(a) plain: sentences -> split -> count (a dict), acking on, bench/topologies/statebench.py
(b) stateful: examples/stateful-wordcount (StatefulSpout, StatefulBolt, totals in Redis,
    checkpoint every 1 s): the same sentences and words
Both as words/s counted (from the workers' heartbeats after a warm-up) and the spout's complete
latency p50/p99; a stateful bolt's acks wait for the commit, so its complete latency is about the
checkpoint interval by design (Storm's too). (c) times KeyValueState's prepare_commit + commit on
a real redis-server with `--keys` keys: every key changed, 1% changed, and a rollback (which
reads the whole state back). A redis-server is started on a free loopback port and killed at
the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import measure  # noqa: E402

from squall.builder import TopologyBuilder  # noqa: E402
from squall.statebackend import open_provider  # noqa: E402
from squall.validation import load_topology  # noqa: E402

EXAMPLE = HERE.parent / "examples" / "stateful-wordcount"
PENDING = 20000


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed (scripts/setup installs Debian's)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir, "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conf = {"topology.state.provider": "redis", "topology.state.provider.config": {"host": "127.0.0.1", "port": port}}
    deadline = time.monotonic() + 10
    while True:
        try:
            open_provider({**conf, "topology.name": "bench-ping"})
            return proc, port
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def plain() -> Any:
    b = TopologyBuilder("bench-wc-plain")
    b.set_spout("sentences", "statebench:PlainSentenceSpout")
    b.set_bolt("split", "statebench:SplitSentence", 2).shuffle_grouping("sentences")
    b.set_bolt("count", "statebench:PlainWordCount", 2, num_tasks=4).fields_grouping("split", ["word"])
    return b.build(num_workers=2, max_spout_pending=PENDING)


def stateful(port: int) -> Any:
    topo = load_topology(EXAMPLE / "topology.yaml")
    data = topo.model_dump(by_alias=True, exclude_none=True)
    data["metadata"]["name"] = "bench-wc-stateful"
    data["spec"]["maxSpoutPending"] = PENDING
    data["spec"]["config"]["topology.state.provider.config"] = {"host": "127.0.0.1", "port": port}
    return type(topo).model_validate(data)


def checkpoint_cost(port: int, keys: int) -> dict[str, float]:
    conf = {"topology.name": "bench-cost", "topology.state.provider": "redis",
            "topology.state.provider.config": {"host": "127.0.0.1", "port": port}}
    provider = open_provider(conf)
    state = provider.state(f"cost-{keys}")
    out: dict[str, float] = {}
    for i in range(keys):
        state.put(f"word-{i}", i)
    t0 = time.perf_counter()
    state.prepare_commit(0)
    state.commit(0)
    out["all_keys_changed_ms"] = (time.perf_counter() - t0) * 1000
    for i in range(0, keys, 100):
        state.put(f"word-{i}", -i)
    t0 = time.perf_counter()
    state.prepare_commit(1)
    state.commit(1)
    out["one_percent_changed_ms"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    state.rollback()
    out["rollback_reload_ms"] = (time.perf_counter() - t0) * 1000
    assert len(state) == keys
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window per case")
    ap.add_argument("--keys", type=int, default=100_000, help="keys in the checkpoint-cost case")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="squall-bench-redis-") as tmp:
        proc, port = start_redis(tmp)
        try:
            # the plain case runs with bench/topologies on its path, the stateful one with the example
            results["(a) word count, plain (words/s)"] = measure(plain(), HERE / "topologies", args.seconds,
                                                                 ("count", "executed"))
            results["(b) word count, stateful on Redis (words/s)"] = measure(stateful(port), EXAMPLE, args.seconds,
                                                                             ("count", "executed"))
            results["(c) checkpoint cost"] = checkpoint_cost(port, args.keys)
        finally:
            proc.kill()
            proc.wait()
    a, b = results["(a) word count, plain (words/s)"], results["(b) word count, stateful on Redis (words/s)"]
    print(f"{'case':46} {'words/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'per cpu-s':>10}")
    for case, r in ((k, v) for k, v in results.items() if not k.startswith("(c)")):
        print(f"{case:46} {r['tuples_per_sec']:9,.0f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['tuples_per_cpu_sec']:10,.0f}")
    print(f"stateful / plain: {b['tuples_per_sec'] / a['tuples_per_sec']:.2f} (words/s), "
          f"{b['tuples_per_cpu_sec'] / a['tuples_per_cpu_sec']:.2f} (per cpu-s)")
    c = results["(c) checkpoint cost"]
    print(f"checkpoint of a {args.keys:,}-key state in Redis: every key changed {c['all_keys_changed_ms']:.0f} ms, "
          f"1% changed {c['one_percent_changed_ms']:.0f} ms, rollback (reads it all back) {c['rollback_reload_ms']:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
