"""The CPU side of the load-aware shuffle (`LoadAwareShuffle.refresh(load, cpu)`), on plain
values: a Python worker is one GIL, so a busy worker counts as loaded however empty its queues
are, and the weights move toward the less busy worker gently enough to settle.

The settling tests close the loop on a model of word count on two single-GIL workers: the
spout's worker spends `spout` per sentence plus `split` for each sentence it keeps, the other
worker `split` for each one it gets, both half of the counting; throughput is what the busier
worker allows (capped by a rate limit), and the other worker's busy fraction reaches the
spout's worker one refresh late (its announcement)."""

from __future__ import annotations

import random

import pytest

from squall.groupings import (
    CPU_BAND,
    EVERYTHING,
    HOST_LOCAL,
    MAX_WEIGHT,
    WORKER_LOCAL,
    LoadAwareShuffle,
)

pytestmark = pytest.mark.unit

LOCAL, OTHER = 1, 2  # a split task in the spout's worker, one in another worker on the node
SCOPES = {LOCAL: WORKER_LOCAL, OTHER: HOST_LOCAL}
IDLE_QUEUES = {LOCAL: 0.0, OTHER: 0.0}


def chooser(seed: int = 1) -> LoadAwareShuffle:
    return LoadAwareShuffle([LOCAL, OTHER], SCOPES, random.Random(seed))


def local_share(ch: LoadAwareShuffle) -> float:
    if ch.scope == WORKER_LOCAL:
        return 1.0
    return ch.weight[LOCAL] / (ch.weight[LOCAL] + ch.weight[OTHER])


def test_idle_cpu_and_empty_queues_keep_every_tuple_in_the_worker() -> None:
    ch = chooser()
    for _ in range(30):
        ch.refresh(IDLE_QUEUES, {LOCAL: 0.5, OTHER: 0.1})
    assert ch.scope == WORKER_LOCAL
    assert {ch([])[0] for _ in range(2000)} == {LOCAL}


def test_a_saturated_worker_with_empty_queues_widens_the_scope() -> None:
    ch = chooser()
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.97, OTHER: 0.2})
    assert ch.scope == HOST_LOCAL
    assert 0.0 < local_share(ch) < 0.5  # and the busy worker already lost some weight
    # without the CPU (Storm's load: queues only) the same worker keeps everything
    storm = chooser()
    storm.refresh(IDLE_QUEUES)
    assert storm.scope == WORKER_LOCAL


def test_busier_worker_loses_weight_in_proportion_and_evens_stay_still() -> None:
    ch = LoadAwareShuffle([LOCAL, OTHER], {LOCAL: WORKER_LOCAL, OTHER: WORKER_LOCAL}, random.Random(2))
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3 + CPU_BAND + 0.1, OTHER: 0.3})  # 0.1 over the band: -2
    assert ch.weight == {LOCAL: MAX_WEIGHT - 2, OTHER: MAX_WEIGHT}
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3 + CPU_BAND + 0.01, OTHER: 0.3})  # just over: at least -1
    assert ch.weight == {LOCAL: MAX_WEIGHT - 3, OTHER: MAX_WEIGHT}
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3 + CPU_BAND - 0.01, OTHER: 0.3})  # within the band: +1
    assert ch.weight == {LOCAL: MAX_WEIGHT - 2, OTHER: MAX_WEIGHT}
    # a filling queue still costs Storm's -10, however idle its worker
    ch.refresh({LOCAL: 0.0, OTHER: 0.5}, {LOCAL: 0.3, OTHER: 0.3})
    assert ch.weight == {LOCAL: MAX_WEIGHT - 1, OTHER: MAX_WEIGHT - 10}


def test_a_scope_change_without_new_targets_keeps_the_weights() -> None:
    # on one node, host-local and everything hold the same targets
    ch = chooser()
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.97, OTHER: 0.2})
    assert ch.scope == HOST_LOCAL
    learned = dict(ch.weight)
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.95, OTHER: 0.95})  # both busy: the average widens it
    assert ch.scope == EVERYTHING
    assert ch.weight == {t: min(MAX_WEIGHT, w + 1) for t, w in learned.items()}


def wordcount(ch: LoadAwareShuffle, steps: int, spout: float = 0.5, split: float = 1.0,
              count: float = 0.5, rate_limit: float = 10.0) -> list[tuple[float, float]]:
    """(local share, throughput) after each of `steps` refreshes of the model in the docstring."""
    out = []
    heard_other = 0.0  # the other worker's busy fraction as last announced
    for _ in range(steps):
        f = local_share(ch)
        here_cost = spout + f * split + count / 2
        there_cost = (1 - f) * split + count / 2
        x = min(rate_limit, 1 / here_cost, 1 / there_cost)
        ch.refresh(IDLE_QUEUES, {LOCAL: min(1.0, x * here_cost), OTHER: heard_other})
        heard_other = min(1.0, x * there_cost)
        out.append((local_share(ch), x))
    return out


@pytest.mark.parametrize("spout", [0.2, 0.5, 1.0])
def test_the_weights_settle_near_the_balance_and_beat_both_fixed_splits(spout: float) -> None:
    run = wordcount(chooser(), 60, spout=spout)
    last = [f for f, _ in run[-20:]]
    assert max(last) - min(last) <= 0.05, run  # settled: no swing back and forth
    balanced = max(0.0, (1.0 - spout) / 2)  # the share at which both workers are equally busy
    assert abs(last[-1] - balanced) <= 0.1, run
    x = run[-1][1]
    uniform = 1 / (spout + 0.5 + 0.25)
    local = 1 / (spout + 1.0 + 0.25)
    assert x > uniform * 1.05 and x > local * 1.2, (x, uniform, local)


def test_noisy_measures_settle_too() -> None:
    rng = random.Random(11)
    ch = chooser()
    heard_other = 0.0
    shares = []
    for _ in range(80):
        f = local_share(ch)
        here_cost, there_cost = 0.5 + f + 0.25, (1 - f) + 0.25
        x = min(1 / here_cost, 1 / there_cost)
        noise = lambda: rng.uniform(-0.05, 0.05)  # noqa: E731
        ch.refresh(IDLE_QUEUES, {LOCAL: min(1.0, x * here_cost + noise()), OTHER: heard_other})
        heard_other = min(1.0, x * there_cost + noise())
        shares.append(local_share(ch))
    assert max(shares[-30:]) - min(shares[-30:]) <= 0.08, shares
    assert ch.scope != WORKER_LOCAL


def test_a_rate_limited_spout_keeps_everything_local() -> None:
    run = wordcount(chooser(), 30, rate_limit=0.3)  # its worker about half busy
    assert all(f == 1.0 for f, _ in run)
