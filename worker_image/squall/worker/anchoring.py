"""The anchoring collector: a bolt's (and a stateful spout's input's) emits anchored to its input
tuples' trees, acks folded per tree into one acker message per flush, fails, and the trees a
window or a bolt starts itself."""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from typing import Any

from squall import wire
from squall.acker import Ids
from squall.tuples import Tuple
from squall.worker.executor import (
    Executor,
)

_getrandbits = random.getrandbits


class BoltCollector:
    """Storm's OutputCollector for one task."""

    __slots__ = ("ex", "task", "src", "ids")

    def __init__(self, ex: Executor, task: int) -> None:
        self.ex = ex
        self.task = task
        # the task id as an object, for the items emitted (an `int` attribute is boxed anew at
        # every use when compiled)
        self.src: Any = task
        # edge ids, made in batches (the executor's thread only)
        self.ids = Ids()

    def _anchored(self, dest: int, stream: str, values: list[Any], anchors: Any) -> list[Any]:
        if anchors is None:
            return [dest, self.task, stream, values, None]
        if type(anchors) is Tuple:
            a = anchors.anchors
            if not a:
                return [dest, self.task, stream, values, None]
            e: Any = self.ids.take()
            ei: int = e
            anchors.ack_val ^= ei
            if len(a) == 1:
                for r in a:
                    return [dest, self.task, stream, values, {r: e}]
            return [dest, self.task, stream, values, dict.fromkeys(a, e)]
        # Storm's BoltOutputCollectorImpl: a fresh edge id per anchor. One edge shared by two
        # anchors of the same tree would cancel out in that root (e ^ e == 0), and the parents'
        # acks would complete the tree before this tuple is processed.
        out: dict[int, int] = {}
        for t in anchors:
            if t.anchors:
                e2: int = self.ids.take()
                t.ack_val ^= e2
                for r in t.anchors:
                    out[r] = out.get(r, 0) ^ e2
        return [dest, self.task, stream, values, out or None]

    def emit(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> list[int]:
        ex = self.ex
        if ex.sampler is not None:
            ex.sampler.offer(self.task, stream, values)
        choosers = ex.routes[self.task].get(stream)
        if choosers is not None and len(choosers) == 1:
            targets = choosers[0](values)
        else:
            targets = ex.route(self.task, stream, values)
        if type(values) is not list:
            values = list(values)
        if anchors is None:
            anchors = ex.auto_anchor
        if len(targets) == 1 and type(anchors) is Tuple and anchors.anchors and len(anchors.anchors) == 1:
            # the common case, inlined: one target, anchored to one input of one tree. The ids
            # are held as objects (`Any`): compiled, an `int` local is unboxed, and boxing it
            # back into the item allocates a new int object for every 62-bit id
            tl: list[Any] = targets
            t: Any = tl[0]
            key = ex.task_dest.get(t)
            if key is None:
                ex.stats.dropped += 1
                return targets
            e: Any = self.ids.take()
            ei: int = e  # unboxing a 62-bit int allocates nothing
            anchors.ack_val ^= ei
            a: dict[Any, Any] = anchors.anchors
            for r in a:
                item = [t, self.src, stream, values, {r: e}]
            buf = ex.bufs.get(key)
            if buf is None:
                ex.bufs[key] = [item]
            else:
                buf.append(item)
            ex.stats.emitted += 1
            return targets
        for t in targets:
            ex.put_tuple(t, self._anchored(t, stream, values, anchors))
        return targets

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        ex = self.ex
        ex.check_direct(self.task, stream, task)
        if ex.sampler is not None:
            ex.sampler.offer(self.task, stream, values)
        if anchors is None:
            anchors = ex.auto_anchor
        ex.put_tuple(task, self._anchored(task, stream, list(values), anchors))

    # -- a windowed bolt's window (squall.windowing drives these) ---------------------------
    def new_tree(self) -> int:
        """A root id for a tree of this task's own (a window's outputs), kept by an acker of
        this worker when there is one, so that its init and completion stay in the process."""
        ex = self.ex
        r = _getrandbits(62) | 1
        routing = ex.routing
        n = ex.n_ackers
        if routing is not None and n:
            local = [i for i, t in enumerate(ex.acker_tasks) if t in routing.local_tasks]
            if local:
                r = (r - r % n + local[r % len(local)]) or n
        return r

    def emit_tree(self, values: Sequence[Any], stream: str, tree: int,
                  task: int | None = None) -> tuple[list[int], int]:
        """Emit anchored to `tree`, a tree of this task's own that stands for a whole window
        (`squall.windowing._WindowAnchoring`): each copy sent carries one fresh edge id of it
        (tree 0: none, the copies are not anchored). Returns the targets and the XOR of those
        edge ids, which `init_tree` registers."""
        ex = self.ex
        if task is None:
            targets = ex.route(self.task, stream, values)
        else:
            ex.check_direct(self.task, stream, task)
            targets = [task]
        if type(values) is not list:
            values = list(values)
        xor = 0
        for t in targets:
            if tree:
                e = _getrandbits(62) | 1  # never 0: a zero entry would not keep its tree open
                xor ^= e
                ex.put_tuple(t, [t, self.task, stream, values, {tree: e}])
            else:
                ex.put_tuple(t, [t, self.task, stream, values, None])
        return targets, xor

    def init_tree(self, tree: int, xor: int) -> None:
        """Register `tree` (its edges' XOR) with its acker, this task as its owner: the acker
        answers with a completion for this task (`DONE`, ok or failed) once every output
        anchored to it was acked downstream, or one failed."""
        ex = self.ex
        ex.out.control.append([wire.INIT, ex.acker_for(tree), tree, xor, self.task])

    def ack_window(self, tuples: list[Tuple], held: dict[int, int] | None) -> None:
        """Ack the tuples that left a windowed bolt's last window: one XOR per root into this
        turn's acks, or into `held` when the window keeps them back (an output of a window
        holding them not acked yet)."""
        ex = self.ex
        acks = ex.out.acks if held is None else held
        for tup in tuples:
            a = tup.anchors
            if a:
                v = tup.ack_val
                for r, edge in a.items():
                    acks[r] = acks.get(r, 0) ^ edge ^ v
        ex.stats.acked += len(tuples)

    def ack_roots(self, roots: array[int], edges: array[int], n: int, held: dict[int, int] | None,
                  tuples: int) -> None:
        """`ack_window` from a windowed bolt's copy of its tuples' anchors: the first `n` (root,
        edge) pairs, which `tuples` tuples that left the windows had (their ack values unset)."""
        ex = self.ex
        acks: dict[Any, Any] = ex.out.acks if held is None else held
        if n:
            # the arrays as lists of int objects in one C call each (indexing an array from
            # here boxes a new int per read), and one dict update per run of a root (a
            # sentence's words arrive together, so its entries mostly follow each other)
            rl: list[Any] = roots[:n].tolist()
            el: list[Any] = edges[:n].tolist()
            prev: Any = rl[0]
            x: int = el[0]
            for i in range(1, n):
                r: Any = rl[i]
                if r == prev:
                    x ^= el[i]
                else:
                    acks[prev] = acks.get(prev, 0) ^ x
                    prev = r
                    x = el[i]
            acks[prev] = acks.get(prev, 0) ^ x
        ex.stats.acked += tuples

    def ack_held(self, held: dict[int, int]) -> None:
        """Send acks a window kept back (`ack_window`'s `held`)."""
        acks = self.ex.out.acks
        for r, x in held.items():
            acks[r] = acks.get(r, 0) ^ x

    def fail_roots(self, roots: Sequence[int]) -> None:
        """Fail these trees (a window's output failed downstream or timed out). Each also gets
        an edge that nothing will ever ack, so that no ack of its tuples still to come (or
        sent before the failure lands) can complete it."""
        ex = self.ex
        acks = ex.out.acks
        control = ex.out.control
        for r in dict.fromkeys(roots):
            acks[r] = acks.get(r, 0) ^ (_getrandbits(62) | 1)
            control.append([wire.FAIL, ex.acker_for(r), r, 0, 0])

    def ack(self, tup: Tuple) -> None:
        ex = self.ex
        a: dict[Any, Any] | None = tup.anchors
        if a:
            # a run of acks of one root XORs into the outbox's unboxed `run_x`; the run goes
            # into the acks dict when another root comes (Outbox). Roots stay objects (`Any`)
            # as the dict's keys: compiled, an `int` root would be boxed anew for each store
            out = ex.out
            v = tup.ack_val
            for r, edge in a.items():
                y: int = edge
                if out.run_open:
                    if r is out.run_root or r == out.run_root:
                        out.run_x ^= y ^ v
                        continue
                    out.settle()
                out.run_root = r
                out.run_x = y ^ v
                out.run_open = True
        ex.stats.acked += 1

    def fail(self, tup: Tuple) -> None:
        ex = self.ex
        if tup.anchors:
            for r in tup.anchors:
                ex.out.acks.pop(r, None)
                ex.out.control.append([wire.FAIL, ex.acker_for(r), r, 0, 0])
        ex.stats.failed += 1

    def report_error(self, exc: BaseException) -> None:
        self.ex.report_error(self.task, exc)
