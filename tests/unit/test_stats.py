"""squall.stats: geometric latency buckets, percentiles, merging, executor counters."""

from __future__ import annotations

import math
import random

import pytest

from squall.stats import Counters, bucket_of, bucket_upper_ms, merge, percentile

pytestmark = pytest.mark.unit

WIDTH = 0.08  # each bucket is 8% wider than the one below
RESOLUTION_MS = 0.01  # latencies are recorded at 0.01 ms resolution


def hist_of(values: list[float]) -> dict[int, int]:
    c = Counters()
    for v in values:
        c.latency(v)
    return c.hist


def true_quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


# --------------------------------------------------------------------------------------------
# buckets
# --------------------------------------------------------------------------------------------


def test_bucket_zero_and_monotone() -> None:
    assert bucket_of(0.0) == 0
    xs = [i / 4 for i in range(0, 4000)] + [10.0**k for k in range(-2, 7)]
    xs.sort()
    bs = [bucket_of(x) for x in xs]
    assert bs == sorted(bs)


@pytest.mark.parametrize("ms", [0.01, 0.25, 1.0, 3.0, 7.5, 42.0, 99.99, 100.0, 250.0, 1234.5, 6e4])
def test_bucket_contains_its_value(ms: float) -> None:
    b = bucket_of(ms)
    assert bucket_upper_ms(b) > ms - RESOLUTION_MS
    assert b == 0 or bucket_upper_ms(b - 1) <= ms


def test_buckets_grow_by_eight_percent() -> None:
    for b in (100, 150, 200, 300):
        lo, hi = bucket_upper_ms(b - 1), bucket_upper_ms(b)
        assert hi / lo == pytest.approx(1 + WIDTH, rel=0.01)


# --------------------------------------------------------------------------------------------
# percentile
# --------------------------------------------------------------------------------------------


def test_percentile_of_an_empty_histogram_is_zero() -> None:
    assert percentile({}, 0.5) == 0.0
    assert percentile({}, 0.99) == 0.0
    assert percentile({12: 0}, 0.5) == 0.0


def _within_one_bucket(got: float, true: float) -> bool:
    return true - RESOLUTION_MS <= got <= true * (1 + WIDTH) + RESOLUTION_MS


@pytest.mark.parametrize("q", [0.01, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0])
def test_percentile_of_a_uniform_distribution(q: float) -> None:
    values = [float(ms) for ms in range(1, 1001)]  # 1 .. 1000 ms
    got = percentile(hist_of(values), q)
    true = true_quantile(values, q)
    assert _within_one_bucket(got, true), (q, got, true)


@pytest.mark.parametrize("seed", range(5))
def test_percentile_of_a_lognormal_sample(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(math.log(5.0), 1.2) for _ in range(20_000)]  # ms, 0.0x .. 1000s
    hist = hist_of(values)
    assert sum(hist.values()) == len(values)
    for q in (0.5, 0.75, 0.9, 0.99, 0.999):
        got = percentile(hist, q)
        true = true_quantile(values, q)
        assert _within_one_bucket(got, true), (q, got, true)
        assert abs(got - true) <= WIDTH * true + RESOLUTION_MS


def test_percentile_single_value() -> None:
    hist = hist_of([20.0] * 10)
    for q in (0.0, 0.5, 1.0):
        assert _within_one_bucket(percentile(hist, q), 20.0)


def test_percentile_of_hand_built_histogram() -> None:
    hist = {10: 1, 20: 1, 30: 2}
    assert percentile(hist, 0.25) == bucket_upper_ms(10)
    assert percentile(hist, 0.5) == bucket_upper_ms(20)
    assert percentile(hist, 0.51) == bucket_upper_ms(30)
    assert percentile(hist, 1.0) == bucket_upper_ms(30)


# --------------------------------------------------------------------------------------------
# merge
# --------------------------------------------------------------------------------------------


def test_merge_adds_counts() -> None:
    a = {1: 2, 5: 1}
    b = {5: 3, 9: 4}
    assert merge([a, b]) == {1: 2, 5: 4, 9: 4}
    assert a == {1: 2, 5: 1} and b == {5: 3, 9: 4}  # inputs untouched
    assert merge([]) == {}
    assert merge([{}, {}]) == {}


def test_merge_accepts_string_keys_from_json_heartbeats() -> None:
    merged = merge([{"5": 2, "7": 1}, {5: 1}])
    assert merged == {5: 3, 7: 1}
    assert all(type(k) is int for k in merged)


def test_percentile_of_merged_executor_histograms_equals_the_whole() -> None:
    rng = random.Random(7)
    values = [rng.uniform(0.5, 300.0) for _ in range(6000)]
    parts = [hist_of(values[i::3]) for i in range(3)]
    whole = hist_of(values)
    assert merge(parts) == whole
    for q in (0.5, 0.99):
        assert percentile(merge(parts), q) == percentile(whole, q)


# --------------------------------------------------------------------------------------------
# Counters
# --------------------------------------------------------------------------------------------


def test_counters_start_at_zero() -> None:
    c = Counters()
    assert (c.emitted, c.transferred, c.executed, c.acked, c.failed, c.dropped) == (0,) * 6
    assert (c.lat_sum, c.lat_n, c.hist) == (0.0, 0, {})


def test_latency_sums_and_counts() -> None:
    c = Counters()
    for v in (1.0, 2.5, 300.0):
        c.latency(v)
    assert c.lat_n == 3
    assert c.lat_sum == pytest.approx(303.5)
    assert sum(c.hist.values()) == 3


@pytest.mark.parametrize(
    "ms",
    [
        0.0,
        0.001,
        0.005,
        0.009,
        0.01,
        0.0123,
        0.5,
        1.0805,
        2.0196,
        10.9974,
        12.3456,
        50.0,
        99.99,
        99.999,
        100.0,
        100.004,
        150.25,
        999.9,
        12_345.678,
        3.6e6,
    ],
)
def test_latency_bucket_agrees_with_bucket_of(ms: float) -> None:
    c = Counters()
    c.latency(ms)
    assert c.hist == {bucket_of(ms): 1}


@pytest.mark.parametrize("seed", range(3))
def test_latency_bucket_agrees_with_bucket_of_on_random_values(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.uniform(0.0, 100.0) for _ in range(5000)]
    values += [rng.uniform(0.0, 0.2) for _ in range(2000)]
    values += [rng.uniform(100.0, 10_000.0) for _ in range(2000)]
    bad = []
    for v in values:
        c = Counters()
        c.latency(v)
        if c.hist != {bucket_of(v): 1}:
            bad.append((v, c.hist, bucket_of(v)))
    assert bad == []


def test_negative_latency_goes_to_bucket_zero() -> None:
    # clocks of different threads may disagree by a hair
    c = Counters()
    c.latency(-0.5)
    c.latency(-0.001)
    assert c.hist == {0: 2}
    assert c.lat_n == 2
