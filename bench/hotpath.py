"""The per-tuple path of word count, replayed in one thread, in CPU seconds of this process.

    .venv/bin/python bench/hotpath.py                  # compiled hot path when built (squall._native)
    SQUALL_PURE=1 .venv/bin/python bench/hotpath.py    # the same, plain Python

Real executors and collectors (unstarted, with a stand-in for their worker): a spout emits 256
sentences with message ids (acked, shuffled to one remote task, its acker in this worker); bolts
process batches of 256 sentences (split: a BasicBolt, anchored emits, fields grouping) and the resulting words
(count: a Bolt that acks); plus wire packing and unpacking of a word batch, the acker ledger's
init and ack of 256 trees, and two paths of the worker itself on a stand-in for it (no sockets):
the receive thread's dispatch of a decoded word frame to an executor inbox, and 256 new trees
registered in a local acker, acked and their completions handed to the spout's inbox. Each
figure is the best of 9 rounds of CPU time (process time), so it holds up on a loaded machine far
better than a wall-clock rate: compare the two commands above, run one after the other. On a
busy machine even CPU time drifts; instruction counts do not:

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        .venv/bin/python bench/hotpath.py --only split --rounds 1 --calls 20

and the same with `--only none` (set-up alone) gives the instructions of 20 x 256 sentences.
"""

from __future__ import annotations

import argparse
import itertools
import random
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from squall import _native, wire
from squall.acker import AckerLedger
from squall.components import BasicBolt, Bolt, Spout, Tuple
from squall.groupings import Chooser, make_chooser
from squall.models.cluster import WorkerSlot
from squall.models.v1alpha1 import Grouping
from squall.worker import bolt as boltm, spout as spoutm
from squall.worker import acking, receive
from squall.gcpolicy import POLICY as GC_POLICY
from squall.worker.routing import Inbox
from squall.worker.transport import PeerQueues

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs", "i am at two with nature"]
ROUNDS = 9


def cpu_per_call(fn: Callable[[], None], calls: int, rounds: int = ROUNDS) -> float:
    fn()  # warm
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - t0)
    return best / calls


class Split(BasicBolt):
    def process(self, tup: Tuple) -> None:
        for w in tup.values[0].split():
            self.collector.emit([w])


