"""Fuzzing a live worker's ports: random and mutated frames pushed at the data and control
ports of real worker processes (real ZooKeeper, zmq on loopback) while a topology runs at a steady
rate. No worker dies, every bad frame is counted (the workers' heartbeats carry the count), and
every message id is still acked (docs/reliability.md, "Hostile input"). And garbage costs a
worker no memory that it keeps: its resident size stays bounded while thousands of garbage
frames and some very large ones arrive, and comes back near where it was.

Each frame is classified here with the decoder and shape checks the worker applies, so the
expected count is exact: a frame is bad when it does not decode, or when any of its items has
the wrong shape. Frames that decode to well-shaped items (a mutation can produce them) are
legitimate traffic as far as the worker can tell: tuples for tasks that exist are delivered,
the rest dropped; none of them may crash anything either.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from kazoo.exceptions import ConnectionLoss
from helpers import (  # the integration tests' helpers (same directory)
    id_pipeline,
    logs_tail,
    read_spout,
    stop_topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
)

from squall import wire
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration


FUZZ_SECONDS = 4.0
SEED = 20261123


def bad_data(frame: bytes) -> bool:
    try:
        items = wire.unpack_data(frame)
    except wire.WireError:
        return True
    return not all(wire.check_tuple(it) for it in items)


def bad_control(frame: bytes) -> bool:
    try:
        items = wire.unpack_control(frame)
    except wire.WireError:
        return True
    return not all(wire.check_control(it) and 0 <= it[0] <= wire.BACKPRESSURE for it in items)


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        i = rng.randrange(len(data)) if data else 0
        if op == 0 and data:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data.insert(i, rng.randrange(256))
        elif op == 2 and data:
            del data[i]
        else:
            data[i:i] = data[rng.randrange(len(data) or 1):][: rng.randint(1, 8)]  # repeat a run
    return bytes(data)


def frame_source(topo: Topology, rng: random.Random) -> tuple[Callable[[], bytes], Callable[[], bytes]]:
    """(next data frame, next control frame): a third random bytes, the rest mutations of
    frames shaped like the topology's own traffic."""
    plan = build_plan(topo, {})
    tasks = [t for ts in plan.component_tasks.values() for t in ts]
    ackers = list(plan.acker_tasks)

    def tuples() -> list[Any]:
        return [[rng.choice(tasks), rng.choice(tasks), "default", [rng.randrange(10**6)],
                 {rng.getrandbits(62): rng.getrandbits(62)} if rng.random() < 0.7 else None]
                for _ in range(rng.randint(1, 5))]

    def controls() -> list[Any]:
        return [[rng.randrange(5), rng.choice(ackers + tasks), rng.getrandbits(62),
                 rng.getrandbits(62), rng.choice(tasks)] for _ in range(rng.randint(1, 5))]

    def data() -> bytes:
        if rng.random() < 1 / 3:
            return rng.randbytes(rng.randrange(64))
        return mutate(rng, msgpack.packb(tuples()))

    def control() -> bytes:
        if rng.random() < 1 / 3:
            return rng.randbytes(rng.randrange(64))
        return mutate(rng, msgpack.packb(controls()))

    return data, control


