"""The Kafka components' pure parts: settings (storm-kafka-client's names), partition spreading
over tasks (RoundRobinManualPartitioner), first-poll positions, decoders and the translator."""

from __future__ import annotations

import json

import pytest

from squall.kafka import assignment
from squall.kafka.config import (
    FirstPollOffsetStrategy,
    KafkaConfigError,
    ProcessingGuarantee,
    client_props,
    parse_bolt_config,
    parse_spout_config,
    spout_consumer_props,
)
from squall.kafka.records import KafkaRecord, default_translator, make_decoder, make_encoder

pytestmark = pytest.mark.unit


def spout(**kw: object) -> dict[str, object]:
    return {"kafka.spout": {"bootstrapServers": "k:9092", "topics": ["a"], **kw}}


def test_spout_defaults_are_storm_kafka_clients() -> None:
    cfg = parse_spout_config(spout())
    assert cfg.firstPollOffsetStrategy is FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST
    assert cfg.processingGuarantee is ProcessingGuarantee.AT_LEAST_ONCE
    assert cfg.offsetCommitPeriodMs == 30_000
    assert cfg.partitionRefreshPeriodMs == 2_000
    assert (cfg.retry.initialDelayMs, cfg.retry.delayPeriodMs, cfg.retry.maxDelayMs) == (0, 2, 10_000)
    assert cfg.deadLetterTopic is None


def test_a_bad_setting_is_one_line_naming_the_key() -> None:
    with pytest.raises(KafkaConfigError, match=r"^kafka\.spout\.firstPollOffsetStrategy: Input should be"):
        parse_spout_config(spout(firstPollOffsetStrategy="FIRST"))
    with pytest.raises(KafkaConfigError, match=r"^kafka\.spout\.retry\.maxRetries: "):
        parse_spout_config(spout(retry={"maxRetries": -2}))
    with pytest.raises(KafkaConfigError, match=r"kafka\.spout\.offsetCommitPeriod: Extra inputs"):
        parse_spout_config(spout(offsetCommitPeriod=5))
    with pytest.raises(KafkaConfigError, match="exactly one of 'topics'"):
        parse_spout_config(spout(topicPattern="a.*"))
    with pytest.raises(KafkaConfigError, match="not a regular expression"):
        parse_spout_config({"kafka.spout": {"bootstrapServers": "k", "topicPattern": "("}})
    with pytest.raises(KafkaConfigError, match=r"^kafka\.spout: missing"):
        parse_spout_config({})


def test_topics_or_a_pattern() -> None:
    assert parse_spout_config(spout()).matches("a")
    cfg = parse_spout_config({"kafka.spout": {"bootstrapServers": "k", "topicPattern": "clicks-.*"}})
    assert cfg.matches("clicks-eu") and not cfg.matches("views") and not cfg.matches("xclicks-eu")
    assert not parse_spout_config({"kafka.spout": {"bootstrapServers": "k", "topicPattern": ".*"}}).matches(
        "__consumer_offsets")


def test_client_props_pass_through_with_the_password_from_the_environment() -> None:
    cfg = parse_spout_config(spout(props={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
                                   saslPasswordEnv="KPASS"))
    props = client_props(cfg, "kafka.spout", env={"KPASS": "s3cret"})
    assert props == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "bootstrap.servers": "k:9092", "sasl.password": "s3cret"}
    with pytest.raises(KafkaConfigError, match="saslPasswordEnv: environment variable 'KPASS' is not set"):
        client_props(cfg, "kafka.spout", env={})


def test_bolt_needs_one_topic() -> None:
    assert parse_bolt_config({"kafka.bolt": {"bootstrapServers": "k", "topic": "out"}}).valueField == "value"
    with pytest.raises(KafkaConfigError, match="exactly one of 'topic'"):
        parse_bolt_config({"kafka.bolt": {"bootstrapServers": "k"}})
    assert parse_bolt_config({"kafka.bolt": {"bootstrapServers": "k", "mapper": "m:f"}}).mapper == "m:f"


def test_the_spouts_consumer_keeps_its_prefetch_fed_unless_told() -> None:
    # librdkafka's 1000 ms fetch.queue.backoff.ms let a fast spout's queue run dry (half its
    # polls empty); 100 ms unless the topology's props name it
    props = client_props(parse_spout_config(spout()), "kafka.spout")
    assert spout_consumer_props(props)["fetch.queue.backoff.ms"] == 100
    assert spout_consumer_props(props)["bootstrap.servers"] == "k:9092"
    mine = client_props(parse_spout_config(spout(props={"fetch.queue.backoff.ms": 1000})), "kafka.spout")
    assert spout_consumer_props(mine)["fetch.queue.backoff.ms"] == 1000