class Count(Bolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.counts: dict[str, int] = {}

    def execute(self, tup: Tuple) -> None:
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1
        self.collector.ack(tup)


class Sentences(Spout):
    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.i = 0

    def next_tuple(self) -> None:
        self.i += 1
        self.collector.emit([SENTENCES[self.i % 5]], msg_id=self.i)


def main() -> None:
    # the collector's thresholds of a worker (process.main installs them): without windows a
    # young collection every 100k allocations, not CPython's default 700
    GC_POLICY.install()
    # the bolts' clock stands still: a bolt flushes in the middle of a batch after FLUSH_SECS,
    # which under valgrind (50x slower) happened a timing-dependent number of times, and whose
    # flush of remote output has no sockets here. Each call flushes once, after its batch, as a
    # bolt does after its input (`go`); process_time (the figures) is not this clock
    time.perf_counter = itertools.repeat(0.0).__next__
    peers = PeerQueues(1 << 30, 1 << 30)
    worker = SimpleNamespace(
        slot=WorkerSlot("n", 1), conf={}, remote_bp={}, data_peers=peers, routing=None,
        spec=SimpleNamespace(message_timeout_secs=30, max_spout_pending=1000),
        handle_control=lambda items, caller, trusted=True: [], init_trees=lambda inits, spill: [],
    )
    plan = SimpleNamespace(topology_id="t", task_component={1: "spout", 2: "split", 3: "count", 4: "count"})

    def bolt(cls: type, task: int, comp: str, chooser: Chooser) -> Any:
        ex = boltm.BoltExecutor(worker, plan, (task, task), comp, cls, {}, None)  # type: ignore[arg-type]
        ex._task_component = plan.task_component
        ex._fields_by_comp = {("spout", "default"): {"sentence": 0}, ("split", "default"): {"word": 0}}
        ex.routes = {task: {"default": [chooser]}}
        ex.task_dest = {3: WorkerSlot("n", 3), 4: WorkerSlot("n", 4)}  # remote: buffered, then offered
        ex.acker_tasks = (9,)
        ex.n_ackers = 1
        ex.instances[task].prepare({}, None, ex.collectors[task])
        return ex

    fields = make_chooser(Grouping.FIELDS, [3, 4], field_indexes=[0])
    assert fields is not None
    split, count = bolt(Split, 2, "split", fields), bolt(Count, 3, "count", fields)
    rng = random.Random(1)
    sentences = [[2, 1, "default", [rng.choice(SENTENCES)], {rng.getrandbits(62): rng.getrandbits(62)}]
                 for _ in range(256)]
    split.process(sentences)
    # what the split emitted: still buffered, or handed to the send queues by a mid-batch flush
    words = [it for q in peers.queues.values() for batch in q for it in batch]
    words += [it for batch in split.bufs.values() for it in batch]
    split.bufs.clear()
    peers.queues.clear()
    for it in words:
        it[0] = 3

    def run(ex: Any, batch: list[list[Any]]) -> Callable[[], None]:
        def go() -> None:
            ex.process(batch)
            # the flush after a batch: acks folded into acker messages (handed to the stand-in
            # worker); the remote output stays (no sockets) and is dropped here
            ex.flush()
            ex.bufs.clear()
            peers.queues.clear()
        return go

    # the spout: acked emits with a shuffle to one remote split task, its acker in this worker
    spout = spoutm.SpoutExecutor(worker, plan, (1, 1), "spout", Sentences, {})  # type: ignore[arg-type]
    spout.routes = {1: {"default": [make_chooser(Grouping.SHUFFLE, [2])]}}
    spout.task_dest = {2: WorkerSlot("n", 2)}
    spout.acker_tasks = (9,)
    spout.n_ackers = 1
    sc = spout.collectors[1]
    sc.acking = True
    sc._local_ackers = [0]
    spout.instances[1].open({}, None, sc)
    next_tuple = spout.instances[1].next_tuple

    def emit() -> None:
        for _ in range(256):
            next_tuple()
        spout.bufs.clear()
        spout.local_inits.clear()
        sc.pending.pending._head.clear()
        sc.pending.pending.size = 0

    frame = wire.pack_data(words)[0]
    assert frame is not None
    ledger = AckerLedger(30.0, 0.0)

    def acker() -> None:
        done: list[list[int]] = []
        inits = [(rng.getrandbits(62), 5, 1) for _ in range(256)]
        ledger.init_new(inits, done)
        ledger.apply([[wire.ACK, 9, r, x, 0] for r, x, _ in inits], done)

    # the worker's own per-tuple paths (squall.worker.receive, .acking), called on a stand-in worker state
    here = WorkerSlot("n", 1)
    count_inbox = Inbox(1 << 20)
    spout_inbox = Inbox(1 << 20)
    host = SimpleNamespace(
        routing=SimpleNamespace(task_dest={3: count_inbox, 1: spout_inbox}, spout_inbox={1: spout_inbox},
                                task_slot={1: here, 3: here, 9: here}, tree_done={},
                                plan=SimpleNamespace(acker_tasks=(9,))),
        slot=here, dropped=0, bad_frames=0, parked_batches={}, data_peers=peers, control_peers=peers, remote_bp={},
        refused_signals=0, ledgers={9: AckerLedger(30.0, 0.0)}, acker_lock=threading.Lock(), retiring_spouts={},
    )
    received = wire.unpack_data(frame)

    def dispatch() -> None:
        receive.dispatch_data(host, received)  # type: ignore[arg-type]
        while not count_inbox.empty():
            count_inbox.get_nowait()

    def trees() -> None:
        inits = [(rng.getrandbits(62), 5, 1) for _ in range(256)]
        own = acking.init_trees(host, inits, [])  # type: ignore[arg-type]
        assert not own
        acking.handle_control(host, [[wire.ACK, 9, r, x, 0] for r, x, _ in inits], None)  # type: ignore[arg-type]
        assert spout_inbox.qsize() == 1
        spout_inbox.get_nowait()

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["spout", "split", "count", "pack", "unpack", "acker", "dispatch", "trees", "none"],
                    action="append")
    ap.add_argument("--calls", type=int, default=100, help="calls per round (default 100)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds, the best counts (default {ROUNDS})")
    ap.add_argument("--sample", type=float, default=None, metavar="PCT",
                    help="the event inspector on the spout and split at PCT%% (squall debug --sample; "
                         "default: off, as in a worker)")
    args = ap.parse_args()
    if args.sample is not None:
        from collections import deque

        from squall.sampling import Sampler

        sink: deque[tuple[Any, ...]] = deque(maxlen=1000)  # a worker's ring (squall.worker.eventlog)
        split.sampler = Sampler(args.sample, "split", sink, time.time)
        spout.sampler = Sampler(args.sample, "spout", sink, time.time)
    cases: dict[str, tuple[str, Callable[[], None], int]] = {
        "spout": ("spout, per acked emit", emit, 256),
        "split": ("split, per sentence (~7 emits)", run(split, sentences), 256),
        "count": ("count, per word", run(count, words), len(words)),
        "pack": ("wire pack, per word tuple", lambda: None if wire.pack_data(words) else None, len(words)),
        "unpack": ("wire unpack, per word tuple", lambda: None if wire.unpack_data(frame) else None, len(words)),
        "acker": ("acker init + ack, per tree", acker, 256),
        "dispatch": ("worker: receive dispatch, per word", dispatch, len(words)),
        "trees": ("worker: init, ack, completion, per tree", trees, 256),
    }
    print(f"hot path: {_native.reason}")
    for name, (label, fn, units) in cases.items():
        if args.only and name not in args.only:
            continue
        print(f"{label:36s} {cpu_per_call(fn, args.calls, args.rounds) / units * 1e6:7.3f} us")


if __name__ == "__main__":
    main()
