"""`StatefulKafkaSpout`: Kafka read exactly once into a stateful topology's state.

A `KafkaSpout` whose read position per partition lives in the spout's checkpointed state (the
`StatefulSpout` protocol, docs/topology.md "Exactly once with a stateful spout"), not in the
consumer group's offsets: each checkpoint commits the positions together with every stateful
bolt's state, and after a crash (or any rollback) every state and the positions go back to the
same checkpoint and the spout reads on from there, so each record updates the committed state
exactly once. Declare the component `stateful: true`.

What differs from `KafkaSpout`: tuples are not retried one by one (a failure rolls the topology
back to the last checkpoint, which re-reads from its positions); commits to the consumer group
are not made (the group's offsets are not the position); `maxUncommittedOffsets` does not apply
(`maxSpoutPending` bounds what is in flight). A newly assigned partition starts where the state
says, else by `firstPollOffsetStrategy` resolved to an offset at once (so that a rollback finds
the same start). A poison record still goes to the dead-letter topic, which is not part of the
checkpoint: after a rollback it may be written there again. Its lag (`offset_metrics`) counts
from the read position, not from a group commit.
"""

from __future__ import annotations

from typing import Any, ClassVar

from confluent_kafka import KafkaException, Message, TopicPartition

from squall.components import StatefulSpout
from squall.kafka.assignment import TopicPartitionKey
from squall.kafka.spout import KafkaSpout, MessageId, _librdkafka_offset, _where, log

__all__ = ["StatefulKafkaSpout", "state_key"]


def state_key(tp: TopicPartitionKey) -> str:
    """The state's key of a partition's position (the next offset to read)."""
    return f"kafka.position/{tp[0]}/{tp[1]}"


class StatefulKafkaSpout(KafkaSpout, StatefulSpout):
    """Reads Kafka topics with the positions in the checkpointed state (exactly once)."""

    def init_state(self, state: Any) -> None:
        """At the start and after every rollback: read on from the committed positions."""
        self.state = state
        self.buffer.clear()
        self.in_flight.clear()
        self.raw.clear()
        if not self.assigned:
            return
        starts = {tp: self._starting(tp, self.starts.get(tp, 0)) for tp in sorted(self.assigned)}
        self.positions = {tp: start for tp, start in starts.items() if isinstance(start, int)}
        # a fresh assignment at the positions: what was fetched past them is dropped with it
        try:
            self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in starts])
            self.consumer.incremental_assign([TopicPartition(t, p, _librdkafka_offset(start))
                                              for (t, p), start in starts.items()])
        except KafkaException as exc:
            log.warning("%s: seeking back to the committed positions: %s", self.name, exc)
        log.info("%s: rolled back to %s", self.name, dict(sorted(self.positions.items())))

    def _starting(self, tp: TopicPartitionKey, start: int | str) -> int | str:
        saved = self.state.get(state_key(tp)) if getattr(self, "state", None) is not None else None
        return int(saved) if saved is not None else start

    claim_starts: ClassVar[bool] = False  # the position is in the state, not the group's offsets
    batches: ClassVar[bool] = False  # one record per call: its tuples are not in `in_flight`, so a
    # batch bounded by it could pass maxSpoutPending

    def _track_start(self, tp: TopicPartitionKey, start: int | str) -> None:
        if isinstance(start, int):
            self.positions[tp] = start
            self.state.put(state_key(tp), start)

    def _emit(self, m: Message) -> bool:
        topic, partition, offset = _where(m)
        tp = (topic, partition)
        if tp not in self.assigned:
            return False
        pos = self.positions.get(tp)
        if pos is not None and offset < pos:
            return False  # fetched before a rollback's seek
        msg_id: MessageId = (topic, partition, offset)
        values = self._values(m, msg_id, None)
        self.positions[tp] = offset + 1
        self.state.put(state_key(tp), offset + 1)
        if values is None:
            return False
        self.collector.emit(values, msg_id=msg_id)
        return True

    def ack(self, msg_id: Any) -> None:
        pass  # the checkpoint that holds its effects committed; the position was in it

    def fail(self, msg_id: Any) -> None:
        pass  # no replay here: the rollback rewinds the positions to the last checkpoint

    def _commit(self, only: set[TopicPartitionKey] | None = None, sync: bool = False) -> None:
        pass  # the position is the checkpointed state, not the group's offsets

    def _offsets_now(self) -> tuple[dict[TopicPartitionKey, int | None], dict[TopicPartitionKey, int | None]]:
        # no group commits: the lag counts from the read position (the next offset to emit),
        # which the next checkpoint commits with the state
        positions = dict(self.positions)
        return ({tp: pos for tp, pos in positions.items()},
                {tp: pos - 1 for tp, pos in positions.items()})
