"""firstPollOffsetStrategy across real submissions of one topology (the worker passes the
deployment's launch time to its spouts, `topology.launch.time.secs`): killed and submitted again
under the same name and group, an EARLIEST topology reads its topic from the start again, as
Storm's does, while an UNCOMMITTED_EARLIEST one resumes from its commits and reads nothing twice."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import stop_topology, wait_for, wait_running
from kafka_fixtures import committed, new_topic, pipeline, produce, read_to_end

from squall.kafka.broker import EmbeddedKafka
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration


def offsets(records: list[Any]) -> list[tuple[int, int]]:
    """(partition, offset) of the source record behind each output (Tag's values)."""
    return [(int(p), int(o)) for p, o, _ in (m.value().decode().split(":", 2) for m in records)]


@pytest.mark.parametrize(("strategy", "again"), [("EARLIEST", True), ("UNCOMMITTED_EARLIEST", False)])
def test_a_resubmission_rereads_with_earliest_and_resumes_with_uncommitted_earliest(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster], strategy: str, again: bool) -> None:
    n = 200
    source, sink = new_topic(kafka_broker, 2), new_topic(kafka_broker, 1)
    produce(kafka_broker, source, [f"r{i}".encode() for i in range(n)])
    name = f"resubmit-{strategy.lower().replace('_', '-')}"
    cluster = make_cluster(nodes=1, slots=2)
    seen: list[int] = []  # outputs after each submission
    for submission in (1, 2):
        topo = pipeline(name, kafka_broker, source, sink, spout={"firstPollOffsetStrategy": strategy})
        cluster.submit(topo)
        wait_running(cluster, topo)
        before = seen[-1] if seen else 0
        if submission == 1 or again:
            # every source record (once more) after what the sink held before this submission
            wait_for(lambda: len(set(offsets(read_to_end(kafka_broker, sink)[before:]))) == n or None, 90,
                     f"every record after submission {submission}", cluster, 0.5)
        else:
            time.sleep(8)  # long enough to have read the topic again, had it started over
        wait_for(lambda: sum(committed(kafka_broker, f"g-{name}", source).values()) == n or None, 30,
                 "the commits to reach the end", cluster, 0.5)
        stop_topology(cluster, name)
        seen.append(len(read_to_end(kafka_broker, sink)))
    if not again:
        assert seen[1] == seen[0], f"{seen[1] - seen[0]} records read again after the resubmission"
