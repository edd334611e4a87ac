"""firstPollOffsetStrategy against resubmission, on the session's real broker, with KafkaSpouts
opened by hand (no workers) as the deployments of one topology would open them: storm-kafka-client's
semantics, where EARLIEST and LATEST apply at every submission of the topology, regardless of
previous commits (even the topology's own under the same name), while a worker of the same
deployment that starts again resumes from its commits; UNCOMMITTED_* resume from any commit of the
group."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from squall.kafka import KafkaSpout
from squall.kafka.assignment import LAUNCH_TIME_KEY
from squall.kafka.broker import EmbeddedKafka
from kafka_fixtures import SpoutCollector as Collector, SpoutContext, committed, new_topic, produce

pytestmark = pytest.mark.integration

TOPOLOGY = "clicks"  # one name for every submission: what tells them apart is the launch time


def deployment(broker: EmbeddedKafka, topic: str, group: str, launched: float, strategy: str, *, expect: int,
               then: Callable[[], None] | None = None, quiet_s: float = 2.0) -> list[str]:
    """One deployment's spout task: opened with the topology submitted at `launched`, run until it
    emitted `expect` records and `quiet_s` more (anything past `expect` is a failure of the
    caller's assertion), every tuple acked, then closed (its last commit synchronous). `then` runs
    once the spout has its partitions and has fetched for a second. The values it emitted."""
    spout = KafkaSpout()
    out = Collector()
    conf = {"topology.name": TOPOLOGY, LAUNCH_TIME_KEY: launched, "topology.max.spout.pending": 1000,
            "kafka.spout": {"bootstrapServers": broker.bootstrap_servers, "topics": [topic], "groupId": group,
                            "firstPollOffsetStrategy": strategy, "offsetCommitPeriodMs": 100,
                            "partitionRefreshPeriodMs": 200}}
    spout.open(conf, SpoutContext(TOPOLOGY, ["partition", "offset", "value"]), out)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 60
        assigned_at: float | None = None
        done_at: float | None = None
        while time.monotonic() < deadline:
            spout.next_tuple()
            for msg_id in out.ids:
                spout.ack(msg_id)
            out.ids.clear()
            now = time.monotonic()
            if assigned_at is None and spout.assigned:
                assigned_at = now
            if then is not None and assigned_at is not None and now - assigned_at > 1.0:
                then()
                then = None
            settled = assigned_at is not None and now - assigned_at > 1.0
            if then is None and settled and len(out.values) >= expect:
                if done_at is None:
                    done_at = now
                elif now - done_at > quiet_s:
                    break
            time.sleep(0.001)
        else:
            raise AssertionError(f"{strategy} at {launched}: {len(out.values)} of {expect} records in 60 s; "
                                 f"{out.errors}")
    finally:
        spout.close()
    assert not out.errors, out.errors
    return sorted(v[2] for v in out.values)


def records(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:03d}".encode() for i in range(n)]


def test_earliest_and_latest_apply_at_every_submission_and_not_on_a_restart(kafka_broker: EmbeddedKafka) -> None:
    topic = new_topic(kafka_broker, 2, prefix="firstpoll")
    group = f"squall-{TOPOLOGY}-{uuid.uuid4().hex[:6]}"
    produce(kafka_broker, topic, records("a", 20))
    a = sorted(v.decode() for v in records("a", 20))

    # the first submission reads the topic from its start and commits its end
    assert deployment(kafka_broker, topic, group, 1000.0, "EARLIEST", expect=20) == a
    assert sum(committed(kafka_broker, group, topic).values()) == 20

    # its worker started again (same deployment): from its own commits, EARLIEST or not
    produce(kafka_broker, topic, records("b", 6))
    b = sorted(v.decode() for v in records("b", 6))
    assert deployment(kafka_broker, topic, group, 1000.0, "EARLIEST", expect=6) == b

    # submitted again under the same name: EARLIEST reads from the start again, whatever the commits
    assert deployment(kafka_broker, topic, group, 2000.0, "EARLIEST", expect=26) == sorted(a + b)
    assert sum(committed(kafka_broker, group, topic).values()) == 26

    # UNCOMMITTED_EARLIEST resumes from the group's commits, whichever submission made them
    produce(kafka_broker, topic, records("c", 3))
    c = sorted(v.decode() for v in records("c", 3))
    assert deployment(kafka_broker, topic, group, 3000.0, "UNCOMMITTED_EARLIEST", expect=3) == c

    # LATEST, submitted again: from the end, past records the commits would have given it (d)
    produce(kafka_broker, topic, records("d", 4))
    e = sorted(v.decode() for v in records("e", 5))
    assert deployment(kafka_broker, topic, group, 4000.0, "LATEST", expect=5,
                      then=lambda: produce(kafka_broker, topic, records("e", 5))) == e
    assert sum(committed(kafka_broker, group, topic).values()) == 20 + 6 + 3 + 4 + 5

    # and UNCOMMITTED_LATEST resumes from there, as LATEST's own restart would
    produce(kafka_broker, topic, records("f", 2))
    f = sorted(v.decode() for v in records("f", 2))
    assert deployment(kafka_broker, topic, group, 5000.0, "UNCOMMITTED_LATEST", expect=2) == f

    # a restart of that deployment with LATEST resumes from its commits too: g is read, not skipped
    produce(kafka_broker, topic, records("g", 3))
    g = sorted(v.decode() for v in records("g", 3))
    assert deployment(kafka_broker, topic, group, 5000.0, "LATEST", expect=3) == g
