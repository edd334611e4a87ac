"""`KafkaSpout`: storm-kafka-client's KafkaSpout for Squall, on confluent-kafka (librdkafka).

Each task reads the partitions `assignment.assign_partitions` gives its index (manual assignment,
re-spread when the topics' partitions change), emits one tuple per record with the message id
`(topic, partition, offset)`, and commits to Kafka (the consumer group `groupId`) only up to the
lowest offset not yet acked (`offsets.OffsetManager`). A failed tuple is emitted again after an
exponential backoff (`retry.RetrySchedule`); when its retries are spent it goes to the
dead-letter topic, or is dropped and counted. A record whose decoder or translator raises (a
poison record) is counted, logged with its topic/partition/offset, sent to the dead-letter topic
when there is one, and its partition moves on.

A `next_tuple` call emits up to `emitBatch` of the polled records (amortising its per-call checks:
metadata, the commit timer, retries), never more than maxSpoutPending less the tuples in flight.
Commits carry this deployment's id (`assignment.deployment_id`: the name and the submission's
launch time, as Storm's storm id), and where a deployment starts a partition is committed as its
own before the partition is read: EARLIEST / LATEST apply once per submission, not per worker start.

`next_tuple` never blocks: records come from librdkafka's prefetch queue (`consume(timeout=0)`,
kept fed by `config.CONSUMER_DEFAULTS`' fetch.queue.backoff.ms, 100 ms instead of 1000),
commits are asynchronous (confirmed by their callback before the bookkeeping moves), and the
metadata (partitions, committed offsets: calls that wait on the broker) is fetched by a helper
thread with its own client, which hands the result over through a one-slot queue. A broker that
cannot be reached is reported (one line naming the bootstrap servers, no traceback) and waited
for; a subscribed topic that does not exist is reported and waited for too.

Failed tuples wait for their retry in memory (the record's values), where Storm seeks back and
re-reads: `maxUncommittedOffsets` (per partition) bounds both the un-committed offsets and that
memory: polling a partition pauses while it is reached.
"""

from __future__ import annotations

import collections
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from squall.components import SpoutOutputCollector, Spout, TopologyContext
from squall.kafka.admin import ClientErrors, KafkaUnavailable, client_config, describe_error
from squall.kafka.assignment import (
    BEGINNING,
    LAUNCH_TIME_KEY,
    TopicPartitionKey,
    assign_partitions,
    deployment_id,
    first_poll_position,
    task_index,
)
from squall.kafka.config import (
    SPOUT_KEY,
    KafkaConfigError,
    KafkaSpoutConfig,
    ProcessingGuarantee,
    client_props,
    parse_spout_config,
    spout_consumer_props,
)
from squall.kafka.lag import PartitionOffsets, partition_offsets, total_lag
from squall.kafka.offsets import CommitWatch, HoldWatch, OffsetManager
from squall.kafka.records import (
    FieldPicker,
    KafkaRecord,
    Translator,
    default_translator,
    field_picker,
    import_function,
    make_decoder,
)
from squall.kafka.retry import RetrySchedule
from squall.topology_keys import conf_scope

__all__ = ["KafkaSpout", "MessageId"]

log = logging.getLogger("squall.kafka.spout")

MessageId = tuple[str, int, int]  # (topic, partition, offset)
REPORT_EVERY_S = 60.0  # an unreachable broker or a missing topic is reported again this often
EARLY_COMMIT_S = 0.05  # a partition paused at maxUncommittedOffsets commits at most this often
COMMIT_STALL_S = 30.0  # commits unconfirmed this long are reported (again every REPORT_EVERY_S)
DLQ_SOURCE_HEADER = "squall.source"  # "topic/partition/offset" of a dead-lettered record
DLQ_REASON_HEADER = "squall.reason"


def _where(m: Message) -> MessageId:
    topic, partition, offset = m.topic(), m.partition(), m.offset()
    assert topic is not None and partition is not None and offset is not None, "an error, not a record"
    return topic, partition, offset


def _headers(m: Message) -> list[tuple[str, str | bytes | None]]:
    got = m.headers()
    if not got:
        return []
    return list(got.items()) if isinstance(got, dict) else list(got)


def _header_dict(m: Message) -> dict[str, bytes]:
    return {k: v if isinstance(v, bytes) else (v or "").encode() for k, v in _headers(m)}


def _timestamp_ms(m: Message) -> int | None:
    ts_type, ts = m.timestamp()
    return ts if ts_type else None


def _librdkafka_offset(start: int | str) -> int:
    if isinstance(start, int):
        return start
    return OFFSET_BEGINNING if start == BEGINNING else OFFSET_END


def _no_pick(row: tuple[Any, ...]) -> list[Any]:
    raise AssertionError("a custom translator: the spout calls it, not a picker")


class _Snapshot:
    """What the metadata thread last learnt (handed over whole: nothing is lost by replacing)."""

    __slots__ = ("partitions", "starts", "error", "missing")

    def __init__(self, partitions: list[TopicPartitionKey] | None, starts: dict[TopicPartitionKey, int | str],
                 error: str | None, missing: list[str]) -> None:
        self.partitions = partitions  # this task's partitions; None: not known yet
        self.starts = starts  # where each of them starts when newly assigned
        self.error = error
        self.missing = missing  # subscribed topics the cluster does not have