def test_partitions_spread_round_robin_over_the_tasks() -> None:
    parts = [("b", 0), ("a", 1), ("a", 0), ("b", 1), ("a", 2)]
    got = [assignment.assign_partitions(parts, i, 2) for i in range(2)]
    assert got == [[("a", 0), ("a", 2), ("b", 1)], [("a", 1), ("b", 0)]]
    assert assignment.assign_partitions(parts, 4, 5) == [("b", 1)]
    assert assignment.assign_partitions(parts[:1], 1, 3) == []  # more tasks than partitions: idle
    # a topic gaining a partition re-spreads; every partition still has exactly one reader
    more = parts + [("a", 3)]
    spread = [p for i in range(3) for p in assignment.assign_partitions(more, i, 3)]
    assert sorted(spread) == sorted(more)
    assert assignment.task_index(17, [20, 17, 5]) == 1
    with pytest.raises(ValueError):
        assignment.assign_partitions(parts, 2, 2)


@pytest.mark.parametrize(("strategy", "committed", "ours", "expected"), [
    ("EARLIEST", None, False, assignment.BEGINNING),
    ("EARLIEST", 42, False, assignment.BEGINNING),  # another topology's commit: from the start
    ("EARLIEST", 42, True, 42),  # this topology's own commit: resume
    ("LATEST", None, False, assignment.END),
    ("LATEST", 42, False, assignment.END),
    ("LATEST", 42, True, 42),
    ("UNCOMMITTED_EARLIEST", None, False, assignment.BEGINNING),
    ("UNCOMMITTED_EARLIEST", 42, False, 42),
    ("UNCOMMITTED_LATEST", None, False, assignment.END),
    ("UNCOMMITTED_LATEST", 42, False, 42),
])
def test_first_poll_positions(strategy: str, committed: int | None, ours: bool, expected: object) -> None:
    assert assignment.first_poll_position(strategy, committed, ours) == expected


def test_decoders_and_encoders() -> None:
    assert make_decoder("bytes", "k")(b"\xff") == b"\xff"
    assert make_decoder("utf-8", "k")("é".encode()) == "é"
    assert make_decoder("json", "k")(b'{"a": 1}') == {"a": 1}
    assert make_decoder("json:loads", "k")(b"[1]") == [1]
    with pytest.raises(UnicodeDecodeError):
        make_decoder("utf-8", "k")(b"\xff")
    with pytest.raises(json.JSONDecodeError):
        make_decoder("json", "k")(b"not json")
    with pytest.raises(ValueError, match="valueDecoder: 'nope' is not bytes, utf-8, json or module:function"):
        make_decoder("nope", "valueDecoder")
    with pytest.raises(ValueError, match="valueDecoder: cannot import 'no_such_mod:f'"):
        make_decoder("no_such_mod:f", "valueDecoder")
    assert make_encoder("json", "k")({"a": 1}) == b'{"a":1}'
    assert make_encoder("utf-8", "k")(12) == b"12"
    with pytest.raises(TypeError):
        make_encoder("bytes", "k")("text")


def test_the_default_translator_emits_the_declared_fields() -> None:
    rec = KafkaRecord("clicks", 2, 7, "k", {"u": 1}, {"h": b"v"}, 1_700_000_000_500)
    assert default_translator(["value", "timestamp", "offset"])(rec) == [{"u": 1}, 1_700_000_000.5, 7]
    assert default_translator(["topic", "partition", "key", "headers", "timestamp_ms"])(rec) == [
        "clicks", 2, "k", {"h": b"v"}, 1_700_000_000_500]
    with pytest.raises(ValueError, match=r"output fields \['word'\] are not record attributes"):
        default_translator(["value", "word"])


def test_each_submission_is_its_own_deployment() -> None:
    """Storm's storm id differs with each submission; the spout's commit metadata says which
    submission committed by the topology's name and launch time (milliseconds)."""
    assert assignment.deployment_id("clicks", 1764250000.5) == "clicks-1764250000500"
    assert assignment.deployment_id("clicks", 1764250000.5) != assignment.deployment_id("clicks", 1764250001.0)
    assert assignment.deployment_id("clicks", "1764250000.5") == "clicks-1764250000500"
    assert assignment.deployment_id("clicks", None) == "clicks"  # no launch time: the name alone
