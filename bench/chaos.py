"""Squall's chaos run: a steady acked load on a local cluster (real ZooKeeper, real worker
processes, zmq on loopback) while faults are injected, with the figures that say whether the
cluster healed: ids lost, duplicates delivered, recovery time after each fault, memory.

    .venv/bin/python bench/chaos.py                       # the short run (about 2-3 minutes)
    .venv/bin/python bench/chaos.py --soak-minutes 5      # kill -9 every 10 s for 5 minutes
    .venv/bin/python bench/chaos.py --json chaos.json     # the figures as JSON too

The load: bench/topologies/chaos_components.py, a durable source (ids 0..N-1 at a fixed rate,
its acked ids recorded as they arrive, unacked ids replayed) -> a pass-through bolt (shuffle) ->
a sink (fields on the id) that records every delivery. 2 workers on 3 simulated nodes of 2 slots.

The faults, in order:
  kill      SIGKILL to a random worker process, every `--kill-every` seconds (`--kills` of them,
            or `--soak-minutes` worth); its node's supervisor starts it again
  zookeeper ZooKeeper stopped, `--zk-outage` seconds later started again with its data
  nimbus    a rebalance (2 -> 3 workers, 2 s wait) and, during its wait, nimbus stopped; a new
            nimbus is started on the same ZooKeeper after the wait is due
  node      a node with workers of the topology fails: its workers are killed, its supervisor
            is gone; nimbus moves the workers to the other nodes

Figures:
  lost        ids never acked at the spout after the load ended and `--drain` seconds passed
  delivered_unacked / acked_undelivered: ids acked at the spout without a delivery at the sink
  duplicates  deliveries at the sink beyond the first of each id (at-least-once: replays)
  recovery    per fault: from the fault to the start of the first `SUSTAIN` seconds in which
              every 1 s window acks at least 90% of the steady rate measured before the first
              fault (0 when the rate never dipped); None if that did not happen before the next
              fault. p50 and max over the faults.
  rss         resident memory (MB) of the processes that lived through the run: the workers
              alive at the end (5 s after they started and at the end), the cluster's own
              process (nimbus and the supervisors) and ZooKeeper's JVM
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from squall.builder import TopologyBuilder
from squall.models.v1alpha1 import Topology
from squall.zkserver import EmbeddedZooKeeper
from squall_operator.local import LocalCluster
from squall_operator.nimbus import Nimbus

HERE = Path(__file__).resolve().parent
COMPONENTS = HERE / "topologies"
NAME = "chaos"
SUSTAIN = 3  # seconds of windows at >= 90% that count as recovered
THRESHOLD = 0.9

log = logging.getLogger("squall.chaos")


@dataclass
class Fault:
    kind: str
    at: float  # unix time
    detail: str
    recovery_s: float | None = None


@dataclass
class Settings:
    rate: float = 200.0
    kills: int = 4
    kill_every: float = 10.0
    zk_outage: float = 4.0
    settle: float = 10.0
    warmup: float = 8.0
    drain: float = 120.0
    seed: int = 20261123
    faults: Sequence[str] = ("kill", "zookeeper", "nimbus", "node")


@dataclass
class Result:
    settings: dict[str, Any]
    count: int
    acked: int
    lost: int
    acked_undelivered: int
    deliveries: int
    duplicates: int
    steady_rate: float
    faults: list[dict[str, Any]]
    recovery_p50_s: float | None
    recovery_max_s: float | None
    unrecovered: int
    worker_restarts: int
    rss_mb: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0


# -- pure figures ------------------------------------------------------------------------------
def count_between(times: Sequence[float], start: float, end: float) -> int:
    """Events in [start, end) of the sorted `times`."""
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


def steady_rate(times: Sequence[float], end: float, seconds: float = 5.0) -> float:
    return count_between(times, end - seconds, end) / seconds


def recovery_time(
    times: Sequence[float], fault_at: float, before: float, until: float,
    *, window: float = 1.0, sustain: int = SUSTAIN, step: float = 0.1, threshold: float = THRESHOLD,
) -> float | None:
    """Seconds from `fault_at` to the start of the first `sustain` consecutive `window`s that
    each hold at least `threshold * before * window` of the sorted event `times`; None when no
    such run ends by `until` (the next fault, or the end of the load)."""
    need = threshold * before * window
    t = fault_at
    while t + sustain * window <= until + 1e-9:
        if all(count_between(times, t + i * window, t + (i + 1) * window) >= need for i in range(sustain)):
            return round(t - fault_at, 3)
        t += step
    return None


def percentile_50(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def read_records(out: Path) -> tuple[list[float], set[int], list[int]]:
    """(sorted ack times, acked ids, every delivery at the sink) from the components' files."""
    times: list[float] = []
    acked: set[int] = set()
    for path in sorted(out.glob("acks-*.log")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                acked.add(int(parts[0]))
                times.append(float(parts[1]))
    deliveries: list[int] = []
    for path in sorted(out.glob("sink-*.log")):
        deliveries.extend(int(s) for s in path.read_text().split())
    times.sort()
    return times, acked, deliveries


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


# -- the run -----------------------------------------------------------------------------------
def chaos_topology(out: Path, count: int, rate: float) -> Topology:
    b = TopologyBuilder(NAME)
    b.set_spout("ids", "chaos_components:DurableSpout", parallelism=2)
    b.set_bolt("pass", "chaos_components:PassBolt", parallelism=2).shuffle_grouping("ids")
    b.set_bolt("sink", "chaos_components:SinkBolt", parallelism=2).fields_grouping("pass", ["id"])
    return b.build(
        num_workers=2,
        message_timeout_secs=5,
        max_spout_pending=1000,
        config={"chaos.count": count, "chaos.rate": rate, "chaos.out": str(out)},
    )


class Chaos:
    def __init__(self, settings: Settings, workdir: Path, say: Callable[[str], None] = print) -> None:
        self.s = settings
        self.workdir = workdir
        self.out = workdir / "records"
        self.say = say
        self.rng = random.Random(settings.seed)
        self.faults: list[Fault] = []
        self.rss: dict[int, list[float]] = {}
        self._sampling = threading.Event()

    def schedule_seconds(self) -> float:
        s = self.s
        secs = 0.0
        for kind in s.faults:
            secs += s.kills * s.kill_every if kind == "kill" else s.settle + (s.zk_outage if kind == "zookeeper" else 0)
        return secs

    def run(self) -> Result:
        s = self.s
        t_start = time.time()
        # ids for the whole schedule at the rate, and a tail after the last fault
        count = int(s.rate * (s.warmup + self.schedule_seconds() + s.settle + 5))
        self.zk = EmbeddedZooKeeper(tick_time_ms=500, min_session_timeout_ms=1000, max_session_timeout_ms=10_000)
        self.zk.start()
        try:
            self.cluster = LocalCluster(
                nodes=3, slots=2, zookeeper=self.zk.connect_string, search_paths=[str(COMPONENTS)],
                workdir=str(self.workdir / "cluster"),
            )
            (self.workdir / "cluster").mkdir(parents=True, exist_ok=True)
            self.cluster.start()
            try:
                return self._run(count, t_start)
            finally:
                self._sampling.set()
                self.cluster.shutdown()
        finally:
            self.zk.stop()

    def _run(self, count: int, t_start: float) -> Result:
        s, cluster = self.s, self.cluster
        cluster.submit(chaos_topology(self.out, count, s.rate))
        self._wait(lambda: len(self._acked_times()) >= s.rate, 120, "the first second of acks")
        sampler = threading.Thread(target=self._sample, daemon=True)
        sampler.start()
        time.sleep(s.warmup)
        before = steady_rate(self._acked_times(), time.time())
        self.say(f"steady: {before:.0f} acks/s (target {s.rate:g}); {count} ids")
        for kind in s.faults:
            getattr(self, f"_fault_{kind}")()
        load_end = time.time() + s.settle
        time.sleep(s.settle)
        self.say(f"faults done; waiting up to {s.drain:g}s for every id to be acked")
        deadline = time.monotonic() + s.drain
        while time.monotonic() < deadline and len(read_records(self.out)[1]) < count:
            time.sleep(1)
        times, acked, deliveries = read_records(self.out)
        rss = self._rss_figures()
        self._sampling.set()
        ends = [f.at for f in self.faults[1:]] + [load_end]
        for fault, until in zip(self.faults, ends):
            fault.recovery_s = recovery_time(times, fault.at, before, until)
        recovered = [f.recovery_s for f in self.faults if f.recovery_s is not None]
        delivered = set(deliveries)
        return Result(
            settings=asdict(self.s) | {"faults": list(s.faults)},
            count=count,
            acked=len(acked & set(range(count))),
            lost=len(set(range(count)) - acked),
            acked_undelivered=len(acked - delivered),
            deliveries=len(deliveries),
            duplicates=len(deliveries) - len(delivered),
            steady_rate=round(before, 1),
            faults=[{"kind": f.kind, "at_s": round(f.at - t_start, 1), "detail": f.detail,
                     "recovery_s": f.recovery_s} for f in self.faults],
            recovery_p50_s=percentile_50(recovered),
            recovery_max_s=max(recovered) if len(recovered) == len(self.faults) and recovered else None,
            unrecovered=len(self.faults) - len(recovered),
            worker_restarts=len(cluster.crashes),
            rss_mb=rss,
            elapsed_s=round(time.time() - t_start, 1),
        )

    # -- faults --------------------------------------------------------------------------------
    def _record(self, kind: str, detail: str) -> None:
        self.faults.append(Fault(kind, time.time(), detail))
        self.say(f"{time.strftime('%H:%M:%S')} {kind}: {detail}")

    def _fault_kill(self) -> None:
        for _ in range(self.s.kills):
            pids = self.cluster.worker_pids(NAME)
            live = sorted((slot.key(), pid) for slot, pid in pids.items())
            if live:
                key, pid = self.rng.choice(live)
                try:
                    os.kill(pid, signal.SIGKILL)
                    self._record("kill", f"SIGKILL worker {key} (pid {pid})")
                except ProcessLookupError:
                    pass
            time.sleep(self.s.kill_every)

    def _fault_zookeeper(self) -> None:
        self.zk.stop(keep_data=True)
        self._record("zookeeper", f"ZooKeeper stopped for {self.s.zk_outage:g}s, then started on its data")
        time.sleep(self.s.zk_outage)
        self.zk.start()
        time.sleep(self.s.settle)

    def _fault_nimbus(self) -> None:
        cluster = self.cluster
        wait = 2.0
        cluster.nimbus.rebalance(NAME, num_workers=3, wait_secs=wait)
        time.sleep(0.5)
        cluster.nimbus.stop()
        self._record("nimbus", f"rebalance 2 -> 3 workers ({wait:g}s wait); nimbus stopped 0.5s into it, "
                               f"a new one started {wait:g}s later")
        time.sleep(wait)
        cluster.nimbus = Nimbus(cluster.state, timeouts=cluster.timeouts, monitor_freq_secs=cluster.monitor_freq_secs)
        cluster.nimbus.start()
        time.sleep(self.s.settle - wait)

    def _fault_node(self) -> None:
        nodes = sorted({slot.node for slot in self.cluster.worker_pids(NAME)})
        node = self.rng.choice(nodes)
        self.cluster.fail_node(node)
        self._record("node", f"{node} failed (its workers killed, its supervisor gone)")
        time.sleep(self.s.settle)

    # -- helpers -------------------------------------------------------------------------------
    def _acked_times(self) -> list[float]:
        return read_records(self.out)[0] if self.out.exists() else []

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.5)

    def _sample(self) -> None:
        while not self._sampling.wait(1.0):
            for pid in self.cluster.worker_pids(NAME).values():
                mb = rss_mb(pid)
                if mb is not None:
                    self.rss.setdefault(pid, []).append(mb)

    def _rss_figures(self) -> dict[str, Any]:
        alive = self.cluster.worker_pids(NAME)
        workers = {
            # "first": 5 s into the worker's life (a sample at exec time would show the bare
            # interpreter), "last": at the end of the run; "samples": seconds sampled
            slot.key(): {"first": self.rss[pid][min(5, len(self.rss[pid]) - 1)], "last": self.rss[pid][-1],
                         "samples": len(self.rss[pid])}
            for slot, pid in alive.items() if self.rss.get(pid)
        }
        return {
            "workers_alive_at_end": workers,
            "cluster_process": rss_mb(os.getpid()),
            "zookeeper": rss_mb(self.zk.pid) if self.zk.pid else None,
        }


