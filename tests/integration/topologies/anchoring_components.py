"""Components for tests/integration/test_anchoring.py: tuples anchored to several inputs of one
tree (a join), and values the wire format has to carry between workers.

They run inside real worker processes; what a test checks goes through files in `test.out`.

Config keys (topology `spec.config`), besides engine_components' IdSpout/FlakyBolt keys:
  test.parts      FanBolt: copies of each id it emits, all anchored to the input (default 2)
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

from engine_components import IdSpout, _out, _write_json
from squall import Bolt, Tuple


class TrackingIdSpout(IdSpout):
    """IdSpout that also writes which ids it was told failed (`failed-<task>.json`)."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.failed_ids: list[int] = []

    def fail(self, msg_id):
        self.failed_ids.append(msg_id)
        super().fail(msg_id)

    def close(self):
        super().close()
        if self.out is not None:
            _write_json(self.out / f"failed-{self.task}.json", self.failed_ids)


class FanBolt(Bolt):
    """Emits `test.parts` tuples [id, part] per input, all anchored to it, then acks it."""

    outputs = ["id", "part"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.parts = int(conf.get("test.parts", 2))

    def execute(self, tup: Tuple) -> None:
        for part in range(self.parts):
            self.collector.emit([tup.values[0], part], anchors=tup)
        self.collector.ack(tup)


class JoinBolt(Bolt):
    """Waits for the `test.parts` parts of an id (fields grouping on id), then emits one [id]
    anchored to all of them (the parts are in the same tree) and acks them."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.parts = int(conf.get("test.parts", 2))
        self.waiting: dict[int, list[Tuple]] = {}

    def execute(self, tup: Tuple) -> None:
        got = self.waiting.setdefault(tup.values[0], [])
        got.append(tup)
        if len(got) < self.parts:
            return
        del self.waiting[tup.values[0]]
        self.collector.emit([tup.values[0]], anchors=got)
        for part in got:
            self.collector.ack(part)


# -- values across workers ----------------------------------------------------------------------
class Opaque:
    """A user object no serializer is registered for."""

    def __init__(self, n: int) -> None:
        self.n = n


class Money:
    """A user type with a serializer registered in the topology config (`MoneySerializer`)."""

    def __init__(self, cents: int, currency: str) -> None:
        self.cents = cents
        self.currency = currency


class MoneySerializer:
    @staticmethod
    def encode(m: Money) -> list[Any]:
        return [m.cents, m.currency]

    @staticmethod
    def decode(data: list[Any]) -> Money:
        return Money(data[0], data[1])


def rich_values(i: int) -> list[Any]:
    """The values RichBolt emits for id i; CheckBolt compares what arrived with them."""
    return [
        i,
        {i, i + 1, "x"},
        frozenset({i}),
        datetime.datetime(2026, 1, 2, 3, 4, 5, i % 1000, tzinfo=datetime.timezone.utc),
        datetime.datetime(2026, 1, 2, 3, 4, 5),
        decimal.Decimal(f"{i}.10"),
        2**70 + i,
        Money(i * 100, "EUR"),
    ]


RICH_FIELDS = ["id", "set", "frozen", "utc", "naive", "dec", "big", "money"]


class RichBolt(Bolt):
    """Forwards each id with values msgpack alone cannot encode, anchored. The first time it
    sees an id with id % `test.mod` == 0 the tuple also carries an `Opaque` object (no
    serializer: it cannot be sent to another worker); the id's replay is sent without it."""

    outputs = RICH_FIELDS

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.mod = int(conf.get("test.mod", 0))
        self.seen: set[int] = set()

    def execute(self, tup: Tuple) -> None:
        i = tup.values[0]
        values = rich_values(i)
        if self.mod and i % self.mod == 0 and i not in self.seen:
            self.seen.add(i)
            values[1] = {Opaque(i)}  # inside a set: the error names the field and the set
        self.collector.emit(values, anchors=tup)
        self.collector.ack(tup)


class CheckBolt(Bolt):
    """Compares each tuple with `rich_values(id)`; writes `check-<task>.json` (ids that arrived
    intact, and a description of each mismatch) on cleanup."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.out = _out(conf)
        self.task = context.task_id
        self.intact: list[int] = []
        self.wrong: list[str] = []

    def execute(self, tup: Tuple) -> None:
        got = list(tup.values)
        want = rich_values(got[0])
        money = got[-1]
        same = (
            got[:-1] == want[:-1]
            and [type(v) for v in got[:-1]] == [type(v) for v in want[:-1]]
            and type(money) is Money
            and (money.cents, money.currency) == (want[-1].cents, want[-1].currency)
        )
        if same:
            self.intact.append(got[0])
        else:
            self.wrong.append(repr(got))
        self.collector.ack(tup)

    def cleanup(self) -> None:
        if self.out is not None:
            _write_json(self.out / f"check-{self.task}.json", {"intact": self.intact, "wrong": self.wrong})
