"""The sliding-window word count's window in one process, CPU per word.

    .venv/bin/python bench/window_burst.py [--words-per-sec 120000] [--seconds 8]
    .venv/bin/python bench/window_burst.py --held 100000

The bench's `SlidingWordCount` (bench/topologies/windowed.py) in Storm's windowed executor over
the worker's real collector (a real, unstarted executor with one route and one acker), its
tuples handed to the compiled per-tuple input (`executor.WindowFeed`) as `BoltExecutor.process`
hands them: 6-word sentences, each tuple with a fresh values list, word and anchors dict, as a
decoded frame gives them; a 2 s window sliding every 1 s on an injected clock; the window trees
complete at once. Prints the CPU per word of adding the tuples and of the bursts the windows
fire (the bolt's counting, the expiry acks, freeing the expired tuples). The figures depend on
the machine's caches and load: compare checkouts alternately in one sitting.

`--held N` counts instead what the window keeps per tuple: N tuples fed as above (the executor's
per-batch feed, batches of 100, settled), no window fired; prints the allocator's blocks
(`sys.getallocatedblocks`) and the collector's objects (`gc.get_objects`) gained per tuple held,
with fresh words (as decoded) and with one shared object per word. Deterministic.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "topologies"))

from squall.components import Tuple  # noqa: E402
from squall.windowing import WindowConfig, WindowedBoltExecutor  # noqa: E402
from squall.worker.anchoring import BoltCollector  # noqa: E402
from squall.worker.bolt import WindowFeed  # noqa: E402
from squall.worker.executor import SETTLE_AT, Executor  # noqa: E402
from windowed import SlidingWordCount  # noqa: E402

WORDS = ("the cow jumped over the moon an apple a day keeps the doctor away four score and "
         "seven years ago").split()
BOLT, NEXT, ACKER = 1, 9, 100


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def executor() -> Any:
    """A real, unstarted executor: one route (task 1 -> 9) and one acker."""
    ex: Any = Executor(None, (BOLT, BOLT), "bolt")  # type: ignore[arg-type]
    ex.routes = {BOLT: {"default": [lambda values: [NEXT]]}, NEXT: {}}
    ex.direct = {BOLT: {"default": frozenset({NEXT})}}
    ex.task_dest = {NEXT: "next-executor"}
    ex.acker_tasks = (ACKER,)
    ex.n_ackers = 1
    ex.auto_anchor = None
    return ex


def held(n: int, fresh: bool) -> tuple[float, float]:
    """Blocks and collected objects gained per tuple the window holds (see the module's doc)."""
    clock = Clock()
    ex = executor()
    cfg = WindowConfig.from_spec({"windowLength": "2s", "slidingInterval": "1s"})
    w = WindowedBoltExecutor(SlidingWordCount(), cfg, [("split", "default")], clock, 30.0)
    w.prepare({}, None, BoltCollector(ex, BOLT))  # type: ignore[arg-type]
    feed = WindowFeed(w, per_batch=True)
    rng = random.Random(1)
    fields = {"word": 0}
    root = 0
    gc.collect()
    gc.disable()
    try:
        blocks, objects = sys.getallocatedblocks(), len(gc.get_objects())
        for i in range(n // 100):
            items: list[list[Any]] = []
            for j in range(100):
                if j % 6 == 0:
                    root = rng.getrandbits(62)
                word = WORDS[(i * 100 + j) % len(WORDS)]
                if fresh:
                    word = word.encode().decode()
                items.append([BOLT, 7, "default", [word], {root: rng.getrandbits(62)}])
            for _dest, src, stream, values, anchors in items:
                feed.add(Tuple(values, src, "split", stream, fields, anchors))
            del items
            feed.end_batch()
            feed.settle()
        assert w.held() == n // 100 * 100
        return ((sys.getallocatedblocks() - blocks) / w.held(), (len(gc.get_objects()) - objects) / w.held())
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--words-per-sec", type=int, default=120_000)
    ap.add_argument("--seconds", type=int, default=8, help="window slides (seconds of the clock)")
    ap.add_argument("--held", type=int, default=0, metavar="N", help="count what N held tuples weigh instead")
    args = ap.parse_args()
    if args.held:
        for fresh in (True, False):
            b, o = held(args.held, fresh)
            print(f"{'fresh words' if fresh else 'shared words'}: {b:.3f} allocated blocks, "
                  f"{o:.3f} collected objects per tuple held")
        return
    rate, secs, batch = args.words_per_sec, args.seconds, 100
    clock = Clock()
    ex = executor()
    cfg = WindowConfig.from_spec({"windowLength": "2s", "slidingInterval": "1s"})
    w = WindowedBoltExecutor(SlidingWordCount(), cfg, [("split", "default")], clock, 30.0)
    w.prepare({}, None, BoltCollector(ex, BOLT))  # type: ignore[arg-type]
    feed = WindowFeed(w)
    gc.set_threshold(6 * 3 * rate, 50, 1000)  # the worker's policy for windows (gcpolicy.py)
    rng = random.Random(1)
    fields = {"word": 0}
    t_add = t_fire = 0.0
    root = 0
    for sec in range(secs):
        for i in range(rate // batch):
            clock.now = 100.0 + sec + i * batch / rate
            items = []
            for j in range(batch):
                if j % 6 == 0:
                    root = rng.getrandbits(62)
                word = WORDS[(i * batch + j) % len(WORDS)].encode().decode()  # a fresh str
                items.append([BOLT, 7, "default", [word], {root: rng.getrandbits(62)}])
            c0 = time.process_time()
            for _dest, src, stream, values, anchors in items:
                tup = Tuple(values, src, "split", stream, fields, anchors)
                if not feed.add(tup):
                    w.execute(tup)
            if len(feed.pn) >= SETTLE_AT:
                feed.settle()  # as `BoltExecutor.process` does after a batch
            t_add += time.process_time() - c0
            del items
            ex.bufs.clear()
            ex.out.acks.clear()
            ex.out.control = []
        clock.now = 100.0 + sec + 1.0
        c0 = time.process_time()
        due = w.seconds_to_next()
        if due is not None and due <= 0:
            w.on_timer()
        t_fire += time.process_time() - c0
        ex.bufs.clear()
        ex.out.acks.clear()
        ex.out.control = []
        assert w.rooted is not None
        for tree in list(w.rooted.trees):
            w.tree_done(tree, True)  # the window's outputs acked downstream
        ex.out.acks.clear()
    n = rate * secs
    print(f"add {1e9 * t_add / n:.0f} ns/word, window bursts {1e9 * t_fire / n:.0f} ns/word "
          f"({w.held()} tuples held at the end)")


if __name__ == "__main__":
    main()
