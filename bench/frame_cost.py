"""What one data frame between two workers costs beyond its tuples, in CPU of one process.

    .venv/bin/python bench/frame_cost.py

Pack (`wire.pack_data`), a PUSH send over loopback TCP (SNDHWM 32, as `transport.peer_socket`),
both zmq I/O threads, a PULL recv and `wire.unpack_data`, in lockstep: every frame finds both
ends idle and wakes them, as at the few hundred frames per second per executor that a word count
sends. CPU of the whole process (all its threads) per frame, best of 7 rounds of 400 frames, for
frames of 1, 16, 64 and 256 word tuples: the fixed cost per frame is the first figure minus one
tuple's share. The receiver's dispatch to inboxes and the executor's wake come on top.
"""

from __future__ import annotations

import random
import time
from typing import Any

import zmq

from squall import wire

WORDS = "the cow jumped over the moon an apple a day keeps doctor away".split()


def main() -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 32)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    rng = random.Random(1)

    def item() -> list[Any]:
        return [3, 2, "default", [rng.choice(WORDS)], {rng.getrandbits(62): rng.getrandbits(62)}]

    push.send(b"x")
    pull.recv()
    try:
        for n in (1, 16, 64, 256):
            items = [item() for _ in range(n)]
            best = float("inf")
            for _ in range(7):
                t0 = time.process_time()
                for _ in range(400):
                    frame, _bad = wire.pack_data(items)
                    assert frame is not None
                    push.send(frame, 0, copy=False)
                    wire.unpack_data(pull.recv(copy=True))
                best = min(best, (time.process_time() - t0) / 400)
            print(f"{n:4d} tuples/frame: {best * 1e6:7.1f} us CPU per frame, {best * 1e6 / n:6.2f} us per tuple")
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()


if __name__ == "__main__":
    main()