def run(settings: Settings, workdir: Path | None = None, say: Callable[[str], None] = print) -> Result:
    if workdir is not None:
        return Chaos(settings, workdir, say).run()
    with tempfile.TemporaryDirectory(prefix="squall-chaos-") as tmp:
        return Chaos(settings, Path(tmp), say).run()


def report(result: Result) -> str:
    lines = [
        f"ids {result.count}: acked {result.acked}, lost {result.lost}, acked but never delivered "
        f"{result.acked_undelivered}; deliveries {result.deliveries}, duplicates {result.duplicates}",
        f"steady rate before the faults: {result.steady_rate:g} acks/s; worker restarts: {result.worker_restarts}",
        "recovery (fault -> ack rate back above 90%):",
    ]
    for f in result.faults:
        rec = "not within the interval" if f["recovery_s"] is None else f"{f['recovery_s']:.1f} s"
        lines.append(f"  {f['at_s']:>6.1f}s  {f['kind']:<9} {rec:>24}   {f['detail']}")
    p50 = "-" if result.recovery_p50_s is None else f"{result.recovery_p50_s:.1f} s"
    mx = "-" if result.recovery_max_s is None else f"{result.recovery_max_s:.1f} s"
    lines.append(f"recovery p50 {p50}, max {mx}, unrecovered {result.unrecovered} of {len(result.faults)}")
    lines.append(f"rss (MB): {json.dumps(result.rss_mb)}")
    lines.append(f"elapsed {result.elapsed_s:g} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=Settings.rate, help="ids per second (default %(default)s)")
    p.add_argument("--kills", type=int, default=Settings.kills, help="worker kills (default %(default)s)")
    p.add_argument("--kill-every", type=float, default=Settings.kill_every)
    p.add_argument("--soak-minutes", type=float, help="kill -9 every --kill-every seconds for this long")
    p.add_argument("--zk-outage", type=float, default=Settings.zk_outage)
    p.add_argument("--drain", type=float, default=Settings.drain)
    p.add_argument("--seed", type=int, default=Settings.seed)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--workdir", type=Path, help="keep the records and logs here (default: a temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kills = args.kills if args.soak_minutes is None else max(1, int(args.soak_minutes * 60 / args.kill_every))
    settings = Settings(rate=args.rate, kills=kills, kill_every=args.kill_every, zk_outage=args.zk_outage,
                        drain=args.drain, seed=args.seed)
    result = run(settings, args.workdir)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0 if result.lost == 0 and result.acked_undelivered == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
