"""Components of the chaos run (bench/chaos.py): a durable source and a sink that record, in files
that survive kill -9 of their worker, every id acked at the spout and every delivery at the sink.

Config keys (topology `spec.config`):
  chaos.count   the source holds ids 0..count-1; task k of P owns the ids i with i % P == k
  chaos.rate    new ids per second for the whole spout component (split over its tasks)
  chaos.out     directory of the record files

Files (one line per event, written with one `os.write` on an O_APPEND descriptor, so a worker
killed with SIGKILL loses nothing it had written: the kernel holds it):
  acks-<task>.log    "<id> <unix time>" for every ack the spout task received
  sink-<task>.log    "<id>" for every tuple the sink task received (before acking it)

The spout behaves like a durable source with a committed position: when a task opens (first
start, or its worker was killed and restarted), it reads its ack log; ids below its highest acked
id that were never acked are emitted again at once (they were in flight when the worker died),
the rest at the configured rate. A failed (or timed-out) id is emitted again at once.
"""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

from squall import Bolt, Spout, Tuple


def _open_log(conf: Any, name: str) -> int:
    out = Path(str(conf["chaos.out"]))
    out.mkdir(parents=True, exist_ok=True)
    return os.open(out / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def read_acked(path: Path) -> set[int]:
    """Ids in an ack log (a line cut short by a kill is skipped)."""
    acked: set[int] = set()
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                acked.add(int(parts[0]))
    return acked


class DurableSpout(Spout):
    outputs = ["id"]

    def open(self, conf, context, collector):  # type: ignore[no-untyped-def]
        super().open(conf, context, collector)
        count = int(conf["chaos.count"])
        self.task = context.task_id
        tasks = sorted(context.this_component_tasks())
        index, n_tasks = tasks.index(self.task), len(tasks)
        self.rate = float(conf["chaos.rate"]) / n_tasks
        out = Path(str(conf["chaos.out"]))
        acked = read_acked(out / f"acks-{self.task}.log")
        self.fd = _open_log(conf, f"acks-{self.task}.log")
        mine = range(index, count, n_tasks)
        top = max(acked, default=-1)
        self.replay: collections.deque[int] = collections.deque(
            i for i in mine if i < top and i not in acked
        )
        self.todo: collections.deque[int] = collections.deque(i for i in mine if i > top)
        self.t0 = time.monotonic()
        self.fresh = 0

    def next_tuple(self):  # type: ignore[no-untyped-def]
        if self.replay:
            msg_id = self.replay.popleft()
        else:
            if not self.todo or self.fresh >= self.rate * (time.monotonic() - self.t0):
                return
            msg_id = self.todo.popleft()
            self.fresh += 1
        self.collector.emit([msg_id], msg_id=msg_id)

    def ack(self, msg_id):  # type: ignore[no-untyped-def]
        os.write(self.fd, f"{msg_id} {time.time():.3f}\n".encode())

    def fail(self, msg_id):  # type: ignore[no-untyped-def]
        self.replay.append(msg_id)

    def close(self):  # type: ignore[no-untyped-def]
        os.close(self.fd)


class PassBolt(Bolt):
    """Forwards the id anchored to its input, then acks the input."""

    outputs = ["id"]

    def execute(self, tup: Tuple) -> None:
        self.collector.emit([tup.values[0]], anchors=[tup])
        self.collector.ack(tup)


class SinkBolt(Bolt):
    """Records the id, then acks it."""

    def prepare(self, conf, context, collector):  # type: ignore[no-untyped-def]
        super().prepare(conf, context, collector)
        self.fd = _open_log(conf, f"sink-{context.task_id}.log")

    def execute(self, tup: Tuple) -> None:
        os.write(self.fd, f"{tup.values[0]}\n".encode())
        self.collector.ack(tup)

    def cleanup(self):  # type: ignore[no-untyped-def]
        os.close(self.fd)
