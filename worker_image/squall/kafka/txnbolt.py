"""`TransactionalKafkaBolt`: a Kafka sink whose output a `read_committed` consumer sees exactly
once, in a stateful topology (checkpoints, docs/topology.md "Exactly once with a stateful spout").

A `StatefulBolt`. Each input's record (topic, key, value: as `KafkaBolt` makes it) is kept in
memory, and its input acked (the harness holds the ack until the checkpoint commits). At PREPARE
of checkpoint `txid` the interval's records go into the bolt's checkpointed state (durable once
the state is prepared); at COMMIT they are written in one Kafka transaction together with a marker
record (txid, interval id) on the marker topic, committed before the state itself commits. At the
start (and after a failed write) the bolt reads its last committed marker (read_committed) and
writes the state's last interval again when Kafka has not committed it: librdkafka cannot resume a
prepared Kafka transaction after its producer died (a new producer with the same
`transactional.id` aborts it), so the state, not the transaction, is what survives a kill -9.

No Kafka transaction stays open between calls: each is begun, filled and committed within one
COMMIT (bounded by `commitTimeoutMs`); a failure aborts it and fails the checkpoint, which the
checkpoint spout then rolls forward (retries the COMMIT) until Kafka takes it. A ROLLBACK drops the
records not yet prepared (the spout replays their inputs). `transactional.id` is
`squall-<topology>-<component>-<task>`: a restarted task fences its zombie.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from squall.components import TICK_STREAM, OutputCollector, StatefulBolt, TopologyContext, Tuple
from squall.kafka.admin import ClientErrors, KafkaUnavailable, client_config, create_topics, describe_error
from squall.kafka.bolt import UnwritableTuple, sink_record
from squall.kafka.config import BOLT_KEY, KafkaConfigError, client_props
from squall.kafka.records import import_function, make_encoder
from squall.kafka.txn import (
    INTERVAL_KEY,
    Interval,
    Marker,
    Record,
    Recovery,
    decode_marker,
    encode_marker,
    new_interval_id,
    parse_txn_bolt_config,
    record_size,
    recovery,
    transactional_id,
)
from squall.topology_keys import conf_scope, topic_safe

__all__ = ["IntervalTooLarge", "TransactionalKafkaBolt", "last_marker"]

log = logging.getLogger("squall.kafka.txnbolt")
REPORT_EVERY_S = 60.0
MARKER_PARTITION = 0
# a record's batch framing and headers beyond record_size: inputs larger than message.max.bytes
# less this are failed at once
RECORD_MARGIN = 512
# compacted, in segments of 10 minutes (only closed segments are compacted): what a start reads
# stays about one marker per task
MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "600000"}


class IntervalTooLarge(RuntimeError):
    """The interval's records passed `maxIntervalBytes`: inputs were failed, so is the checkpoint."""


