"""The sealed transport (CURVE) and the peer check of backpressure signals, with real worker
processes, a real ZooKeeper and zmq on loopback (docs/reliability.md, "Sealed transport").

A sealed topology's workers refuse every peer without the topology's key: a plain peer and a
CURVE peer with its own key both fail the handshake, so none of their frames reaches a receive
loop (the workers count no bad frame although only malformed frames are sent), and each refused
handshake is counted in the heartbeats (`refused`); the topology's own traffic is acked in full.
Without CURVE, a backpressure signal from a host that runs none of the assignment's workers is
refused and counted instead of throttling the worker.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
import zmq
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
from squall.plan import build_plan
from squall.worker.security import PUBLIC_FILE, SECRET_FILE, CurveKeys, read_keys
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration


# a source address on loopback that runs no worker (the local cluster's workers are on 127.0.0.1)
STRANGER = "127.0.0.9"


def beats(cluster: LocalCluster, name: str) -> dict[str, tuple[int, int]]:
    """Per worker: (bad frames, refused) from its latest heartbeat."""
    return {slot.key(): (b.bad_frames, b.refused) for slot, b in cluster.state.get_worker_heartbeats(name).items()}


def test_a_peer_without_the_key_gets_nothing_through(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    n = 1500
    out = tmp_path / "out"
    topo = id_pipeline("sealed", out, n, rate=250)
    cluster = make_cluster(nodes=2, slots=1, curve=True)
    cluster.submit(topo)
    keys_dir = cluster.curve_keys_dir(topo.name)
    assert stat.S_IMODE(keys_dir.stat().st_mode) == 0o700
    for name in (PUBLIC_FILE, SECRET_FILE):
        assert stat.S_IMODE((keys_dir / name).stat().st_mode) == 0o600
    keys = read_keys(keys_dir)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 100, 60, "the first acks", cluster)
    assert set(beats(cluster, topo.name).values()) == {(0, 0)}

    # frames a worker would count as bad, and well-shaped acker traffic (a fail of every
    # possible tree would make the spout replay), from peers that do not hold the secret key
    plan = build_plan(topo, {})
    garbage = b"\xc1 not msgpack"
    fails = msgpack.packb([[wire.FAIL, t, r, 0, 0] for t in plan.acker_tasks for r in range(50)])
    stranger = CurveKeys.generate()
    ctx = zmq.Context()
    socks = []
    try:
        for ep in cluster.state.get_endpoints(topo.name).values():
            for port in (ep.port, ep.control_port):
                for curve in (None, stranger):
                    sock = ctx.socket(zmq.PUSH)
                    sock.setsockopt(zmq.LINGER, 0)
                    if curve is not None:  # knows the topology's public key, not its secret key
                        sock.curve_secretkey = curve.secret
                        sock.curve_publickey = curve.public
                        sock.curve_serverkey = keys.public
                    sock.connect(f"tcp://{ep.host}:{port}")
                    socks.append(sock)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for sock in socks:
                for frame in (garbage, fails):
                    try:
                        sock.send(frame, zmq.NOBLOCK)
                    except zmq.Again:
                        pass  # no connection took it: the handshake was refused
            time.sleep(0.05)
    finally:
        for sock in socks:
            sock.close(0)
        ctx.term()

    # each worker refused handshakes on both its ports, and not one frame reached its decoder
    wait_for(lambda: all(r >= 4 for _b, r in beats(cluster, topo.name).values()), 30,
             f"refused handshakes in every worker's heartbeat (got {beats(cluster, topo.name)})", cluster)
    assert {b for b, _r in beats(cluster, topo.name).values()} == {0}, beats(cluster, topo.name)
    # the topology's own traffic, sealed, is acked in full, with no replay
    wait_spout_done(out, cluster, 120)
    assert totals(cluster, topo.name)["ids"]["failed"] == 0, logs_tail(cluster)
    print(f"refused handshakes, bad frames per worker: {beats(cluster, topo.name)}")
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    assert spout["failed"] == 0
    assert not cluster.crashes, logs_tail(cluster)

    # resubmitted: a new key pair, and the workers run on it
    again = id_pipeline("sealed", tmp_path / "again", 200, rate=250)
    cluster.submit(again)
    assert read_keys(keys_dir) != keys
    wait_running(cluster, again)
    wait_spout_done(tmp_path / "again", cluster, 120)
    stop_topology(cluster, again.name)
    assert not cluster.crashes, logs_tail(cluster)


def test_backpressure_from_a_stranger_is_refused(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    """Without CURVE: fake "task is backpressured" signals for every bolt task, sent to every
    worker's control port from a host that runs no worker, neither hold the spout's tuples nor
    slow the acks; each is counted as refused."""
    rate = 300
    out = tmp_path / "out"
    topo = id_pipeline("throttled", out, 0, rate=rate)  # endless
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 200, 60, "the first acks", cluster)
    plan = build_plan(topo, {})
    bolt_tasks = [t for c in ("pass", "sink") for t in plan.component_tasks[c]]
    signal = msgpack.packb([[wire.BACKPRESSURE, t, 1, 0, 0] for t in bolt_tasks])
    ctx = zmq.Context()
    socks = []
    sent = 0
    seconds = 4.0
    try:
        for ep in cluster.state.get_endpoints(topo.name).values():
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 5000)
            sock.connect(f"tcp://{STRANGER}:0;{ep.host}:{ep.control_port}")  # from the stranger's address
            socks.append(sock)
        acked_before = totals(cluster, topo.name)["ids"]["acked"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for sock in socks:
                sock.send(signal)
                sent += len(bolt_tasks)
            time.sleep(0.1)  # well inside the signal's 2 s lifetime
        acked = totals(cluster, topo.name)["ids"]["acked"] - acked_before
    finally:
        for sock in socks:
            sock.close()
        ctx.term()
    # heartbeats lag by up to a second or two: at least half the rate over the window
    print(f"acked during {seconds:g}s of fake backpressure: {acked} (rate {rate}/s); signals sent: {sent}")
    assert acked >= rate * seconds / 2, f"acked only {acked} while strangers signalled backpressure" + logs_tail(cluster)
    wait_for(lambda: sum(r for _b, r in beats(cluster, topo.name).values()) == sent, 30,
             f"{sent} refused signals counted (got {beats(cluster, topo.name)})", cluster)
    assert not cluster.crashes, logs_tail(cluster)