class _MetadataThread:
    """Fetches the cluster's partitions and the group's commits every `partitionRefreshPeriodMs`,
    and this task's partitions' watermarks every `lagRefreshPeriodMs`, with a client of its own,
    off the spout's thread (those calls wait on the broker)."""

    def __init__(self, cfg: KafkaSpoutConfig, props: dict[str, Any], index: int, total: int,
                 deployment: str, name: str, resolve: bool = False, claim: str | None = None) -> None:
        self.cfg = cfg
        # a new partition's start, unless this deployment committed it, is committed with this
        # metadata before the spout is given the partition (None: not)
        self.claim = claim
        self.resolve = resolve  # symbolic starts (beginning, end) as offsets
        self.index = index
        self.total = total
        self.deployment = deployment  # whose commits are this deployment's (`deployment_id`)
        self.errors = ClientErrors()
        self.client = Consumer(client_config(props, self.errors))
        self.out: queue.Queue[_Snapshot] = queue.Queue(maxsize=1)
        self.stop_event = threading.Event()
        self._last: tuple[list[TopicPartitionKey] | None, str | None, list[str]] = (None, None, [])
        self._starts: dict[TopicPartitionKey, int | str] = {}
        # this task's partitions -> (low, high) watermarks as last fetched; replaced whole, read
        # by `KafkaSpout.offset_metrics` on the worker's heartbeat and /metrics threads
        self.watermarks: dict[TopicPartitionKey, tuple[int, int]] = {}
        # and where those partitions start (committed as this deployment's): their committed
        # offset until the spout has taken them (an inactive spout never calls next_tuple)
        self.start_offsets: dict[TopicPartitionKey, int] = {}
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(self.cfg.metadataTimeoutMs / 1000.0 + 5)
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing a client that failed to connect
            pass

    def _run(self) -> None:
        period = self.cfg.partitionRefreshPeriodMs / 1000.0
        lag_period = self.cfg.lagRefreshPeriodMs / 1000.0
        next_refresh = next_marks = time.monotonic()
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now >= next_refresh:
                next_refresh = now + period
                try:
                    self.refresh()
                except Exception as exc:  # noqa: BLE001 - keep refreshing; the spout reports it
                    self._post(self._last[0], f"Kafka at {self.cfg.bootstrapServers}: {exc}", self._last[2])
            if lag_period and now >= next_marks:
                next_marks = now + lag_period
                try:
                    self.fetch_watermarks()
                except Exception as exc:  # noqa: BLE001 - no lag figure until the next one
                    log.debug("fetching watermarks: %s", exc)
                    self.watermarks = {}
            wake = min(next_refresh, next_marks) if lag_period else next_refresh
            self.stop_event.wait(max(0.0, wake - time.monotonic()))

    def fetch_watermarks(self) -> None:
        """This task's partitions' watermarks from the broker (a ListOffsets per partition, as
        Storm's endOffsets / beginningOffsets at each metrics tick). librdkafka's cached ones
        (`cached=True`) come from the fetch responses, which stop while the spout is deactivated
        or a partition is paused: the figure would stand still just as the lag grows. When a
        partition does not answer, the task has no figure until the next fetch."""
        mine, error, _ = self._last
        if not mine or error is not None:
            self.watermarks = {}
            return
        timeout = self.cfg.metadataTimeoutMs / 1000.0
        marks: dict[TopicPartitionKey, tuple[int, int]] = {}
        for topic, partition in mine:
            if self.stop_event.is_set():
                return
            try:
                got = self.client.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout,
                                                        cached=False)
            except KafkaException as exc:
                # no figure rather than a part of one (a lag summed over some partitions would
                # read as a backlog shrinking), and no more waits on a broker that does not answer
                log.debug("watermarks of %s/%d: %s", topic, partition, exc)
                self.watermarks = {}
                return
            if got is None or got[0] < 0 or got[1] < 0:
                self.watermarks = {}
                return
            marks[(topic, partition)] = (got[0], got[1])
        self.start_offsets = {tp: start for tp, start in self._starts.items() if isinstance(start, int)}
        self.watermarks = marks

    def refresh(self) -> None:
        timeout = self.cfg.metadataTimeoutMs / 1000.0
        try:
            md = self.client.list_topics(timeout=timeout)
        except KafkaException as exc:
            self.client.poll(0)  # serves error_cb: a refused login says so
            self._post(self._last[0], describe_error(exc, self.cfg.bootstrapServers, self.errors), self._last[2])
            return
        found = {name: t for name, t in md.topics.items() if t.error is None and self.cfg.matches(name)}
        missing = sorted(set(self.cfg.topics or ()) - set(found))
        partitions = [(name, p) for name, t in found.items() for p in t.partitions]
        mine = assign_partitions(partitions, self.index, self.total)
        if mine != self._last[0]:
            new = [tp for tp in mine if tp not in self._starts]
            if new:
                try:
                    self._starts.update(self._committed(new, timeout))
                except KafkaException as exc:
                    self.client.poll(0)
                    self._post(self._last[0], describe_error(exc, self.cfg.bootstrapServers, self.errors),
                               self._last[2])
                    return
            self._starts = {tp: self._starts[tp] for tp in mine}
        self._post(mine, None, missing)

    def _committed(self, tps: list[TopicPartitionKey], timeout: float) -> dict[TopicPartitionKey, int | str]:
        got = self.client.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout)
        out: dict[TopicPartitionKey, int | str] = {}
        claims: list[TopicPartition] = []
        for tp in got:
            offset = tp.offset if tp.offset >= 0 else None
            ours = False
            if tp.metadata:
                try:
                    ours = json.loads(tp.metadata).get("topologyId") == self.deployment
                except (ValueError, AttributeError):
                    ours = False
            start = first_poll_position(self.cfg.firstPollOffsetStrategy.value, offset, ours)
            if self.resolve and not isinstance(start, int):
                low, high = self.client.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                              timeout=timeout)
                start = low if start == BEGINNING else high
            if self.claim is not None and isinstance(start, int) and not (ours and start == offset):
                claims.append(TopicPartition(tp.topic, tp.partition, start, metadata=self.claim))
            out[(tp.topic, tp.partition)] = start
        if claims:
            # Where this deployment starts, committed as its own before the spout reads (and so
            # before any commit of its own can follow): a worker of this deployment that starts
            # again before the first ack (kill -9, a partition moved back) resumes from there
            # instead of applying EARLIEST / LATEST a second time. Synchronous, on this thread.
            for claimed in self.client.commit(offsets=claims, asynchronous=False) or []:
                if claimed.error is not None:
                    raise KafkaException(claimed.error)
        return out

    def _post(self, mine: list[TopicPartitionKey] | None, error: str | None, missing: list[str]) -> None:
        state = (mine, error, missing)
        if state == self._last and not self.out.empty():
            return
        self._last = state
        snap = _Snapshot(mine, dict(self._starts), error, missing)
        try:
            self.out.get_nowait()  # the one slot holds the newest only
        except queue.Empty:
            pass
        self.out.put_nowait(snap)