def fuzz(cluster: LocalCluster, topo: Topology, seconds: float) -> tuple[dict[str, int], int]:
    """Push frames at every worker's data and control ports for `seconds`. Returns the bad
    frames each worker should have counted (by slot key) and the number of frames sent."""
    rng = random.Random(SEED)
    next_data, next_control = frame_source(topo, rng)
    endpoints = cluster.state.get_endpoints(topo.name)
    ctx = zmq.Context()
    expected = {slot.key(): 0 for slot in endpoints}
    sent = 0
    try:
        socks = []
        for slot, ep in endpoints.items():
            for port, is_bad, make in ((ep.port, bad_data, next_data),
                                       (ep.control_port, bad_control, next_control)):
                sock = ctx.socket(zmq.PUSH)
                sock.setsockopt(zmq.LINGER, 10_000)
                sock.setsockopt(zmq.SNDHWM, 1000)
                sock.connect(f"tcp://{ep.host}:{port}")
                socks.append((slot.key(), sock, is_bad, make))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            # this loop runs in the process that hosts the local cluster's nimbus and ZooKeeper
            # client: give their threads the GIL each round (an attacker is another process)
            time.sleep(0)
            for key, sock, is_bad, make in socks:
                frame = make()
                if not sock.poll(1000, zmq.POLLOUT):
                    continue  # the worker is not reading this port right now (backpressure)
                sock.send(frame)
                sent += 1
                expected[key] += is_bad(frame)
        for _key, sock, _is_bad, _make in socks:
            sock.close()  # lingers until the frames are handed over
    finally:
        ctx.term()
    return expected, sent


def bad_frames(cluster: LocalCluster, name: str) -> dict[str, int] | None:
    """The bad-frame counts in the workers' heartbeats; None while the test's own ZooKeeper
    client is reconnecting: the fuzz loop above holds this process's GIL for seconds, and its
    client can miss a ping and drop its connection (kazoo's ConnectionLoss) while the cluster
    itself is fine. The callers poll, so they read again once it is back."""
    try:
        beats = cluster.state.get_worker_heartbeats(name)
    except ConnectionLoss:
        return None
    return {slot.key(): beat.bad_frames for slot, beat in beats.items()}


def test_fuzzed_ports_count_every_bad_frame_and_keep_acking(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    n = 2000
    out = tmp_path / "out"
    topo = id_pipeline("fuzzed", out, n, rate=250)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 100, 60, "the first acks", cluster)
    pids = cluster.worker_pids(topo.name)
    before = wait_for(lambda: bad_frames(cluster, topo.name), 30, "the workers' heartbeats", cluster)
    assert set(before.values()) == {0}, before

    acked_before = totals(cluster, topo.name)["ids"]["acked"]
    expected, sent = fuzz(cluster, topo, FUZZ_SECONDS)
    assert sum(expected.values()) > sent // 2, (expected, sent)  # most frames are bad ones

    # every bad frame counted: the heartbeats catch up with what was sent
    wait_for(lambda: bad_frames(cluster, topo.name) == expected, 60,
             f"bad-frame counts {expected} (got {bad_frames(cluster, topo.name)})", cluster)
    # the topology kept acking through it, and still does
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > acked_before + 100, 60,
             "acks after the fuzzing", cluster)
    wait_spout_done(out, cluster, 120)
    assert cluster.worker_pids(topo.name) == pids, "a worker died: " + logs_tail(cluster)
    assert not cluster.crashes, logs_tail(cluster)
    print(f"fuzzed {sent} frames in {FUZZ_SECONDS:g}s; bad frames counted per worker: {expected}")
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert not cluster.crashes


# -- memory under garbage frames ------------------------------------------------------------------

SMALL_FRAMES = 5500  # per port: random, truncated and mis-shaped frames of at most 300 bytes
OVERSIZED = (100 << 20, 3)  # frames over the maximum frame size (wire.MAX_FRAME_BYTES): refused by zmq
LARGE = (12 << 20, 2)  # frames of random bytes under the maximum: taken, refused by the decoder
PEAK_MB = 100  # what the worker may grow by while it takes them
SETTLED_MB = 25  # and what it may keep once they are dropped


