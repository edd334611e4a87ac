"""`KafkaBolt`: writes each input tuple to Kafka and acks it once the broker confirmed the write.

storm-kafka-client's KafkaBolt with at-least-once end to end: the producer is idempotent with
`acks=all` (a write is confirmed when every in-sync replica has it, and the producer's own retries
add no duplicates), the input is acked from the delivery report and failed on a delivery error,
so the spout replays what did not reach Kafka.

Delivery reports are served on the bolt's thread without blocking (`poll(0)` at every tuple and
every tick tuple): give the bolt ticks (`topology.tick.tuple.freq.secs`, e.g. 0.2, in its
config) so that the last writes of a burst are acked when no more input comes; without ticks
they are acked with the next input. A full producer queue waits (`poll`) until the broker takes
writes: that is the backpressure the bolt puts on its input. `cleanup` flushes.

Key and value come from fields (`keyField`, `valueField`) or a `mapper` (`module:function`:
tuple -> (key, value) or (topic, key, value)); the topic is fixed (`topic`) or a field's
(`topicField`); encoders as the spout's decoders (bytes, utf-8, json, module:function).
"""

from __future__ import annotations

import functools
import time
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from squall.components import TICK_STREAM, Bolt, OutputCollector, TopologyContext, Tuple
from squall.kafka.admin import ClientErrors, KafkaUnavailable, client_config, describe_error
from squall.kafka.config import BOLT_KEY, KafkaBoltConfig, KafkaConfigError, client_props, parse_bolt_config
from squall.kafka.records import Encoder, import_function, make_encoder
from squall.topology_keys import conf_scope

__all__ = ["KafkaBolt", "UnwritableTuple", "sink_record"]

log = logging.getLogger("squall.kafka.bolt")
REPORT_EVERY_S = 60.0


class UnwritableTuple(ValueError):
    """A tuple a Kafka sink cannot make a record of (no topic, a value its encoder refuses, a
    mapper that raised): reported as the component's error under this name, not as Kafka being
    unavailable, and the tuple failed."""


