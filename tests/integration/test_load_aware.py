"""The load-aware shuffle sees a busy Python worker: real worker processes on the
session's ZooKeeper, talking zmq on loopback, two workers on one node.

A worker is one Python process, one GIL: a spout that emits as fast as it can saturates its
worker while the shuffle's target in that worker never fills its inbox. Storm's load (queue
population) keeps every tuple local then; Squall's also counts each worker's busy fraction
(squall.worker.load), so the spout's worker hands a share to the other worker. A rate-limited
spout leaves its worker mostly idle, and every tuple stays local, as in Storm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import id_pipeline, logs_tail, stop_topology, wait_for, wait_running

from squall.models.cluster import WorkerSlot
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration

WARMUP_SECS = 6.0
WINDOW_SECS = 6.0


def executed(cluster: LocalCluster, topo: str) -> dict[WorkerSlot, dict[str, int]]:
    """Slot -> component -> tuples executed (spouts: acked), from the workers' heartbeats."""
    out: dict[WorkerSlot, dict[str, int]] = {}
    for slot, beat in cluster.state.get_worker_heartbeats(topo).items():
        comps = out.setdefault(slot, {})
        for ex in beat.executors.values():
            comps[ex.component] = comps.get(ex.component, 0) + max(ex.executed, ex.acked)
    return out


def pass_share_elsewhere(cluster: LocalCluster, name: str) -> tuple[float, int]:
    """Over a window after a warm-up: the share of the middle bolt's tuples executed in the
    worker without the spout, and how many it executed in all."""
    wait_for(lambda: sum(c.get("ids", 0) for c in executed(cluster, name).values()) >= 100, 60,
             "the first acks", cluster)
    time.sleep(WARMUP_SECS)
    a = executed(cluster, name)
    time.sleep(WINDOW_SECS)
    b = executed(cluster, name)
    spout_slots = {s for s, comps in b.items() if "ids" in comps}
    assert len(spout_slots) == 1 and len(b) == 2, b
    assert all("pass" in comps for comps in b.values()), f"a middle executor in each worker: {b}"
    done = {s: b[s]["pass"] - a.get(s, {}).get("pass", 0) for s in b}
    total = sum(done.values())
    elsewhere = sum(n for s, n in done.items() if s not in spout_slots)
    return elsewhere / max(1, total), total


@pytest.mark.parametrize("rate, spreads", [(0, True), (200, False)], ids=["saturated-spout", "rate-limited-spout"])
def test_a_busy_spout_worker_spreads_and_an_idle_one_keeps_tuples_local(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path, rate: float, spreads: bool
) -> None:
    name = f"load-aware-{'busy' if spreads else 'idle'}"
    topo = id_pipeline(name, tmp_path / "out", 0, rate=rate, timeout=30)
    cluster = make_cluster(nodes=1, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    share, total = pass_share_elsewhere(cluster, name)
    logs = "\n".join(ln for text in cluster.worker_logs().values() for ln in text.splitlines()
                     if "load-aware shuffle of" in ln)
    print(f"rate {rate or 'unlimited'}: {total} tuples in {WINDOW_SECS:g}s, "
          f"{share:.0%} in the worker without the spout; scope changes:\n{logs}")
    if spreads:
        assert share >= 0.1, f"{share:.2%} of {total} elsewhere\n{logs}" + logs_tail(cluster)
    else:
        assert total >= 0.5 * rate * WINDOW_SECS, total
        assert share == 0.0, f"{share:.2%} of {total} elsewhere\n{logs}" + logs_tail(cluster)
    stop_topology(cluster, name)
    assert not cluster.crashes, logs_tail(cluster)
