"""The real Apache Kafka broker the Kafka tests run on (squall.kafka.broker): topics, records in
and out, the SASL/PLAIN listener, a restart with its data, and `squall kafka up`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from childproc import die_with_this_process

from squall.kafka.admin import KafkaUnavailable, create_topics
from squall.kafka.broker import EmbeddedKafka
from kafka_fixtures import SASL_PASSWORD, SASL_USER, consume_all, new_topic, produce

pytestmark = pytest.mark.integration


def test_records_go_in_and_come_out(kafka_broker: EmbeddedKafka) -> None:
    topic = new_topic(kafka_broker, partitions=3)
    # Keyed: a keyless batch may all go to one partition (librdkafka's sticky partitioner sticks to
    # one for sticky.partitioning.linger.ms), while 300 distinct keys hash onto all three.
    values = [str(i).encode() for i in range(300)]
    produce(kafka_broker, topic, values, keys=values)
    got = consume_all(kafka_broker, topic, 300)
    assert sorted(int(m.value()) for m in got) == list(range(300))
    assert {m.partition() for m in got} == {0, 1, 2}


def test_creating_an_existing_topic_is_nothing(kafka_broker: EmbeddedKafka) -> None:
    topic = new_topic(kafka_broker)
    assert create_topics(kafka_broker.bootstrap_servers, {topic: 1}) == []


def test_sasl_plain_takes_the_right_password_and_refuses_a_wrong_one(kafka_broker: EmbeddedKafka) -> None:
    topic = new_topic(kafka_broker)
    sasl = {"bootstrap.servers": kafka_broker.sasl_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": SASL_USER}
    assert topic in create_topics_listing({**sasl, "sasl.password": SASL_PASSWORD})
    with pytest.raises(KafkaUnavailable, match=rf"Kafka at {kafka_broker.sasl_bootstrap_servers} refused the credentials"):
        create_topics({**sasl, "sasl.password": "wrong"}, {"never": 1}, timeout=3)


def create_topics_listing(conf: dict[str, str]) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(conf).list_topics(timeout=10).topics)


def test_an_unreachable_broker_is_one_line_naming_it() -> None:
    from squall.zkserver import _free_port

    where = f"127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as info:
        create_topics(where, {"x": 1}, timeout=3)
    assert str(info.value).startswith(f"no Kafka broker reachable at {where}")
    assert "\n" not in str(info.value)
    assert time.monotonic() - t0 < 10


def test_a_restarted_broker_keeps_its_topics_and_records(kafka_broker: EmbeddedKafka) -> None:
    """The session's broker, stopped and started again (the same ports and data)."""
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, [b"a", b"b"])
    port, sasl = kafka_broker.port, kafka_broker.sasl_bootstrap_servers
    kafka_broker.stop(keep_data=True)
    assert not kafka_broker.running
    kafka_broker.start()
    assert (kafka_broker.port, kafka_broker.sasl_bootstrap_servers) == (port, sasl)
    assert [m.value() for m in consume_all(kafka_broker, topic, 2)] == [b"a", b"b"]


def test_a_stopped_broker_leaves_nothing() -> None:
    broker = EmbeddedKafka(heap="256m")
    broker.start()
    workdir, pid = broker.workdir, broker.pid
    assert workdir is not None and pid is not None
    broker.stop()
    assert broker.workdir is None and not os.path.exists(workdir)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_squall_kafka_up_runs_a_broker_until_ctrl_c() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "squall_operator", "kafka", "up", "--port", "0",
                             "--topic", "clicks:2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL, preexec_fn=die_with_this_process())
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("kafka: bootstrap servers 127.0.0.1:"), first + proc.stderr.read() if proc.poll() else first
        bootstrap = first.split()[-1]
        assert proc.stdout.readline().strip() == "kafka: topic clicks (2 partitions)"
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert len(md.topics["clicks"].partitions) == 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the broker went with it
    out = subprocess.run(["pgrep", "-f", f"kafka.Kafka .*{os.sep}squall-kafka-"], capture_output=True, text=True)
    assert str(proc.pid) not in out.stdout