class KafkaBolt(Bolt):
    """Writes tuples to Kafka; config under `kafka.bolt` (squall.kafka.config.KafkaBoltConfig)."""

    outputs: ClassVar[list[str] | None] = []

    written: int
    failed: int

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        self.cfg = cfg = parse_bolt_config(conf)
        self.name = f"{context.component_id}[{context.task_id}]"
        try:
            self.key_encoder = make_encoder(cfg.keyEncoder, f"{BOLT_KEY}.keyEncoder")
            self.value_encoder = make_encoder(cfg.valueEncoder, f"{BOLT_KEY}.valueEncoder")
            self.mapper: Callable[[Tuple], Any] | None = (
                import_function(cfg.mapper, f"{BOLT_KEY}.mapper") if cfg.mapper else None)
        except ValueError as exc:
            raise KafkaConfigError(f"{context.component_id}: {exc}") from None
        props = client_props(cfg, BOLT_KEY)
        topology = conf_scope(conf, context.topology_id)  # its key: no group shared across namespaces
        props.setdefault("client.id", f"squall-{topology}-{context.component_id}-{context.task_id}")
        props.setdefault("linger.ms", 5)
        # at-least-once end to end: every in-sync replica has it, and retries add no duplicates
        props["acks"] = "all"
        props["enable.idempotence"] = True
        self.errors = ClientErrors()
        self.props = props
        self.producer = Producer(client_config(props, self.errors))
        self.fatal: KafkaError | None = None  # the producer is unusable: replaced at the next tuple
        self.written = self.failed = 0
        self.last_report = -REPORT_EVERY_S
        if not conf.get("topology.tick.tuple.freq.secs"):
            log.info("%s: no tick tuples: the last writes of a burst are acked with the next input "
                     "(give the bolt topology.tick.tuple.freq.secs, e.g. 0.2)", self.name)

    def execute(self, tup: Tuple) -> None:
        if self.fatal is not None:
            self._renew_producer()
        if tup.stream == TICK_STREAM:
            self.producer.poll(0)
            return
        try:
            topic, key, value = self._record(tup)
        except Exception as exc:  # noqa: BLE001 - a tuple that cannot be written: failed, said why
            self.failed += 1
            self._report(f"{self.context.component_id}: cannot write tuple {tup.values!r:.200}: "
                         f"{type(exc).__name__}: {exc}", UnwritableTuple)
            self.collector.fail(tup)
            return
        callback = functools.partial(self._delivered, tup)
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=callback)
                break
            except BufferError:
                self.producer.poll(0.05)  # the queue is full: wait for the broker (backpressure)
            except KafkaException as exc:  # refused at once: larger than message.max.bytes, ...
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.fatal():
                    self.fatal = err
                self.failed += 1
                self._report(f"{self.context.component_id}: cannot write to {topic} at "
                             f"{self.cfg.bootstrapServers}: {describe_error(exc, self.cfg.bootstrapServers)}")
                self.collector.fail(tup)
                break
        self.producer.poll(0)

    def _record(self, tup: Tuple) -> tuple[str, bytes | None, bytes | None]:
        return sink_record(self.cfg, self.mapper, self.key_encoder, self.value_encoder, tup)

    def _delivered(self, tup: Tuple, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.written += 1
            self.collector.ack(tup)
            return
        self.failed += 1
        self.collector.fail(tup)  # the spout replays it
        if err.fatal():
            self.fatal = err
        self._report(f"{self.context.component_id}: writing to {msg.topic()} at {self.cfg.bootstrapServers} "
                     f"failed: {err.str()}")

    def _renew_producer(self) -> None:
        """An idempotent producer's fatal error (a sequence it cannot recover) leaves it unusable:
        its unconfirmed writes fail (their inputs are replayed) and a new producer takes over."""
        old, self.producer = self.producer, Producer(client_config(self.props, self.errors))
        log.warning("%s: the producer had a fatal error (%s): a new one takes over", self.name,
                    self.fatal.str() if self.fatal else "?")
        self.fatal = None
        old.purge()
        old.poll(0)  # their delivery reports: failed inputs
        old.flush(0)

    def _report(self, message: str, kind: type[Exception] = KafkaUnavailable) -> None:
        """Log and report (one line, no traceback, as a `kind`), at most every REPORT_EVERY_S."""
        now = time.monotonic()
        if now - self.last_report >= REPORT_EVERY_S:
            self.last_report = now
            log.warning("%s: %s", self.name, message)
            self.collector.report_error(kind(message))

    def cleanup(self) -> None:
        left = self.producer.flush(self.cfg.flushTimeoutMs / 1000.0)
        if left:
            log.warning("%s: %d writes not confirmed at cleanup (their inputs fail and are replayed)",
                        self.name, left)
        log.info("%s: closed (written %d, failed %d)", self.name, self.written, self.failed)


def sink_record(cfg: KafkaBoltConfig, mapper: Callable[[Tuple], Any] | None, key_encoder: Encoder,
                value_encoder: Encoder, tup: Tuple) -> tuple[str, bytes | None, bytes | None]:
    """The (topic, key, value) a sink writes for `tup`: from its `mapper`, or from the fields the
    config names; KafkaBolt and TransactionalKafkaBolt build their records alike."""
    topic = cfg.topic
    if mapper is not None:
        got = mapper(tup)
        if len(got) == 3:
            topic, key, value = got
        else:
            key, value = got
    else:
        key = tup.get(cfg.keyField) if cfg.keyField else None
        value = tup.get(cfg.valueField)
        if cfg.topicField:
            topic = tup.get(cfg.topicField)
    if not topic:
        raise ValueError("no topic (neither 'topic' nor a value in 'topicField')")
    return (str(topic), None if key is None else key_encoder(key),
            None if value is None else value_encoder(value))