class KafkaSpout(Spout):
    """Reads Kafka topics; config under `kafka.spout` (squall.kafka.config.KafkaSpoutConfig).

    The default record translator emits the fields this spout declares (by default these five;
    a topology file's `outputs` may name others of `records.RECORD_FIELDS`, such as
    `timestamp`)."""

    outputs: ClassVar[list[str]] = ["topic", "partition", "offset", "key", "value"]
    # time for retries and commits (monotonic seconds); a test may set it before `open`
    clock: Callable[[], float]

    # symbolic starts (the partition's beginning, its end) resolved to offsets by the metadata
    # thread, and a start not resolved from this deployment's own commit committed as its own
    # before the partition is read (`_MetadataThread`): the stateful spout keeps its positions
    # in its state instead
    resolve_starts: ClassVar[bool] = True
    claim_starts: ClassVar[bool] = True
    # several records per next_tuple call (`emitBatch`); the stateful spout emits one
    batches: ClassVar[bool] = True

    # counters (read by tests and logged at close)
    poison: int
    dropped: int
    dead_lettered: int

    def open(self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        super().open(conf, context, collector)
        if not hasattr(self, "clock"):
            self.clock = time.monotonic
        self.cfg = cfg = parse_spout_config(conf)
        self.name = f"{context.component_id}[{context.task_id}]"
        try:
            fields = context.output_fields("default")
            self.translator: Translator = (import_function(cfg.translator, f"{SPOUT_KEY}.translator")
                                           if cfg.translator else default_translator(fields))
            # the default translator's fast path: the values straight from the record's
            # attributes, its headers and timestamp read only when the fields name them
            self.picker: FieldPicker | None = None if cfg.translator else field_picker(fields)
            # the picker needs nothing but the record's attributes: `_emit` picks them itself
            self.plain_picker = self.picker is not None and not (self.picker.headers or self.picker.timestamp)
            self.pick: Callable[[tuple[Any, ...]], list[Any]] = (self.picker.pick if self.picker is not None
                                                                  else _no_pick)
            self.key_decoder = make_decoder(cfg.keyDecoder, f"{SPOUT_KEY}.keyDecoder")
            self.value_decoder = make_decoder(cfg.valueDecoder, f"{SPOUT_KEY}.valueDecoder")
        except ValueError as exc:
            raise KafkaConfigError(f"{context.component_id}: {exc}") from None
        self.guarantee = cfg.processingGuarantee
        self.at_least_once = self.guarantee is ProcessingGuarantee.AT_LEAST_ONCE
        self.tracked = self.at_least_once or cfg.tupleTrackingEnforced
        self.keep_raw = cfg.deadLetterTopic is not None  # the record as it came, for the dead-letter topic
        topology = conf_scope(conf, context.topology_id)  # its key: no group shared across namespaces
        self.group_id = cfg.groupId or f"squall-{topology}-{context.component_id}"
        # Storm's commit metadata: {"topologyId": this deployment's id, ...}; the first poll of
        # a partition resumes from a commit of this deployment whatever the strategy
        self.deployment = deployment_id(context.topology_id, conf.get(LAUNCH_TIME_KEY))
        self.commit_metadata = json.dumps({"topologyId": self.deployment, "taskId": context.task_id})
        props = client_props(cfg, SPOUT_KEY)
        props["group.id"] = self.group_id
        props.setdefault("client.id", f"squall-{topology}-{context.component_id}-{context.task_id}")
        self.errors = ClientErrors()
        consumer_props = {
            **spout_consumer_props(props),  # fetch.queue.backoff.ms: a prefetch that never runs dry
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest" if cfg.firstPollOffsetStrategy.value.endswith("EARLIEST") else "latest",
            "on_commit": self._on_commit,
        }
        self.consumer = Consumer(client_config(consumer_props, self.errors))
        self.producer_props = props
        self.producer: Producer | None = None  # the dead-letter topic's, made on first use
        index = task_index(context.task_id, context.this_component_tasks())
        self.meta = _MetadataThread(cfg, props, index, len(context.this_component_tasks()), self.deployment,
                                    f"kafka-metadata-{context.component_id}-{context.task_id}",
                                    resolve=self.resolve_starts,
                                    claim=self.commit_metadata if self.claim_starts else None)
        self.starts: dict[TopicPartitionKey, int | str] = {}
        self.assigned: set[TopicPartitionKey] = set()
        self.managers: dict[TopicPartitionKey, OffsetManager | None] = {}  # None: starts at the first record
        self.positions: dict[TopicPartitionKey, int] = {}  # AT_MOST_ONCE / NO_GUARANTEE: next to read
        # the committed offsets Kafka confirmed (and the starts claimed), for the lag of the
        # partitions without an OffsetManager (AT_MOST_ONCE, NO_GUARANTEE)
        self.commits: dict[TopicPartitionKey, int] = {}
        self.paused: set[TopicPartitionKey] = set()
        self.in_flight: dict[MessageId, list[Any]] = {}  # msg id -> values (kept for a retry)
        self.raw: dict[MessageId, Message] = {}  # msg id -> record (only with a dead-letter topic)
        r = cfg.retry
        self.retries: RetrySchedule[MessageId] = RetrySchedule(
            initial_delay_s=r.initialDelayMs / 1000.0, delay_period_s=r.delayPeriodMs / 1000.0,
            max_retries=r.maxRetries, max_delay_s=r.maxDelayMs / 1000.0, partition_of=lambda m: (m[0], m[1]))
        self.buffer: collections.deque[Message] = collections.deque()
        # records one next_tuple call may emit, and what bounds them: the executor's pending
        # tuples are all in `in_flight`, so a batch never takes them past maxSpoutPending
        self.emit_batch = cfg.emitBatch if self.batches else 1
        # with batches, an empty call every `yieldEvery` records
        self.yield_every = cfg.yieldEvery if self.emit_batch > 1 else 0
        self.since_yield = 0
        pending = conf.get("topology.max.spout.pending")
        self.max_pending: int | None = int(pending) if pending else None
        self.poison = self.dropped = self.dead_lettered = 0
        self.commit_period = cfg.offsetCommitPeriodMs / 1000.0
        self.next_commit = self.clock() + self.commit_period
        self.next_early_commit = 0.0
        self.commit_watch = CommitWatch(max(COMMIT_STALL_S, 10 * self.commit_period))
        # an offset that holds its partition's commits this long is reported (a tuple in flight
        # that long has timed out at least once: twice the message timeout)
        timeout = conf.get("topology.message.timeout.secs")
        self.hold_watch = HoldWatch(max(COMMIT_STALL_S, 2 * float(timeout or 30)))
        self.last_poll = 0.0  # when the consumer last served its callbacks (the commits' included)
        self.problem: str | None = None
        self.reported: dict[str, float] = {}
        self.meta.start()

    # -- the loop ---------------------------------------------------------------------------
    def next_tuple(self) -> None:
        now = self.clock()
        if self.meta.out.queue:
            # a snapshot handed over: the queue's deque read without its lock (one atomic test
            # under the GIL; a snapshot posted just after is taken by the next call)
            self._take_metadata(now)
        if self.producer is not None:
            self.producer.poll(0)
        if now >= self.next_commit:
            self.next_commit = now + self.commit_period
            self._commit()
            # judged at the last poll: the confirmations are served by it (a spout busy with its
            # buffer polls seldom, and its confirmations wait for the next poll)
            stalled = self.commit_watch.stalled(self.last_poll)
            if stalled is not None:
                self._report("commit-stalled", f"no commit of group {self.group_id!r} confirmed by Kafka at "
                                               f"{self.cfg.bootstrapServers} for {stalled:.0f}s (its group "
                                               f"coordinator does not answer); the offsets are kept and "
                                               f"committed once it does", now)
            if self.at_least_once:
                self._check_held(now)
        if self.retries.due:
            msg_id = self.retries.pop_ready(now)
            if msg_id is not None and msg_id in self.in_flight:
                self.collector.emit(self.in_flight[msg_id], msg_id=msg_id)
                return
        # up to `emitBatch` buffered records per call (Storm's spout emits one per nextTuple;
        # the per-call checks above are paid once for the batch), never past maxSpoutPending
        room = self._room()
        if self.yield_every:
            left = self.yield_every - self.since_yield
            if left <= 0:
                # one call that emits nothing: the executor ends its batch of calls there and
                # sends what was emitted, as it did after 256 one-record calls (a batch of calls
                # that ran on to maxSpoutPending would go out as one wave and wait for its acks)
                self.since_yield = 0
                return
            room = min(room, left)
        want = room
        buffer = self.buffer
        emit = self._emit
        polled = False
        while room > 0:
            if not buffer:
                if polled or not self.assigned:
                    break
                self._poll()  # at most once per call: a poll's records may all be skipped
                polled = True
                if not buffer:
                    break
            if emit(buffer.popleft()):
                room -= 1
        self.since_yield += want - room

    def _room(self) -> int:
        """How many records this call may emit (at least one): `emitBatch`, and no more than
        maxSpoutPending less the tuples in flight (every tuple the executor counts as pending
        for this task is in `in_flight`, so a batch never takes it past maxSpoutPending)."""
        room = self.emit_batch
        if room > 1 and self.max_pending is not None and self.tracked:
            # at least one, as a one-record call: failed tuples waiting for their retry are in
            # `in_flight` but not pending, and must not stop the reading
            room = max(1, min(room, self.max_pending - len(self.in_flight)))
        return room

    def _poll(self) -> None:
        self._pause_full_partitions()
        try:
            msgs = self.consumer.consume(self.cfg.pollBatchSize, 0)
            self.last_poll = self.clock()
        except KafkaException as exc:
            self._report("consume", describe_error(exc, self.cfg.bootstrapServers, self.errors))
            return
        records = []
        for m in msgs:
            err = m.error()
            if err is None:
                records.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                self._report(f"error:{m.topic()}", f"Kafka at {self.cfg.bootstrapServers}: {m.topic()} "
                                                   f"[{m.partition()}]: {err.str()}")
        if not records:
            return
        if self.guarantee is ProcessingGuarantee.AT_MOST_ONCE:
            # committed before anything is emitted: a crash after this loses them, never repeats
            last: dict[TopicPartitionKey, int] = {}
            for m in records:
                topic, partition, offset = _where(m)
                last[(topic, partition)] = offset + 1
            try:
                self.consumer.commit(offsets=[self._tp(tp, o) for tp, o in last.items()], asynchronous=False)
            except KafkaException as exc:
                self._report("commit", describe_error(exc, self.cfg.bootstrapServers, self.errors))
                return  # not emitted: they come again after the reconnect
            self.commits.update(last)
        self.buffer.extend(records)

    def _emit(self, m: Message) -> bool:
        """Emit the record's tuple; False when it emitted nothing (skipped, poison)."""
        topic, partition, offset = m.topic(), m.partition(), m.offset()  # _where's, one call less
        assert topic is not None and partition is not None and offset is not None, "an error, not a record"
        tp = (topic, partition)
        if tp not in self.assigned:
            return False  # revoked since it was polled
        mgr: OffsetManager | None = None
        if self.at_least_once:
            mgr = self.managers.get(tp)
            if mgr is None:
                mgr = self.managers[tp] = OffsetManager(offset)
            else:
                emitted = mgr.emitted
                if offset < mgr.committed or (emitted and offset <= emitted[-1] and mgr.is_emitted(offset)):
                    return False  # read again after a seek: already handled
        else:
            self.positions[tp] = offset + 1
        msg_id: MessageId = (topic, partition, offset)
        if self.plain_picker:
            # the default translator without headers or timestamp (`_values`' first branch, inlined)
            try:
                raw_key, raw_value = m.key(), m.value()
                key = None if raw_key is None else self.key_decoder(raw_key)
                value = None if raw_value is None else self.value_decoder(raw_value)
            except Exception as exc:  # noqa: BLE001 - the user's decoder refused it
                self._poison(m, msg_id, mgr, exc)
                return False
            values = self.pick((topic, partition, offset, key, value, None, None, None))
        else:
            got = self._values(m, msg_id, mgr)
            if got is None:
                return False
            values = got
        if not self.tracked:
            self.collector.emit(values)
            return True
        if mgr is not None:
            emitted = mgr.emitted
            if not emitted or offset > emitted[-1]:  # OffsetManager.add_emitted's usual case, inlined
                emitted.append(offset)
                mgr.latest_emitted = offset
            else:
                mgr.add_emitted(offset)
        self.in_flight[msg_id] = values
        if self.keep_raw:
            self.raw[msg_id] = m
        self.collector.emit(values, msg_id=msg_id)
        return True

    def _values(self, m: Message, msg_id: MessageId, mgr: OffsetManager | None) -> list[Any] | None:
        """The record's tuple values; None when it emits none: a poison record (handled here) or
        one the translator skips (processed: `mgr` counts it acked)."""
        topic, partition, offset = msg_id
        picker = self.picker
        try:
            raw_key, raw_value = m.key(), m.value()
            key = None if raw_key is None else self.key_decoder(raw_key)
            value = None if raw_value is None else self.value_decoder(raw_value)
            if picker is not None:  # the default translator: never None, never raises
                headers = _header_dict(m) if picker.headers else None
                ts_ms = _timestamp_ms(m) if picker.timestamp else None
                return picker.pick((topic, partition, offset, key, value, headers,
                                    None if ts_ms is None else ts_ms / 1000.0, ts_ms))
            record = KafkaRecord(topic, partition, offset, key, value, _header_dict(m), _timestamp_ms(m))
            values = self.translator(record)
        except Exception as exc:  # noqa: BLE001 - the user's decoder or translator refused it
            self._poison(m, msg_id, mgr, exc)
            return None
        if values is None and not self.cfg.emitNullTuples:
            if mgr is not None:  # skipped for good: processed
                mgr.add_emitted(offset)
                mgr.add_acked(offset)
            return None
        return list(values or ())

    # -- acks ------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        key: MessageId = tuple(msg_id)
        if self.in_flight.pop(key, None) is None:
            return
        if self.keep_raw:
            self.raw.pop(key, None)
        if self.retries.failing:  # it may have failed before: its failure count goes
            self.retries.remove(key)
        mgr = self.managers.get((key[0], key[1]))
        if mgr is not None:
            mgr.add_acked(key[2])

    def fail(self, msg_id: Any) -> None:
        key: MessageId = tuple(msg_id)
        if key not in self.in_flight:
            return
        if self.guarantee is not ProcessingGuarantee.AT_LEAST_ONCE:
            self.in_flight.pop(key, None)
            return
        if self.retries.schedule(key, self.clock()):
            return
        # retries spent: to the dead-letter topic, or dropped (counted); the partition moves on
        self.in_flight.pop(key, None)
        m = self.raw.pop(key, None)
        if self.cfg.deadLetterTopic is not None and m is not None:
            self._dead_letter(m, key, f"failed {self.cfg.retry.maxRetries + 1} times")
            return
        self.dropped += 1
        log.warning("%s: %s/%d/%d failed %d times: dropped (no deadLetterTopic)", self.name, key[0], key[1],
                    key[2], self.cfg.retry.maxRetries + 1)
        mgr = self.managers.get((key[0], key[1]))
        if mgr is not None:
            mgr.add_acked(key[2])

    # -- poison records and the dead-letter topic ---------------------------------------------
    def _poison(self, m: Message, msg_id: MessageId, mgr: OffsetManager | None, exc: Exception) -> None:
        self.poison += 1
        reason = f"{type(exc).__name__}: {exc}"
        where = f"{msg_id[0]}/{msg_id[1]}/{msg_id[2]}"
        log.warning("%s: poison record %s (topic/partition/offset): %s%s", self.name, where, reason,
                    f"; sent to {self.cfg.deadLetterTopic}" if self.cfg.deadLetterTopic else "; skipped")
        self._report(f"poison:{where}", f"{self.context.component_id}: poison record {where} "
                                         f"(topic/partition/offset): {reason}")
        if mgr is not None:
            mgr.add_emitted(msg_id[2])
        if self.cfg.deadLetterTopic is not None:
            self._dead_letter(m, msg_id, f"poison: {reason}")
        elif mgr is not None:
            mgr.add_acked(msg_id[2])

    def _dead_letter(self, m: Message, msg_id: MessageId, reason: str) -> None:
        """Write the record as it came to the dead-letter topic; its offset counts as processed
        once the broker confirmed the write (until then the commits wait for it)."""
        assert self.cfg.deadLetterTopic is not None
        if self.producer is None:
            self.producer = Producer(client_config(
                {**self.producer_props, "acks": "all", "enable.idempotence": True}, self.errors))
        headers = _headers(m)
        headers.append((DLQ_SOURCE_HEADER, f"{msg_id[0]}/{msg_id[1]}/{msg_id[2]}".encode()))
        headers.append((DLQ_REASON_HEADER, reason.encode("utf-8", "replace")))

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                self._report("dlq", f"{self.context.component_id}: writing {msg_id[0]}/{msg_id[1]}/{msg_id[2]} "
                                    f"to {self.cfg.deadLetterTopic} failed: {err.str()}; trying again")
                self._dead_letter(m, msg_id, reason)
                return
            self.dead_lettered += 1
            mgr = self.managers.get((msg_id[0], msg_id[1]))
            if mgr is not None:
                mgr.add_acked(msg_id[2])

        while True:
            try:
                self.producer.produce(self.cfg.deadLetterTopic, value=m.value(), key=m.key(), headers=headers,
                                      on_delivery=delivered)
                return
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as exc:  # refused at once (larger than message.max.bytes): dropped
                self.dropped += 1
                where = f"{msg_id[0]}/{msg_id[1]}/{msg_id[2]}"
                self._report(f"dlq:{where}", f"{self.context.component_id}: {where} cannot go to "
                                             f"{self.cfg.deadLetterTopic} ({describe_error(exc, self.cfg.bootstrapServers)})"
                                             f": dropped")
                mgr = self.managers.get((msg_id[0], msg_id[1]))
                if mgr is not None:
                    mgr.add_acked(msg_id[2])
                return

    # -- commits -----------------------------------------------------------------------------
    def _tp(self, tp: TopicPartitionKey, offset: int) -> TopicPartition:
        return TopicPartition(tp[0], tp[1], offset, metadata=self.commit_metadata)

    def _commit_offsets(self, only: set[TopicPartitionKey] | None = None) -> list[TopicPartition]:
        out = []
        if self.guarantee is ProcessingGuarantee.AT_LEAST_ONCE:
            for tp, mgr in self.managers.items():
                if mgr is not None and (only is None or tp in only):
                    nxt = mgr.next_commit_offset()
                    if nxt is not None:
                        out.append(self._tp(tp, nxt))
        elif self.guarantee is ProcessingGuarantee.NO_GUARANTEE:
            for tp, pos in self.positions.items():
                if only is None or tp in only:
                    out.append(self._tp(tp, pos))
        return out

    def _commit(self, only: set[TopicPartitionKey] | None = None, sync: bool = False) -> None:
        offsets = self._commit_offsets(only)
        if not offsets:
            return
        try:
            if sync:
                self._on_commit(None, self.consumer.commit(offsets=offsets, asynchronous=False))
            else:
                self.commit_watch.sent(self.clock())
                self.consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._report("commit", describe_error(exc, self.cfg.bootstrapServers, self.errors))

    def _check_held(self, now: float) -> None:
        """Report a partition whose commits have waited on one offset for `hold_watch.stall_s`,
        with what became of that offset's tuple."""
        for tp, mgr in self.managers.items():
            offset = None if mgr is None else mgr.first_unacked()
            stood = self.hold_watch.update(tp, offset, now)
            if stood is None or offset is None:
                continue
            msg_id = (tp[0], tp[1], offset)
            fails = self.retries.num_fails(msg_id)
            if msg_id not in self.in_flight:
                fate = "its tuple is not in flight (acked or failed under another id: a defect)"
            elif self.retries.is_scheduled(msg_id):
                fate = f"it failed {fails} times and waits for its retry"
            elif fails:
                fate = f"it failed {fails} times; its retry is in flight"
            else:
                fate = "its tuple is in flight, neither acked nor failed"
            self._report(f"held:{tp[0]}/{tp[1]}", f"the commits of {tp[0]} [{tp[1]}] have waited {stood:.0f}s "
                                                  f"on offset {offset}: {fate}", now)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        # served on this thread, by consume(): the bookkeeping moves only once Kafka has it
        if err is not None:
            log.warning("%s: committing offsets to %s failed: %s", self.name, self.cfg.bootstrapServers, err.str())
            return
        self.commit_watch.confirmed()  # the coordinator answered (a refused partition is reported)
        for tp in partitions:
            if tp.error is not None:
                self._report(f"commit:{tp.topic}/{tp.partition}",
                             f"Kafka at {self.cfg.bootstrapServers} refused the commit of {tp.topic} "
                             f"[{tp.partition}] at {tp.offset} for group {self.group_id!r}: {tp.error.str()}")
                continue
            if tp.offset < 0:
                continue
            key = (tp.topic, tp.partition)
            mgr = self.managers.get(key)
            if mgr is not None:
                mgr.commit(tp.offset)
            elif key in self.assigned:
                self.commits[key] = tp.offset

    # -- assignment ----------------------------------------------------------------------------
    def _take_metadata(self, now: float) -> None:
        try:
            snap = self.meta.out.get_nowait()
        except queue.Empty:
            return
        if snap.error is not None:
            self._report("metadata", snap.error, now)
        elif self.problem is not None:
            log.info("%s: Kafka at %s reachable again", self.name, self.cfg.bootstrapServers)
            self.problem = None
            self.reported.pop("metadata", None)
        for topic in snap.missing:
            self._report(f"missing:{topic}", f"{self.context.component_id}: topic {topic!r} does not exist at "
                                             f"{self.cfg.bootstrapServers}; waiting for it", now)
        if snap.partitions is not None and set(snap.partitions) != self.assigned:
            self._reassign(set(snap.partitions), snap.starts)

    def _reassign(self, wanted: set[TopicPartitionKey], starts: Mapping[TopicPartitionKey, int | str]) -> None:
        revoked = self.assigned - wanted
        added = sorted(wanted - self.assigned)
        if revoked:
            self._commit(revoked)  # what is done so far (a later ack of theirs is ignored)
            try:
                self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in revoked])
            except KafkaException as exc:
                log.warning("%s: unassigning %s: %s", self.name, sorted(revoked), exc)
            for tp in revoked:
                self.managers.pop(tp, None)
                self.positions.pop(tp, None)
                self.commits.pop(tp, None)
                self.paused.discard(tp)
            for msg_id in [m for m in self.in_flight if (m[0], m[1]) in revoked]:
                self.in_flight.pop(msg_id, None)
                self.raw.pop(msg_id, None)
            self.retries.retain_partitions(wanted)
            self.hold_watch.retain(set(wanted))
            self.buffer = collections.deque(m for m in self.buffer if (m.topic(), m.partition()) not in revoked)
        self.starts = dict(starts)
        if added:
            tps = []
            for tp in added:
                start = self._starting(tp, starts.get(tp, BEGINNING))
                self._track_start(tp, start)
                if isinstance(start, int) and self.claim_starts:
                    self.commits[tp] = start  # the metadata thread committed it as this deployment's
                tps.append(TopicPartition(tp[0], tp[1], _librdkafka_offset(start)))
            self.consumer.incremental_assign(tps)
        self.assigned = set(wanted)
        log.info("%s: reads %s (added %s, revoked %s)", self.name, sorted(wanted), added, sorted(revoked))

    def _starting(self, tp: TopicPartitionKey, start: int | str) -> int | str:
        """Where a newly assigned partition is read from (the stateful spout: its state's)."""
        return start

    def _track_start(self, tp: TopicPartitionKey, start: int | str) -> None:
        # a symbolic start (not resolved): the committed point is the first record read
        self.managers[tp] = OffsetManager(start) if isinstance(start, int) else None

    def _pause_full_partitions(self) -> None:
        limit = self.cfg.maxUncommittedOffsets
        full, free = [], []
        for tp, mgr in self.managers.items():
            n = mgr.num_uncommitted if mgr is not None else 0
            if n >= limit and tp not in self.paused:
                full.append(tp)
            elif n < limit and tp in self.paused:
                free.append(tp)
        if full:
            self.consumer.pause([TopicPartition(t, p) for t, p in full])
            self.paused.update(full)
        if self.paused and self.guarantee is ProcessingGuarantee.AT_LEAST_ONCE:
            # a full partition commits what is done at once rather than idle until the period
            # ends; it resumes when Kafka confirms (the callback comes with the next consume)
            now = self.clock()
            if now >= self.next_early_commit:
                self.next_early_commit = now + EARLY_COMMIT_S
                self._commit(set(self.paused))
        if free:
            self.consumer.resume([TopicPartition(t, p) for t, p in free])
            self.paused.difference_update(free)

    # -- lag (storm-kafka-client's KafkaOffsetMetric) -------------------------------------------------
    def offset_metrics(self) -> list[PartitionOffsets]:
        """Each assigned partition's offsets and lag (squall.kafka.lag), from the watermarks the
        metadata thread fetched last and this spout's committed and emitted offsets. Called on
        the worker's heartbeat and /metrics threads, not the spout's: it reads plain attributes
        (copies of the dicts the spout thread changes), and the spout's own work per record is
        unchanged. The partitions are those the metadata thread fetched watermarks for (this
        task's, also before the spout has taken them: an inactive spout reads nothing, and its
        lag grows all the same). A spout not yet opened (the heartbeat can come first) has none."""
        meta: _MetadataThread | None = getattr(self, "meta", None)
        if meta is None:
            return []
        marks = meta.watermarks
        if not marks:
            return []
        completed, emitted = self._offsets_now()
        for tp, start in meta.start_offsets.items():
            if completed.get(tp) is None:
                completed[tp] = start
        return partition_offsets(marks, marks, completed, emitted)

    def lag(self) -> int | None:
        """Storm's totalSpoutLag over this task's partitions (None: no watermarks yet)."""
        return total_lag(self.offset_metrics())

    def _offsets_now(self) -> tuple[dict[TopicPartitionKey, int | None], dict[TopicPartitionKey, int | None]]:
        """Per partition: the committed offset (latestCompletedOffset) and the last emitted one."""
        managers = dict(self.managers)
        commits = dict(self.commits)
        positions = dict(self.positions)
        completed: dict[TopicPartitionKey, int | None] = {}
        emitted: dict[TopicPartitionKey, int | None] = {}
        for tp in set(managers) | set(commits) | set(positions):
            mgr = managers.get(tp)
            if mgr is not None:
                completed[tp], emitted[tp] = mgr.committed, mgr.latest_emitted
            else:
                pos = positions.get(tp)
                completed[tp], emitted[tp] = commits.get(tp), None if pos is None else pos - 1
        return completed, emitted

    # -- reporting -------------------------------------------------------------------------------
    def _report(self, key: str, message: str, now: float | None = None) -> None:
        """Log and report `message` (one line, no traceback), at most every REPORT_EVERY_S per key."""
        now = self.clock() if now is None else now
        last = self.reported.get(key)
        if last is not None and now - last < REPORT_EVERY_S:
            return
        self.reported[key] = now
        if key == "metadata":
            self.problem = message
        log.warning("%s: %s", self.name, message)
        self.collector.report_error(KafkaUnavailable(message))  # not raised: no traceback

    # -- lifecycle --------------------------------------------------------------------------------
    def deactivate(self) -> None:
        self._commit()

    def close(self) -> None:
        self.meta.stop_event.set()
        try:
            self._commit(sync=True)
        except Exception as exc:  # noqa: BLE001 - closing: say it, go on
            log.warning("%s: the last commit failed: %s", self.name, exc)
        if self.producer is not None:
            left = self.producer.flush(10)
            if left:
                log.warning("%s: %d dead-letter records not confirmed at close", self.name, left)
        try:
            self.consumer.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: closing the consumer: %s", self.name, exc)
        self.meta.stop()
        log.info("%s: closed (poison %d, dropped %d, dead-lettered %d)", self.name, self.poison, self.dropped,
                 self.dead_lettered)
