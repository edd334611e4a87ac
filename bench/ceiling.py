"""Bench (a): the ceiling. Two bare Python processes pass msgpack batches over pyzmq, one way,
with XOR acks flowing back on a second socket: what Squall's transport could reach with no
framework at all. Run by bench/run.py; `python bench/ceiling.py --seconds 5` alone prints JSON."""

from __future__ import annotations

import argparse
import json
import os
import multiprocessing as mp
import random
import time

import msgpack
import zmq

TICK = os.sysconf("SC_CLK_TCK")


def cpu_secs(pid: int) -> float:
    """User + system CPU seconds a process has used (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK

BATCH = 256
WINDOW = 20000  # tuples in flight, like maxSpoutPending


def sink(ports: "mp.Queue[int]", ack_port: int, ack: bool) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    ports.put(pull.bind_to_random_port("tcp://127.0.0.1"))
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{ack_port}")
    while True:
        frame = pull.recv()
        if frame == b"stop":
            break
        items = msgpack.unpackb(frame, strict_map_key=False)
        if ack:
            acks = []
            for _dest, _src, _stream, _values, anchors in items:
                for root, edge in anchors.items():
                    acks.append([1, 1, root, edge, 0])
            push.send(msgpack.packb(acks))
    push.close(0)
    pull.close(0)
    ctx.term()


def run(seconds: float, ack: bool) -> dict[str, float]:
    ctx = zmq.Context()
    acks_in = ctx.socket(zmq.PULL)
    ack_port = acks_in.bind_to_random_port("tcp://127.0.0.1")
    ports: mp.Queue[int] = mp.Queue()
    proc = mp.Process(target=sink, args=(ports, ack_port, ack), daemon=True)
    proc.start()
    data_port = ports.get(timeout=30)
    out = ctx.socket(zmq.PUSH)
    out.setsockopt(zmq.SNDHWM, 100)
    out.connect(f"tcp://127.0.0.1:{data_port}")
    pending: dict[int, list] = {}
    lat: list[float] = []
    done = 0
    rand = random.getrandbits
    t_end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    cpu0 = {p: cpu_secs(p) for p in (os.getpid(), proc.pid)}
    sent = 0
    while True:
        now = time.perf_counter()
        if now >= t_end:
            break
        if not ack or len(pending) < WINDOW:
            batch = []
            for i in range(BATCH):
                root = rand(62)
                edge = rand(62)
                batch.append([2, 1, "default", [sent + i], {root: edge}])
                if ack:
                    pending[root] = [edge, now]
            out.send(msgpack.packb(batch))
            sent += BATCH
        if ack:
            while acks_in.poll(0 if len(pending) < WINDOW else 10):
                for _k, _d, root, val, _x in msgpack.unpackb(acks_in.recv(), strict_map_key=False):
                    entry = pending.get(root)
                    if entry is None:
                        continue
                    entry[0] ^= val
                    if entry[0] == 0:
                        del pending[root]
                        done += 1
                        if done % 16 == 0:
                            lat.append((time.perf_counter() - entry[1]) * 1000)
    elapsed = time.perf_counter() - t0
    busiest = max(cpu_secs(p) - c for p, c in cpu0.items())
    out.send(b"stop")
    proc.join(10)
    for s in (out, acks_in):
        s.close(0)
    ctx.term()
    lat.sort()
    count = done if ack else sent
    return {
        "tuples_per_sec": count / elapsed,
        # what the busiest process would sustain on a core of its own: robust to a loaded machine
        "tuples_per_cpu_sec": count / max(busiest, 1e-6),
        "p50_ms": lat[len(lat) // 2] if lat else 0.0,
        "p99_ms": lat[int(len(lat) * 0.99)] if lat else 0.0,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    args = ap.parse_args()
    print(json.dumps({"one_way": run(args.seconds, False), "acked": run(args.seconds, True)}, indent=2))