def last_marker(props: Mapping[str, Any], topic: str, txn_id: str, timeout: float) -> Marker | None:
    """The last marker (by offset) that `txn_id` committed on `topic` (partition 0), read with
    read_committed up to the partition's end as of now; `KafkaUnavailable` if that takes longer
    than `timeout` (an open transaction of another task holds the end back until it ends)."""
    conf = {k: v for k, v in props.items() if not k.startswith(("transaction", "enable.idempotence", "acks",
                                                                 "linger", "message.timeout"))}
    bootstrap = str(props.get("bootstrap.servers", "?"))
    errors = ClientErrors()
    base = {**conf, "group.id": f"{txn_id}-markers", "enable.auto.commit": False}
    tp = TopicPartition(topic, MARKER_PARTITION)
    # the end with open transactions included (a read_committed consumer's end is the last stable
    # offset, which stops before another task's open transaction and would hide our later marker)
    ends = Consumer(client_config({**base, "isolation.level": "read_uncommitted"}, errors))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                low, high = ends.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()))
                break
            except KafkaException as exc:  # a just created topic has no leader yet: retried
                if time.monotonic() >= deadline:
                    raise KafkaUnavailable(f"reading the marker topic {topic!r}: "
                                           f"{describe_error(exc, bootstrap, errors)}") from None
                time.sleep(0.1)
    finally:
        ends.close()
    c = Consumer(client_config({**base, "isolation.level": "read_committed", "enable.partition.eof": True}, errors))
    try:
        if high <= low:
            return None
        c.assign([TopicPartition(topic, MARKER_PARTITION, low)])
        found: Marker | None = None
        key = txn_id.encode()
        while True:
            end = -1
            for m in c.consume(1000, 0.1):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        end = max(end, m.offset() or 0)
                        continue
                    raise KafkaUnavailable(f"reading the marker topic {topic!r}: {describe_error(err, bootstrap)}")
                offset = m.offset() or 0
                end = max(end, offset + 1)
                if m.key() == key:
                    got = decode_marker(m.value())
                    if got is None:
                        log.warning("marker topic %s: offset %d is not a marker; skipped", topic, offset)
                    else:
                        found = got
            if end >= high:
                return found
            pos = c.position([tp])[0].offset
            if pos >= high:
                return found
            if time.monotonic() >= deadline:
                raise KafkaUnavailable(f"reading the marker topic {topic!r} at {bootstrap}: its end ({high}) "
                                       f"not reached in {timeout:g}s (an open transaction holds it back?)")
    finally:
        c.close()


