"""Components for the engine's integration tests (tests/integration/test_engine.py).

They run inside real worker processes, so everything a test checks afterwards goes through files
in the directory named by the `test.out` config key.

Config keys (topology `spec.config`):
  test.count      IdSpout: emit message ids 0..count-1 (0: an endless stream of fresh ids)
  test.rate       IdSpout: at most this many new ids per second per task (0: as fast as it can)
  test.out        a directory for the spout's and bolts' files
  test.mod        FlakyBolt: ids with id % mod == 0 are rejected the first time they are seen
  test.mode       FlakyBolt: "fail" (collector.fail) or "raise" (an exception from execute)
  test.sleep_ms   SlowBolt: milliseconds to sleep per tuple
"""

from __future__ import annotations

import collections
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from squall import BasicBolt, Bolt, Spout, Tuple


def _out(conf: Any) -> Path | None:
    out = conf.get("test.out")
    if not out:
        return None
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class IdSpout(Spout):
    """Emits integer message ids, replays an id whenever its tree fails or times out.

    A finite spout (`test.count` > 0) behaves like a durable source: the ids it has seen acked
    are written to `spout-<task>.json` when it closes and read back when a task of it opens again
    (after a rebalance moved it), so only unacknowledged ids are emitted again. When every id of
    the task is acked it writes `spout-<task>.done`. Task k of P owns the ids i with i % P == k.

    With `test.stoppable`, a file `stop` in `test.out` ends the source early, for a test that
    needs the load to last however fast the machine is: the ids the task emitted by then (all of
    its ids below `limit`, written with the rest) are the source; the others are never emitted.
    """

    outputs = ["id"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.count = int(conf.get("test.count", 0))
        self.rate = float(conf.get("test.rate", 0))
        self.out = _out(conf)
        self.task = context.task_id
        tasks = sorted(context.this_component_tasks())
        self.index, self.n_tasks = tasks.index(self.task), len(tasks)
        self.acked: set[int] = set()
        self.opens = 1
        self.limit: int | None = None  # set once `stop` was seen: the source ends below it
        self.high = -1  # the highest id emitted, over every open of the task
        self.stoppable = bool(conf.get("test.stoppable"))
        self.next_stop_check = 0.0
        self.failed = 0
        self.emitted = 0
        self.acks = 0
        state = self.out / f"spout-{self.task}.json" if self.out else None
        if self.count and state is not None and state.exists():
            prev = json.loads(state.read_text())
            self.acked = set(prev["acked"])
            self.opens = prev["opens"] + 1
            self.failed = prev["failed"]
            self.limit = prev.get("limit")
            self.high = prev.get("high", max(self.acked, default=-1))
        end = self.limit if self.limit is not None else self.count
        self.mine = range(self.index, end, self.n_tasks) if self.count else None
        # to emit: first the ids an earlier open emitted and saw no ack for, then fresh ones
        # from `cursor` on (not listed: a stoppable source may be very long)
        self.todo: collections.deque[int] = collections.deque(
            i for i in range(self.index, min(self.high + 1, end), self.n_tasks) if i not in self.acked
        )
        above = self.high + 1 - self.index
        self.cursor = self.index + max(0, -(-above // self.n_tasks)) * self.n_tasks
        self.replay: collections.deque[int] = collections.deque()
        self.next_fresh = self.index
        self.t0 = time.monotonic()
        self.fresh = 0
        self._done_written = False
        self._check_done()

    def next_tuple(self):
        if self.stoppable and self.limit is None and self.out is not None:
            now = time.monotonic()
            if now >= self.next_stop_check:
                self.next_stop_check = now + 0.1
                if (self.out / "stop").exists():
                    self._stop()
        if self.replay:
            msg_id = self.replay.popleft()
        else:
            if self.rate and self.fresh >= self.rate * (time.monotonic() - self.t0):
                return
            if self.count:
                if self.todo:
                    msg_id = self.todo.popleft()
                elif self.cursor < self.mine.stop:
                    msg_id = self.high = self.cursor
                    self.cursor += self.n_tasks
                else:
                    return
            else:
                msg_id = self.next_fresh
                self.next_fresh += self.n_tasks
            self.fresh += 1
        self.emitted += 1
        self.collector.emit([msg_id], msg_id=msg_id)

    def ack(self, msg_id):
        self.acks += 1
        if self.count:
            self.acked.add(msg_id)
            self._check_done()

    def fail(self, msg_id):
        self.failed += 1
        if self.count:
            self.replay.append(msg_id)

    def _stop(self):
        """The source ends after the highest id emitted so far: those below it not acked yet
        (emitted before a reopen) are still to be emitted; none above it ever will be."""
        assert self.mine is not None
        self.limit = self.high + 1
        self.mine = range(self.index, self.limit, self.n_tasks)
        self._check_done()

    def _check_done(self):
        if (
            self.count and self.out is not None and not self._done_written
            and len(self.acked) == len(self.mine)  # type: ignore[arg-type]
        ):
            self._done_written = True
            (self.out / f"spout-{self.task}.done").write_text("done")

    def close(self):
        if self.out is not None:
            _write_json(self.out / f"spout-{self.task}.json", {
                "acked": sorted(self.acked),
                "acks": self.acks,
                "failed": self.failed,
                "emitted": self.emitted,
                "opens": self.opens,
                "limit": self.limit,
                "high": self.high,
            })


class PassBolt(BasicBolt):
    """Forwards the id, anchored (BasicBolt)."""

    outputs = ["id"]

    def process(self, tup: Tuple) -> None:
        self.collector.emit([tup.values[0]])


_chatty = logging.getLogger("engine_components.chatty")


class ChattyPassBolt(PassBolt):
    """PassBolt that logs every id it passes at DEBUG (logger `engine_components.chatty`): silent
    at the worker's own level, heard once that logger is set to DEBUG (`squall set-log-level`)."""

    def process(self, tup: Tuple) -> None:
        _chatty.debug("passing id %s", tup.values[0])
        super().process(tup)


class SinkBolt(Bolt):
    """Acks everything."""

    def execute(self, tup: Tuple) -> None:
        self.collector.ack(tup)


class SlowBolt(Bolt):
    """Sleeps `test.sleep_ms` per tuple, then acks it."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.sleep = float(conf.get("test.sleep_ms", 1)) / 1000.0

    def execute(self, tup: Tuple) -> None:
        time.sleep(self.sleep)
        self.collector.ack(tup)


class FlakyBolt(Bolt):
    """Rejects an id the first time it sees it when id % `test.mod` == 0, by failing the tuple
    (`test.mode: fail`) or by raising (`test.mode: raise`); forwards everything else anchored.

    It must receive an id's replays itself (fields grouping on "id"), since it remembers what it
    has seen in memory. Writes `flaky-<task>.json` (the ids it rejected) on cleanup."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.mod = int(conf.get("test.mod", 10))
        self.mode = conf.get("test.mode", "fail")
        self.out = _out(conf)
        self.task = context.task_id
        self.seen: set[int] = set()
        self.rejected: list[int] = []

    def execute(self, tup: Tuple) -> None:
        msg_id = tup.values[0]
        if msg_id % self.mod == 0 and msg_id not in self.seen:
            self.seen.add(msg_id)
            self.rejected.append(msg_id)
            if self.mode == "raise":
                raise ValueError(f"flaky bolt rejects id {msg_id}")
            self.collector.fail(tup)
            return
        self.collector.emit([msg_id], anchors=tup)
        self.collector.ack(tup)

    def cleanup(self) -> None:
        if self.out is not None:
            _write_json(self.out / f"flaky-{self.task}.json", {"rejected": self.rejected})
