"""The pure parts of the transactional Kafka sink (`squall.kafka.txnbolt.TransactionalKafkaBolt`):
its settings, the interval it keeps in its checkpointed state, the marker it commits with each
Kafka transaction, and the recovery decision. No client here: unit-tested with plain values.

The design (docs/connectors.md, "Exactly once out"): the records of a checkpoint interval are kept
in the bolt's checkpointed state (saved at PREPARE), and at COMMIT written in one Kafka
transaction together with a marker record `(txid, interval id)` on a marker topic. librdkafka
cannot resume a prepared transaction after its producer dies (a new producer with the same
`transactional.id` aborts it), so a crash between the state's commit and Kafka's is repaired from
the state: at start the bolt reads its last committed marker and writes the state's interval again
when the marker is not that interval's.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from squall.kafka.config import BOLT_KEY, KafkaBoltConfig, _parse

__all__ = [
    "INTERVAL_KEY",
    "Interval",
    "Marker",
    "Recovery",
    "TransactionalKafkaBoltConfig",
    "decode_marker",
    "encode_marker",
    "new_interval_id",
    "parse_txn_bolt_config",
    "recovery",
    "record_size",
    "transactional_id",
]

# the state's key of the interval whose records the last PREPARE saved
INTERVAL_KEY = "kafka.txn.interval"
# bytes a record costs beyond its key and value (topic name, msgpack framing): an estimate
RECORD_OVERHEAD = 16


class TransactionalKafkaBoltConfig(KafkaBoltConfig):
    """`KafkaBoltConfig` plus the transactional sink's own keys."""

    markerTopic: str | None = None  # default squall-txn-markers-<topology>
    # the records of one checkpoint interval, in bytes (keys + values + overhead): past it inputs
    # are failed and the next checkpoint fails (the topology rolls back and replays)
    maxIntervalBytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    transactionTimeoutMs: int = Field(default=60_000, ge=1_000)  # the broker aborts a txn older than this
    commitTimeoutMs: int = Field(default=10_000, ge=100)  # one Kafka transaction at COMMIT, at most
    recoveryTimeoutMs: int = Field(default=30_000, ge=100)  # reading the markers at start, at most
    createMarkerTopic: bool = True  # create it (1 partition, compacted) if it does not exist


def parse_txn_bolt_config(conf: Mapping[str, Any]) -> TransactionalKafkaBoltConfig:
    cfg: TransactionalKafkaBoltConfig = _parse(TransactionalKafkaBoltConfig, BOLT_KEY, conf)
    return cfg


def transactional_id(topology: str, component: str, task: int) -> str:
    """Stable per task across restarts, so a restarted task fences its zombie (Kafka aborts the
    zombie's open transaction and refuses its writes)."""
    return f"squall-{topology}-{component}-{task}"


def new_interval_id() -> str:
    return uuid.uuid4().hex


Record = tuple[str, bytes | None, bytes | None]  # (topic, key, value)


def record_size(record: Record) -> int:
    topic, key, value = record
    return len(topic) + len(key or b"") + len(value or b"") + RECORD_OVERHEAD


@dataclasses.dataclass(frozen=True)
class Interval:
    """The records of one checkpoint interval, as saved in the state at PREPARE of `txid`."""

    txid: int
    id: str
    records: list[Record]

    def to_state(self) -> list[Any]:
        return [self.txid, self.id, [list(r) for r in self.records]]

    @classmethod
    def from_state(cls, raw: Any) -> Interval | None:
        if raw is None:
            return None
        txid, iid, records = raw
        return cls(int(txid), str(iid), [(str(t), k, v) for t, k, v in records])


@dataclasses.dataclass(frozen=True)
class Marker:
    """What the marker record of a committed Kafka transaction says: which interval it wrote."""

    txid: int
    id: str


def encode_marker(marker: Marker, task: int) -> bytes:
    return json.dumps({"txid": marker.txid, "interval": marker.id, "task": task}).encode()


def decode_marker(value: bytes | None) -> Marker | None:
    """None for a value that is not a marker (said by the caller, skipped)."""
    try:
        got = json.loads(value or b"")
        return Marker(int(got["txid"]), str(got["interval"]))
    except (ValueError, KeyError, TypeError):
        return None


class Recovery(str, enum.Enum):
    NOTHING = "nothing"  # no interval in the state: nothing was ever prepared and committed
    DONE = "done"  # the state's interval is the last one Kafka committed
    REWRITE = "rewrite"  # the state committed an interval Kafka has not: write it again
    CONFLICT = "conflict"  # Kafka is ahead of the state (a restored or reset store): write nothing


def recovery(state: Interval | Marker | None, marker: Marker | None) -> Recovery:
    """What to do at start with the state's last committed interval and this task's last
    committed marker (the last by offset). Kafka commits interval T only at COMMIT of T, after the
    state prepared T, and a checkpoint that reached COMMIT is rolled forward, never back: so Kafka
    is at most one interval behind the state, never ahead of it."""
    if state is None:
        return Recovery.NOTHING
    if marker is not None and marker.id == state.id:
        return Recovery.DONE
    if marker is None or marker.txid < state.txid:
        return Recovery.REWRITE
    return Recovery.CONFLICT
