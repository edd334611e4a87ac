"""The default translator's fast path (`records.field_picker`) against the translator itself."""

from __future__ import annotations

import itertools

import pytest

from squall.kafka.records import RECORD_FIELDS, KafkaRecord, default_translator, field_picker

RECORD = KafkaRecord("clicks", 3, 41, "user-7", {"n": 1}, {"trace": b"abc"}, 1_700_000_000_123)


def row(record: KafkaRecord) -> tuple[object, ...]:
    return (record.topic, record.partition, record.offset, record.key, record.value, record.headers,
            record.timestamp, record.timestamp_ms)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_picker_gives_the_default_translators_values_for_every_choice_of_fields(n: int) -> None:
    for fields in itertools.permutations(RECORD_FIELDS, n):
        assert field_picker(fields)(row(RECORD)) == default_translator(fields)(RECORD), fields


def test_picker_gives_all_fields_in_the_declared_order() -> None:
    fields = list(reversed(RECORD_FIELDS))
    assert field_picker(fields)(row(RECORD)) == default_translator(fields)(RECORD)


def test_picker_says_whether_headers_and_the_timestamp_are_used() -> None:
    assert (field_picker(["value"]).headers, field_picker(["value"]).timestamp) == (False, False)
    assert field_picker(["key", "headers"]).headers and not field_picker(["key", "headers"]).timestamp
    assert field_picker(["timestamp"]).timestamp and field_picker(["timestamp_ms"]).timestamp


def test_picker_returns_a_new_list_each_time() -> None:
    picker = field_picker(["value"])
    first = picker(row(RECORD))
    first.append("x")
    assert picker(row(RECORD)) == [{"n": 1}]


def test_picker_refuses_fields_that_are_not_record_attributes() -> None:
    with pytest.raises(ValueError, match="not record attributes"):
        field_picker(["value", "word"])