class TransactionalKafkaBolt(StatefulBolt):
    """Writes tuples to Kafka exactly once (for read_committed consumers); config under
    `kafka.bolt` (squall.kafka.txn.TransactionalKafkaBoltConfig)."""

    outputs: ClassVar[list[str] | None] = []

    # what a start does with the state's last interval: "markers" (write it again unless the last
    # committed marker is its own). The tests' controls: "always" (write it again: duplicates) and
    # "never" (take it as written: a crash between the state's prepare and Kafka's commit loses it)
    marker_recovery: ClassVar[str] = "markers"

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        self.cfg = cfg = parse_txn_bolt_config(conf)
        self.name = f"{context.component_id}[{context.task_id}]"
        try:
            self.key_encoder = make_encoder(cfg.keyEncoder, f"{BOLT_KEY}.keyEncoder")
            self.value_encoder = make_encoder(cfg.valueEncoder, f"{BOLT_KEY}.valueEncoder")
            self.mapper: Callable[[Tuple], Any] | None = (
                import_function(cfg.mapper, f"{BOLT_KEY}.mapper") if cfg.mapper else None)
        except ValueError as exc:
            raise KafkaConfigError(f"{context.component_id}: {exc}") from None
        topology = conf_scope(conf, context.topology_id)  # its key: no group shared across namespaces
        self.task = context.task_id
        self.txn_id = transactional_id(topology, context.component_id, context.task_id)
        self.marker_topic = cfg.markerTopic or f"squall-txn-markers-{topic_safe(topology)}"
        props = client_props(cfg, BOLT_KEY)
        self.client_props = dict(props)
        props.setdefault("client.id", f"squall-{topology}-{context.component_id}-{context.task_id}")
        props.setdefault("linger.ms", 5)
        props["acks"] = "all"
        props["enable.idempotence"] = True
        props["transactional.id"] = self.txn_id
        props["transaction.timeout.ms"] = cfg.transactionTimeoutMs
        # a write that cannot be delivered fails within the commit's bound, not after 5 minutes
        props["message.timeout.ms"] = min(cfg.commitTimeoutMs, cfg.transactionTimeoutMs)
        self.max_record = int(props.get("message.max.bytes", 1_000_000))
        self.props = props
        self.errors = ClientErrors()
        self.producer: Producer | None = None  # made (init_transactions: fencing) at recovery
        self.pending: list[Record] = []
        self.pending_bytes = 0
        self.refused = 0
        self.prepared: Interval | None = None  # the interval saved at PREPARE, written at COMMIT
        self.written: str | None = None  # the id of the last interval Kafka committed (known here)
        self.recovered = False
        self.uncertain = False  # a write failed: whether it committed is read from the markers
        self.committed_txns = 0
        self.last_report = -REPORT_EVERY_S

    # -- the checkpoint protocol ---------------------------------------------------------------
    def init_state(self, state: Any) -> None:
        self.state = state
        self.pending, self.pending_bytes, self.refused, self.prepared = [], 0, 0, None
        self.recovered = False
        try:
            self._recover()
        except Exception as exc:  # noqa: BLE001 - retried before the next input / PREPARE
            self._report(f"recovery at start failed (retried): {exc}")

    def pre_prepare(self, txid: int) -> None:
        if not self.recovered:
            self._recover()  # raises: this checkpoint fails, the topology rolls back and retries
        if self.refused:
            raise IntervalTooLarge(
                f"{self.name}: {self.refused} inputs refused past maxIntervalBytes="
                f"{self.cfg.maxIntervalBytes} in this checkpoint interval; the checkpoint fails and "
                f"the topology replays it (raise maxIntervalBytes or lower maxSpoutPending)")
        prepared = self.prepared
        if prepared is not None and prepared.txid != txid:
            raise RuntimeError(f"{self.name}: PREPARE of txid {txid} while txid {prepared.txid} "
                               "is prepared and not written")
        if prepared is not None:
            interval = Interval(txid, prepared.id, prepared.records + self.pending)
        elif self.pending:
            interval = Interval(txid, new_interval_id(), self.pending)
        else:
            return  # nothing written in this interval: the state keeps the last (written) one
        self.state.put(INTERVAL_KEY, interval.to_state())
        self.prepared = interval
        self.pending, self.pending_bytes = [], 0

    def pre_commit(self, txid: int) -> None:
        interval = self.prepared
        if interval is None or interval.txid != txid:
            # nothing prepared here for txid: an empty interval, one already written (a COMMIT
            # rolled forward again), or a task restarted before its init (its recovery writes it)
            return
        if interval.id != self.written:
            self._settle(interval)
        self.prepared = None

    def pre_rollback(self) -> None:
        self.pending, self.pending_bytes, self.refused = [], 0, 0
        self.prepared = None  # never committed (a COMMIT is rolled forward before any ROLLBACK)

    # -- input ---------------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if tup.stream == TICK_STREAM:
            return
        if not self.recovered:
            try:
                self._recover()
            except Exception as exc:  # noqa: BLE001
                self._report(f"recovery failed (retried): {exc}")
                self.collector.fail(tup)
                return
        try:
            record = self._record(tup)
        except Exception as exc:  # noqa: BLE001 - a tuple that cannot be written: failed, said why
            self._report(f"cannot write tuple {tup.values!r:.200}: {type(exc).__name__}: {exc}", UnwritableTuple)
            self.collector.fail(tup)
            return
        size = record_size(record)
        if size + RECORD_MARGIN > self.max_record:  # refused at COMMIT it would fail every retry
            self._report(f"cannot write tuple {tup.values!r:.100}: the record is larger than "
                         f"message.max.bytes={self.max_record}", UnwritableTuple)
            self.collector.fail(tup)
            return
        if self.pending_bytes + size > self.cfg.maxIntervalBytes:
            self.refused += 1
            self._report(f"the checkpoint interval's records passed maxIntervalBytes="
                         f"{self.cfg.maxIntervalBytes}: input failed, the checkpoint will fail and replay")
            self.collector.fail(tup)
            return
        self.pending.append(record)
        self.pending_bytes += size
        self.collector.ack(tup)  # acked for real once the checkpoint that writes it commits

    def _record(self, tup: Tuple) -> Record:
        return sink_record(self.cfg, self.mapper, self.key_encoder, self.value_encoder, tup)

    # -- Kafka -----------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Fence the zombie, then make Kafka hold the state's last committed interval."""
        self._producer()
        raw = self.state.get(INTERVAL_KEY) if getattr(self, "state", None) is not None else None
        interval = Interval.from_state(raw)
        if interval is not None and self.marker_recovery == "markers":
            self._settle(interval, at_start=True)
        elif interval is not None and self.marker_recovery == "always":
            self._write(interval)
        elif interval is not None:
            self.written = interval.id
        self.recovered = True

    def _settle(self, interval: Interval, at_start: bool = False) -> None:
        """Write `interval` unless Kafka committed it already (read from the markers when that is
        not known here: at start and after a failed write)."""
        if at_start or self.uncertain:
            self._producer()  # first: a new producer's init_transactions ends the old one's transaction
            marker = last_marker(self.client_props, self.marker_topic, self.txn_id,
                                 self.cfg.recoveryTimeoutMs / 1000.0)
            decision = recovery(interval, marker)
            log.info("%s: state's interval txid %d, last committed marker %s: %s", self.name, interval.txid,
                     None if marker is None else f"txid {marker.txid}", decision.value)
            self.uncertain = False
            if decision is Recovery.CONFLICT:
                self._report(f"the marker topic {self.marker_topic} has txid {marker.txid if marker else '?'} "
                             f"past the state's {interval.txid} (a reset or restored state store?): "
                             "not written again")
            if decision is not Recovery.REWRITE:
                self.written = interval.id
                return
        self._write(interval)

    def _producer(self) -> Producer:
        if self.producer is None:
            producer = Producer(client_config(self.props, self.errors))
            try:
                # fences an older producer of this transactional.id and aborts its open transaction
                producer.init_transactions(self.cfg.recoveryTimeoutMs / 1000.0)
            except KafkaException as exc:
                raise KafkaUnavailable(f"{self.name}: initialising transactions ({self.txn_id}): "
                                       f"{describe_error(exc, self.cfg.bootstrapServers, self.errors)}") from None
            if self.cfg.createMarkerTopic:
                create_topics(self.client_props, {self.marker_topic: 1}, topic_config=MARKER_TOPIC_CONFIG,
                              timeout=self.cfg.recoveryTimeoutMs / 1000.0)
            self.producer = producer
        return self.producer

    def _write(self, interval: Interval) -> None:
        """One Kafka transaction: the interval's records and its marker, committed within
        `commitTimeoutMs`; on failure it is aborted and `KafkaUnavailable` raised (whether it
        committed after all is read from the markers next time)."""
        p = self._producer()
        timeout = self.cfg.commitTimeoutMs / 1000.0
        deadline = time.monotonic() + timeout
        try:
            p.begin_transaction()
            for topic, key, value in interval.records:
                while True:
                    try:
                        p.produce(topic, value=value, key=key)
                        break
                    except BufferError:
                        if time.monotonic() >= deadline:
                            raise
                        p.poll(0.05)
            p.produce(self.marker_topic, key=self.txn_id.encode(), partition=MARKER_PARTITION,
                      value=encode_marker(Marker(interval.txid, interval.id), self.task))
            p.commit_transaction(max(0.1, deadline - time.monotonic()))
        except (KafkaException, BufferError) as exc:
            self.uncertain = True
            self._abandon(exc)
            raise KafkaUnavailable(f"{self.name}: writing checkpoint txid {interval.txid} "
                                   f"({len(interval.records)} records) in a transaction: "
                                   f"{describe_error(exc, self.cfg.bootstrapServers, self.errors)}") from None
        self.written = interval.id
        self.committed_txns += 1

    def _abandon(self, exc: BaseException) -> None:
        """After a failed transaction: abort it, or (a fatal error, a fenced producer, an abort
        that fails) drop the producer; the next write makes a new one."""
        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        p = self.producer
        if p is None:
            return
        if isinstance(err, KafkaError) and err.fatal():
            self.producer = None
            return
        try:
            p.abort_transaction(self.cfg.commitTimeoutMs / 1000.0)
        except KafkaException:
            self.producer = None

    def _report(self, message: str, kind: type[Exception] = KafkaUnavailable) -> None:
        now = time.monotonic()
        if now - self.last_report >= REPORT_EVERY_S:
            self.last_report = now
            log.warning("%s: %s", self.name, message)
            self.collector.report_error(kind(f"{self.context.component_id}: {message}"))

    def cleanup(self) -> None:
        log.info("%s: closed (%d transactions committed)", self.name, self.committed_txns)
