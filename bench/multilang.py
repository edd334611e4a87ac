"""What a tuple costs through a shell bolt (Storm's multilang protocol) against a Python bolt.

    .venv/bin/python bench/multilang.py [--tuples 20000] [--rounds 3] [--cluster-seconds 8]

In one process and one run, the same pass-through bolt (emit the input's value anchored to it,
then ack it) as a Python `Bolt`, and as a `squall.multilang.ShellBolt` running
  - JavaScript on Storm's storm.js (`node`),
  - Python on Storm's storm.py (`python3`), both with Storm's JSON framing,
  - Python speaking msgpack (`topology.multilang.serializer: msgpack`), with a child of its own.
Each `execute` is called as the executor calls it, with a collector that only counts, so the
figures are the component's own cost per tuple: wall time per tuple, and CPU per tuple of this
process plus the child's (the child's CPU is read when it has exited). Best of `--rounds`.

With `--cluster-seconds S` (0: skipped), the same four bolts also run on real workers, one case
after the other: `NumberSpout -> pass -> AckBolt` (bench/topologies/noop.py), one worker, acking
on, `maxSpoutPending` 1000, each measured for S seconds after a warm-up by `bench/run.py`'s
`measure` (trees acked per second at the spout, complete latency, per CPU-second of the worker;
the children's CPU is not in that figure).
Storm's adapters must be there (scripts/setup fetches them).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from squall.components import Bolt
from squall.multilang import ShellBolt, adapters
from squall.tuples import Tuple

PASS_JS = """\
var storm = require('./storm');
function PassBolt() { storm.BasicBolt.call(this); }
PassBolt.prototype = Object.create(storm.BasicBolt.prototype);
PassBolt.prototype.constructor = PassBolt;
PassBolt.prototype.process = function(tup, done) {
    this.emit({tuple: [tup.values[0]], anchorTupleId: tup.id}, function(taskIds) {});
    done();
};
new PassBolt().run();
"""

PASS_PY = """\
import storm
class PassBolt(storm.BasicBolt):
    def process(self, tup):
        storm.emit([tup.values[0]])
PassBolt().run()
"""

PASS_MSGPACK = """\
import os, sys, msgpack
out = sys.stdout.buffer
def send(m):
    out.write(msgpack.packb(m, use_bin_type=True))
unpacker = msgpack.Unpacker(raw=False)
setup = None
while True:
    data = os.read(0, 65536)
    if not data:
        break
    unpacker.feed(data)
    for m in unpacker:
        if setup is None:
            setup = m
            send({"pid": os.getpid()})
        elif isinstance(m, list):
            continue
        elif m.get("stream") == "__heartbeat":
            send({"command": "sync"})
        else:
            send({"command": "emit", "anchors": [m["id"]], "tuple": [m["tuple"][0]]})
            send({"command": "ack", "id": m["id"]})
    out.flush()
