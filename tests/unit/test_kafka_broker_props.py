"""The broker launcher's pure parts: the jar version scripts/setup fetches is the one it runs,
its server.properties, and the error that says how to get the jars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from squall.kafka import broker

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def test_the_pom_fetches_the_version_the_launcher_runs() -> None:
    pom = (REPO / "scripts" / "kafka" / "pom.xml").read_text()
    m = re.search(r"<kafka.version>(.+)</kafka.version>", pom)
    assert m is not None
    assert m.group(1) == broker.KAFKA_VERSION


def test_jars_dir_is_per_version_under_the_cache_or_the_env(tmp_path: Path) -> None:
    assert broker.kafka_jars_dir({"HOME": "/home/u"}) == Path(
        "/home/u/.cache/squall-kafka", broker.KAFKA_VERSION)
    assert broker.kafka_jars_dir({"HOME": "/h", broker.JARS_ENV: str(tmp_path)}) == tmp_path


def test_missing_jars_say_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(broker.KafkaBrokerError, match=r"run scripts/setup.*SQUALL_KAFKA_JARS"):
        broker.kafka_jars({broker.JARS_ENV: str(tmp_path)})


def test_properties_of_one_kraft_node_on_loopback() -> None:
    props = broker.server_properties(data_dir="/d", port=1000, controller_port=1001)
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:1001"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:1000,CONTROLLER://127.0.0.1:1001"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:1000"
    assert props["auto.create.topics.enable"] == "false"
    assert props["offsets.topic.replication.factor"] == "1"
    assert "sasl.enabled.mechanisms" not in props


def test_a_sasl_plain_listener_with_its_users() -> None:
    props = broker.server_properties(data_dir="/d", port=1000, controller_port=1001, sasl_port=1002,
                                     sasl_users={"bob": "b", "alice": "a"})
    assert props["listeners"].endswith(",SASL_PLAINTEXT://127.0.0.1:1002")
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    jaas = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas == ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                    'user_alice="a" user_bob="b";')
    with pytest.raises(broker.KafkaBrokerError, match="at least one user"):
        broker.server_properties(data_dir="/d", port=1, controller_port=2, sasl_port=3)


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """One UUID in 64 encodes to an id starting with "-", which `kafka-storage format -t` reads as
    an option (a bench run failed so): such a draw is thrown away, as Kafka's Uuid.randomUuid does."""
    import uuid

    from squall.kafka.broker import _cluster_id

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" * 16)])
    got = _cluster_id(lambda: next(draws))
    assert got == "EBAQEBAQEBAQEBAQEBAQEA"
    assert not got.startswith("-")
    assert all(not _cluster_id().startswith("-") for _ in range(2000))
