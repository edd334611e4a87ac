"""The transactional Kafka sink's pure parts (squall.kafka.txn) with plain values: the recovery
decision from the state's last committed interval and the task's last committed marker, the
interval's round trip through the state's value types, markers, config and ids."""

from __future__ import annotations

import pytest

from squall.kafka.config import KafkaConfigError
from squall.kafka.txn import (
    Interval,
    Marker,
    Recovery,
    decode_marker,
    encode_marker,
    parse_txn_bolt_config,
    record_size,
    recovery,
    transactional_id,
)


def test_no_interval_in_the_state_means_nothing_to_write() -> None:
    assert recovery(None, None) is Recovery.NOTHING
    assert recovery(None, Marker(7, "a")) is Recovery.NOTHING


def test_the_interval_kafka_committed_last_is_not_written_again() -> None:
    assert recovery(Marker(5, "x"), Marker(5, "x")) is Recovery.DONE


def test_an_interval_the_state_committed_and_kafka_did_not_is_written_again() -> None:
    # the crash came between the state's PREPARE and Kafka's commit (rolled forward by the COMMIT)
    assert recovery(Marker(5, "x"), Marker(4, "w")) is Recovery.REWRITE
    assert recovery(Marker(5, "x"), None) is Recovery.REWRITE  # Kafka never committed anything


def test_txids_that_began_again_are_told_apart_by_the_interval_id() -> None:
    # a state store reset: txids restart from 0 while old markers say 50; the last marker by
    # offset is what counts, and equal ids (not txids) say "done"
    assert recovery(Marker(3, "new"), Marker(2, "older")) is Recovery.REWRITE
    assert recovery(Marker(3, "new"), Marker(3, "new")) is Recovery.DONE


def test_kafka_ahead_of_the_state_is_a_conflict_not_a_rewrite() -> None:
    assert recovery(Marker(5, "x"), Marker(6, "y")) is Recovery.CONFLICT
    assert recovery(Marker(5, "x"), Marker(5, "y")) is Recovery.CONFLICT


def test_the_interval_survives_the_states_value_types() -> None:
    iv = Interval(9, "abc", [("out", b"k", b"v"), ("out", None, b"w")])
    raw = iv.to_state()
    # read back from the store, sequences are lists
    assert Interval.from_state([raw[0], raw[1], [list(r) for r in raw[2]]]) == iv
    assert Interval.from_state(None) is None
    assert recovery(iv, Marker(9, "abc")) is Recovery.DONE


def test_markers_round_trip_and_garbage_is_not_a_marker() -> None:
    assert decode_marker(encode_marker(Marker(3, "id"), 4)) == Marker(3, "id")
    assert decode_marker(b"not json") is None
    assert decode_marker(b'{"txid": 1}') is None
    assert decode_marker(None) is None


def test_config_keys_and_bounds() -> None:
    cfg = parse_txn_bolt_config({"kafka.bolt": {"bootstrapServers": "h:1", "topic": "out",
                                                "maxIntervalBytes": 4096}})
    assert cfg.maxIntervalBytes == 4096 and cfg.markerTopic is None and cfg.commitTimeoutMs == 10_000
    with pytest.raises(KafkaConfigError, match="kafka.bolt.maxIntervalBytes"):
        parse_txn_bolt_config({"kafka.bolt": {"bootstrapServers": "h:1", "topic": "out", "maxIntervalBytes": 1}})
    with pytest.raises(KafkaConfigError, match="kafka.bolt"):
        parse_txn_bolt_config({"kafka.bolt": {"bootstrapServers": "h:1"}})


def test_ids_and_sizes() -> None:
    assert transactional_id("topo", "out", 3) == "squall-topo-out-3"
    assert record_size(("out", b"ab", None)) == 3 + 2 + 16