"""


class Context:
    topology_id = "bench"
    task_id = 1
    component_id = "pass"
    worker_port = 0

    def component_tasks(self, component: str) -> list[int]:
        return [1]

    def task_component(self, task: int) -> str:
        return "pass"

    def this_component_tasks(self) -> list[int]:
        return [1]

    def output_fields(self, stream: str = "default") -> list[str]:
        return ["word"]

    def task_to_component(self) -> dict[int, str]:
        return {1: "pass"}

    def this_streams(self) -> list[str]:
        return ["default"]


class CountingCollector:
    def __init__(self) -> None:
        self.emitted = self.acked = 0

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> list[int]:
        self.emitted += 1
        return [2]

    def emit_direct(self, task: int, values: Any, stream: str = "default", anchors: Any = None) -> None:
        self.emitted += 1

    def ack(self, tup: Any) -> None:
        self.acked += 1

    def fail(self, tup: Any) -> None:
        raise AssertionError("a tuple failed")

    def report_error(self, exc: BaseException) -> None:
        raise AssertionError(f"error: {exc}")


class PassBolt(Bolt):
    outputs = ["n"]

    def execute(self, tup: Tuple) -> None:
        self.collector.emit([tup.values[0]], anchors=[tup])
        self.collector.ack(tup)


def cluster_case(name: str, mid: dict[str, Any]) -> Any:
    from squall.validation import parse_topology

    spec = {
        "numWorkers": 1, "numAckers": 1, "maxSpoutPending": 1000,
        "spouts": [{"name": "numbers", "class": "noop:NumberSpout"}],
        "bolts": [{"name": "pass", "outputs": [{"fields": ["n"]}], "inputs": [{"component": "numbers"}], **mid},
                  {"name": "sink", "class": "noop:AckBolt", "inputs": [{"component": "pass"}]}],
    }
    return parse_topology({"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": name},
                           "spec": spec})


def cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(make: Callable[[], Bolt], n: int) -> tuple[float, float]:
    """(wall us per tuple, CPU us per tuple: this process and its exited children)."""
    bolt = make()
    collector = CountingCollector()
    bolt.prepare({"squall.multilang.shell": getattr(bolt, "_shell", None), **getattr(bolt, "_conf", {})},
                 Context(), collector)  # type: ignore[arg-type]
    tuples = [Tuple([f"word{i % 100}"], 3, "src", "default", {"word": 0}, None) for i in range(n)]
    for t in tuples[:200]:  # warm up (node's JIT, the pipes)
        bolt.execute(t)
    c0 = cpu(resource.RUSAGE_SELF) + cpu(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    for t in tuples:
        bolt.execute(t)
    wall = time.perf_counter() - w0
    bolt.cleanup()  # the child exits: its CPU is counted in RUSAGE_CHILDREN from here
    c1 = cpu(resource.RUSAGE_SELF) + cpu(resource.RUSAGE_CHILDREN)
    assert collector.acked == n + 200 and collector.emitted == n + 200, (collector.acked, collector.emitted)
    return wall / n * 1e6, (c1 - c0) / n * 1e6


def shell(command: list[str], files: list[str], conf: dict[str, Any] | None = None) -> Callable[[], Bolt]:
    def make() -> Bolt:
        b = ShellBolt()
        b._shell = {"command": command, "files": files}  # type: ignore[attr-defined]
        b._conf = conf or {}  # type: ignore[attr-defined]
        return b
    return make


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tuples", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cluster-seconds", type=float, default=8.0)
    args = p.parse_args()
    for name in ("storm.js", "storm.py"):
        adapters.require(name)
    code = Path(tempfile.mkdtemp(prefix="squall-bench-multilang-"))
    try:
        (code / "pass.js").write_text(PASS_JS)
        (code / "pass.py").write_text(PASS_PY)
        (code / "pass_msgpack.py").write_text(PASS_MSGPACK)
        sys.path.insert(0, str(code))  # where shell.files are looked up
        cases: list[tuple[str, Callable[[], Bolt]]] = [
            ("Python bolt", PassBolt),
            ("shell: node, storm.js (JSON)", shell(["node", "pass.js"], ["pass.js"])),
            ("shell: python3, storm.py (JSON)", shell(["python3", "pass.py"], ["pass.py"])),
            ("shell: python, msgpack", shell([sys.executable, "pass_msgpack.py"], ["pass_msgpack.py"],
                                             {"topology.multilang.serializer": "msgpack"})),
        ]
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            for name, make in cases:
                wall, cpu_us = measure(make, args.tuples)
                prev = best.get(name)
                if prev is None or wall < prev[0]:
                    best[name] = (wall, cpu_us)
        base_wall, base_cpu = best["Python bolt"]
        clustered: dict[str, dict[str, Any]] = {}
        if args.cluster_seconds > 0:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from run import measure as run_measure  # bench/run.py

            (code / "bench_multilang_pass.py").write_text(
                "from squall import Bolt\n\n\nclass PassBolt(Bolt):\n    outputs = ['n']\n\n"
                "    def execute(self, tup):\n        self.collector.emit([tup.values[0]], anchors=[tup])\n"
                "        self.collector.ack(tup)\n")
            mids = {
                "Python bolt": {"class": "bench_multilang_pass:PassBolt"},
                "shell: node, storm.js (JSON)": {"shell": {"command": ["node", "pass.js"], "files": ["pass.js"]}},
                "shell: python3, storm.py (JSON)": {"shell": {"command": ["python3", "pass.py"], "files": ["pass.py"]}},
                "shell: python, msgpack": {"shell": {"command": [sys.executable, "pass_msgpack.py"],
                                                     "files": ["pass_msgpack.py"]},
                                           "config": {"topology.multilang.serializer": "msgpack"}},
            }
            search = [code, Path(__file__).resolve().parent / "topologies"]
            for i, (name, mid) in enumerate(mids.items()):
                topo = cluster_case(f"bench-multilang-{i}", mid)
                clustered[name] = run_measure(topo, search, args.cluster_seconds, ("numbers", "acked"))
        print(f"{args.tuples} tuples per round, best of {args.rounds}; load {os.getloadavg()[0]:.1f}")
        print("| bolt | wall us/tuple | CPU us/tuple | tuples/s | added per tuple |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, (wall, cpu_us) in best.items():
            print(f"| {name} | {wall:.1f} | {cpu_us:.1f} | {1e6 / wall:,.0f} | +{wall - base_wall:.1f} us |")
        if clustered:
            base = clustered["Python bolt"]["tuples_per_sec"]
            print(f"\non a worker, {args.cluster_seconds:g} s each: numbers -> pass -> sink, acking on")
            print("| pass bolt | trees/s | ÷ Python bolt | p50 ms | p99 ms | trees per worker CPU-s |")
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            for name, r in clustered.items():
                print(f"| {name} | {r['tuples_per_sec']:,.0f} | {r['tuples_per_sec'] / base:.2f} | "
                      f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['tuples_per_cpu_sec']:,.0f} |")
    finally:
        shutil.rmtree(code, ignore_errors=True)


if __name__ == "__main__":
    main()
