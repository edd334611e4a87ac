"""KafkaSpoutRetryExponentialBackoff's schedule on an injected clock (plain numbers)."""

from __future__ import annotations

import pytest

from squall.kafka.retry import RetrySchedule

pytestmark = pytest.mark.unit


def schedule(max_retries: int = 3) -> RetrySchedule[tuple[str, int, int]]:
    return RetrySchedule(initial_delay_s=0.0, delay_period_s=0.002, max_retries=max_retries, max_delay_s=0.010,
                         partition_of=lambda m: (m[0], m[1]))


def test_delays_grow_exponentially_up_to_the_cap() -> None:
    s = schedule()
    assert [s.delay(n) for n in (1, 2, 3, 4, 5)] == [0.0, 0.004, 0.008, 0.010, 0.010]


def test_a_message_is_ready_only_when_due() -> None:
    s = schedule()
    m = ("t", 0, 5)
    assert s.schedule(m, now=100.0)
    assert s.pop_ready(100.0) == m  # first retry: initialDelay 0
    assert s.pop_ready(100.0) is None
    assert s.schedule(m, now=101.0)  # second failure: 4 ms
    assert s.is_scheduled(m)
    assert s.pop_ready(101.003) is None
    assert s.pop_ready(101.004) == m
    assert s.num_fails(m) == 2


def test_retries_are_spent_after_max_retries() -> None:
    s = schedule(max_retries=2)
    m = ("t", 0, 1)
    assert s.schedule(m, 0.0) and s.pop_ready(1.0) == m
    assert s.schedule(m, 1.0) and s.pop_ready(2.0) == m
    assert not s.schedule(m, 2.0)  # the third failure: handed on, forgotten
    assert s.num_fails(m) == 0 and len(s) == 0


def test_unlimited_retries() -> None:
    s = schedule(max_retries=-1)
    m = ("t", 0, 1)
    for i in range(50):
        assert s.schedule(m, float(i))
        assert s.pop_ready(float(i) + 1) == m


def test_earliest_due_first_and_removal() -> None:
    s = schedule()
    a, b, c = ("t", 0, 1), ("t", 0, 2), ("t", 1, 3)
    s.schedule(a, 0.0)
    s.schedule(a, 0.0)  # a's second failure before its retry: due at 0.004
    s.schedule(b, 0.001)
    s.schedule(c, 0.002)
    s.remove(c)
    assert s.next_due() == 0.001
    assert [s.pop_ready(1.0), s.pop_ready(1.0), s.pop_ready(1.0)] == [b, a, None]


def test_a_lost_partition_drops_its_retries() -> None:
    s = schedule()
    s.schedule(("t", 0, 1), 0.0)
    s.schedule(("t", 1, 1), 0.0)
    s.retain_partitions([("t", 1)])
    assert s.pop_ready(1.0) == ("t", 1, 1)
    assert s.pop_ready(1.0) is None
