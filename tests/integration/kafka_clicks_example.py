"""examples/kafka-clicks as its integration tests run it (test_example_kafka_clicks,
test_kafka_clicks_late): the example's topology.yaml on the session's Kafka broker, with fresh
topics and windows shortened so that a short run closes a few, submitted to a local cluster of
two nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import yaml

from squall.kafka.broker import EmbeddedKafka
from squall.models.v1alpha1 import Topology
from squall.validation import parse_topology
from squall_operator.local import LocalCluster
from helpers import import_example, wait_running
from kafka_fixtures import new_topic

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kafka-clicks"
WINDOW_S = 4  # the example's 10 s windows, shortened so that a short run closes a few of them
LAG_S = 2


def example_topology(broker: EmbeddedKafka, topics: dict[str, str]) -> Topology:
    """The example's topology.yaml with this broker, these topics (the example's topic name ->
    this run's) and `WINDOW_S` windows with a lag of `LAG_S`."""
    data = yaml.safe_load((EXAMPLE / "topology.yaml").read_text())
    for c in data["spec"]["spouts"] + data["spec"]["bolts"]:
        for key in ("kafka.spout", "kafka.bolt"):
            cfg = c.get("config", {}).get(key)
            if cfg is None:
                continue
            cfg["bootstrapServers"] = broker.bootstrap_servers
            if "topics" in cfg:
                cfg["topics"] = [topics[t] for t in cfg["topics"]]
            for field in ("topic", "deadLetterTopic"):
                if field in cfg:
                    cfg[field] = topics[cfg[field]]
    count = next(b for b in data["spec"]["bolts"] if b["name"] == "count")
    count["window"].update({"windowLength": f"{WINDOW_S}s", "lag": f"{LAG_S}s"})
    return parse_topology(data, source=str(EXAMPLE / "topology.yaml"))


@dataclass
class ClicksRun:
    """The example running: its cluster and topology, its topics (the example's name -> this
    run's), and the example's modules `produce` (the click producer and the recount) and
    `kafka_clicks` (the components' rules)."""

    cluster: LocalCluster
    topo: Topology
    topics: dict[str, str]
    produce: ModuleType
    clicks: ModuleType


def start_clicks(broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> ClicksRun:
    """The example on fresh topics (3 input partitions), running on 2 nodes of 1 slot each."""
    produce, clicks = import_example(EXAMPLE, "produce", "kafka_clicks")
    topics = {"clicks": new_topic(broker, 3, prefix="clicks"),
              "click-counts": new_topic(broker, 1, prefix="counts"),
              "clicks-late": new_topic(broker, 1, prefix="late"),
              "clicks-dlq": new_topic(broker, 1, prefix="dlq")}
    topo = example_topology(broker, topics)
    cluster = make_cluster(nodes=2, slots=1, search_paths=[str(EXAMPLE)])
    cluster.submit(topo)
    wait_running(cluster, topo)
    return ClicksRun(cluster, topo, topics, produce, clicks)