def rss_mb(pid: int) -> float:
    """The resident size of process `pid` (VmRSS in /proc/PID/status), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


class PeakRss:
    """The highest resident size of a process, sampled every 20 ms on a thread of its own."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def garbage_frames(rng: random.Random, n: int) -> list[bytes]:
    """`n` frames a worker must refuse, of at most 300 bytes: random bytes, frames of well-shaped
    tuples cut short, msgpack values that are not lists of tuples, and array headers that claim
    more items than follow."""
    good = msgpack.packb([[1, 1, "default", [rng.randrange(10**6)], {1: 2}] for _ in range(6)])
    kinds: list[Callable[[], bytes]] = [
        lambda: rng.randbytes(rng.randrange(1, 301)),
        lambda: good[: rng.randrange(1, len(good))],
        lambda: msgpack.packb({"k": rng.randbytes(rng.randrange(200))}),
        lambda: msgpack.packb([[rng.random(), "x", None]] * rng.randint(1, 9)),
        lambda: b"\xdd" + rng.randbytes(4) + rng.randbytes(rng.randrange(290)),
        lambda: mutate(rng, good)[:300],
    ]
    return [rng.choice(kinds)() for _ in range(n)]


def push(sock: zmq.Socket[bytes], frames: list[bytes]) -> int:
    sent = 0
    for frame in frames:
        if sock.poll(5000, zmq.POLLOUT):
            sock.send(frame, copy=len(frame) < 1 << 16)
            sent += 1
    return sent


def test_garbage_frames_cost_memory_that_is_given_back(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    topo = id_pipeline("garbage", out, 0, workers=1, rate=200)  # endless
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 100, 60, "the first acks", cluster)
    [(slot, pid)] = cluster.worker_pids(topo.name).items()
    [ep] = cluster.state.get_endpoints(topo.name).values()
    rng = random.Random(SEED)
    ctx = zmq.Context()
    try:
        socks = []
        for port in (ep.port, ep.control_port):
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 100)
            sock.setsockopt(zmq.LINGER, 10_000)
            sock.connect(f"tcp://{ep.host}:{port}")
            socks.append(sock)
        # a first round, so that what a worker allocates once (its first log lines, zmq's
        # buffers, the allocator's pools) is in the baseline
        for sock in socks:
            push(sock, garbage_frames(rng, 300))
        time.sleep(2)
        baseline = rss_mb(pid)
        acked_before = totals(cluster, topo.name)["ids"]["acked"]
        t0 = time.monotonic()
        with PeakRss(pid) as peak:
            sent = 0
            for i in range(10):
                for sock in socks:
                    sent += push(sock, garbage_frames(rng, SMALL_FRAMES // 10))
                if i < OVERSIZED[1]:
                    sent += push(socks[0], [rng.randbytes(OVERSIZED[0])])
                if i < LARGE[1]:
                    sent += push(socks[i % 2], [rng.randbytes(LARGE[0])])
            for sock in socks:
                sock.close()  # lingers until the frames are handed over
            # given back: within a few seconds, without anything else happening in the worker
            settled = wait_for(lambda: rss_mb(pid) <= baseline + SETTLED_MB or None, 30,
                               f"the worker's resident size to come back near {baseline:.0f} MB "
                               f"(now {rss_mb(pid):.0f} MB)", cluster, interval=0.5)
        took = time.monotonic() - t0
    finally:
        ctx.term()
    assert settled
    now = rss_mb(pid)
    print(f"{sent} garbage frames in {took:.1f}s: worker resident {baseline:.0f} MB before, peak "
          f"{peak.peak:.0f} MB, {now:.0f} MB after")
    assert peak.peak <= baseline + PEAK_MB, (baseline, peak.peak)
    # counted (those queued behind an oversized frame went with its connection)
    wait_for(lambda: (bad_frames(cluster, topo.name) or {}).get(slot.key(), 0) >= SMALL_FRAMES, 30,
             f"{SMALL_FRAMES} bad frames counted (got {bad_frames(cluster, topo.name)})", cluster)
    # it keeps processing good tuples
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] > acked_before + 200, 60,
             "acks after the garbage", cluster)
    assert cluster.worker_pids(topo.name) == {slot: pid}, "the worker died: " + logs_tail(cluster)
    assert not cluster.crashes, logs_tail(cluster)
    stop_topology(cluster, topo.name)
