"""The CPU side of the load-aware shuffle (`LoadAwareShuffle.refresh(load, cpu, ...)`), on plain
values: a Python worker is one GIL, so a busy worker counts as loaded however empty its queues
are, and the split moves toward the less busy worker in steps that wait for their effect.

The settling tests close the loop on a model of word count on two single-GIL workers: the
spout's worker spends `spout` per sentence plus `split` for each sentence it keeps, the other
worker `split` for each one it gets, both half of the counting; throughput is what the busier
worker allows (capped by a rate limit). The model runs in steps of 0.1 s of an injected clock
from the start: each worker measures its busy fraction once a second over the second before
(at its own phase), the other worker's reaches the spout's worker when it is measured (its
announcement), nothing is known of it before its first one, and the shuffle re-weighs once a
second, as in a worker (squall.worker.load, Executor.refresh_load)."""

from __future__ import annotations

import random

import pytest

from squall.groupings import (
    CPU_BAND,
    CPU_GAIN,
    CPU_MIN_STEP,
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
SETTLE_SECS = 8  # word count's rate stays within 7% of the balanced one from this second on
NEAR = 0.93  # the band (0.1) stops the steps up to ~5% short of the balance in this model


def chooser(seed: int = 1) -> LoadAwareShuffle:
    return LoadAwareShuffle([LOCAL, OTHER], SCOPES, random.Random(seed))


def local_share(ch: LoadAwareShuffle) -> float:
    return ch.share(LOCAL)


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


def test_busier_worker_loses_share_in_proportion_and_evens_stay_still() -> None:
    ch = LoadAwareShuffle([LOCAL, OTHER], {LOCAL: WORKER_LOCAL, OTHER: WORKER_LOCAL}, random.Random(2))
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3 + CPU_BAND + 0.1, OTHER: 0.3})  # 0.1 over the band: x0.7
    assert ch.cpu_factor == pytest.approx({LOCAL: 1 - CPU_GAIN * 0.1, OTHER: 1.0})
    assert ch.weight == {LOCAL: MAX_WEIGHT, OTHER: MAX_WEIGHT}  # Storm's queue weights untouched
    assert local_share(ch) == pytest.approx(0.7 / 1.7, abs=0.002)
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3 + CPU_BAND + 0.9, OTHER: 0.3})  # far over: one step of at most x4
    assert ch.cpu_factor[LOCAL] == pytest.approx((1 - CPU_GAIN * 0.1) * CPU_MIN_STEP)
    learned = dict(ch.cpu_factor)
    for _ in range(20):  # within the band: nothing moves (no creep back to even)
        ch.refresh(IDLE_QUEUES, {LOCAL: 0.3 + CPU_BAND - 0.01, OTHER: 0.3})
    assert ch.cpu_factor == learned
    # the other way round: the other worker's factor is cut (x0.4), and the largest is 1.0 again
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3, OTHER: 0.3 + CPU_BAND + 0.2})
    assert ch.cpu_factor == pytest.approx({LOCAL: learned[LOCAL] / (1 - CPU_GAIN * 0.2), OTHER: 1.0})
    # a filling queue still costs Storm's -10, however idle its worker, and no CPU step on top
    factors = dict(ch.cpu_factor)
    ch.refresh({LOCAL: 0.0, OTHER: 0.5}, {LOCAL: 0.3, OTHER: 0.9})
    assert ch.weight == {LOCAL: MAX_WEIGHT, OTHER: MAX_WEIGHT - 10}
    assert ch.cpu_factor == factors
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.3, OTHER: 0.3})  # the queue evened: Storm's +1
    assert ch.weight == {LOCAL: MAX_WEIGHT, OTHER: MAX_WEIGHT - 9}


def test_a_step_waits_for_busy_fractions_measured_after_it() -> None:
    ch = chooser()
    busy = {LOCAL: 0.97, OTHER: 0.5}
    ch.refresh(IDLE_QUEUES, busy, now=10.0, measured_since=9.0)  # widens to an even split
    assert ch.scope == HOST_LOCAL and ch.cpu_moved_at == 10.0
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0}  # those measures were of the worker-local split
    ch.refresh(IDLE_QUEUES, busy, now=11.0, measured_since=10.1)  # measured on the even split: a step
    assert ch.cpu_factor[LOCAL] < 1.0 and ch.cpu_moved_at == 11.0
    stepped = dict(ch.cpu_factor)
    ch.refresh(IDLE_QUEUES, busy, now=12.0, measured_since=10.9)  # a measure begun before the step
    ch.refresh(IDLE_QUEUES, busy, now=12.5, measured_since=None)  # one not known
    assert ch.cpu_factor == stepped
    ch.refresh(IDLE_QUEUES, busy, now=13.0, measured_since=11.2)  # wholly after it: the next step
    assert ch.cpu_factor[LOCAL] < stepped[LOCAL] and ch.cpu_moved_at == 13.0


def test_an_unknown_worker_holds_the_split() -> None:
    ch = chooser()
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.97})  # the other worker has not announced yet
    assert ch.scope == HOST_LOCAL  # the busy worker still widens (the unknown one counts as idle)
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0}  # but nothing is learned from it
    assert local_share(ch) == pytest.approx(0.5, abs=0.002)


def test_a_scope_change_without_new_targets_keeps_the_weights() -> None:
    # on one node, host-local and everything hold the same targets
    ch = chooser()
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.97, OTHER: 0.2})
    assert ch.scope == HOST_LOCAL
    learned = dict(ch.cpu_factor)
    assert learned[LOCAL] < 1.0
    ch.refresh(IDLE_QUEUES, {LOCAL: 0.95, OTHER: 0.95})  # both busy: the average widens it
    assert ch.scope == EVERYTHING
    assert ch.cpu_factor == learned and ch.weight == {LOCAL: MAX_WEIGHT, OTHER: MAX_WEIGHT}


def wordcount(ch: LoadAwareShuffle, seconds: float, spout: float = 0.5, split: float = 1.0,
              count: float = 0.5, rate_limit: float = 10.0, here_phase: float = 0.3, there_phase: float = 0.7,
              refresh_phase: float = 0.5, noise: float = 0.0, rng: random.Random | None = None,
              there_startup: float | None = None) -> list[tuple[float, float]]:
    """(local share, throughput) over each second of the model in the docstring, from its start.
    `there_startup`: how busy the other worker is in its first second without any tuples
    (imports, connecting), which its first announcement carries."""
    rng = rng or random.Random(0)
    dt = 0.1
    here_acc = there_acc = 0.0  # busy seconds since each worker's last measure
    here_at = there_at = 0.0  # when those measures began
    busy_here, here_since = 0.0, 0.0
    heard: tuple[float, float] | None = None  # the other worker's (busy, measure began)
    out = []
    shares, rates = [], []
    for i in range(round(seconds / dt)):
        t = i * dt
        f = local_share(ch)
        here_cost = spout + f * split + count / 2
        there_cost = (1 - f) * split + count / 2
        x = min(rate_limit, 1 / here_cost, 1 / there_cost)
        here_acc += min(1.0, x * here_cost) * dt
        there_acc += (there_startup if there_startup is not None and t < 1.0 else min(1.0, x * there_cost)) * dt
        shares.append(f)
        rates.append(x)
        t_end = t + dt
        if _crosses(t, t_end, here_phase):
            busy_here, here_since = _measured(here_acc, here_at, t_end, noise, rng), here_at
            here_acc, here_at = 0.0, t_end
        if _crosses(t, t_end, there_phase):
            heard = (_measured(there_acc, there_at, t_end, noise, rng), there_at)
            there_acc, there_at = 0.0, t_end
        if _crosses(t, t_end, refresh_phase):
            cpu = {LOCAL: busy_here}
            since: float | None = None
            if heard is not None:
                cpu[OTHER] = heard[0]
                since = min(here_since, heard[1])
            ch.refresh(IDLE_QUEUES, cpu, now=t_end, measured_since=since)
        if len(shares) == round(1 / dt):
            out.append((sum(shares) / len(shares), sum(rates) / len(rates)))
            shares, rates = [], []
    return out


def _crosses(t0: float, t1: float, phase: float) -> bool:
    """Whether a once-a-second event at `phase` (plus whole seconds) falls in [t0, t1)."""
    return int(t1 - phase + 1e-9) > int(t0 - phase + 1e-9) or (t0 <= phase < t1)


def _measured(acc: float, began: float, now: float, noise: float, rng: random.Random) -> float:
    busy = acc / max(1e-9, now - began)
    return min(1.0, max(0.0, busy + (rng.uniform(-noise, noise) if noise else 0.0)))


def balanced(spout: float, split: float = 1.0, count: float = 0.5) -> tuple[float, float]:
    """The local share at which both workers are equally busy, and the throughput there."""
    f = max(0.0, (split - spout) / (2 * split))
    return f, 1 / max(spout + f * split + count / 2, (1 - f) * split + count / 2)


@pytest.mark.parametrize("spout", [0.2, 0.5, 1.0])
@pytest.mark.parametrize("phases", [(0.3, 0.7, 0.5), (0.9, 0.1, 0.0), (0.05, 0.95, 0.5)])
def test_from_the_start_it_settles_within_a_few_seconds_and_stays(
    spout: float, phases: tuple[float, float, float]
) -> None:
    here, there, refresh = phases
    run = wordcount(chooser(), 40, spout=spout, here_phase=here, there_phase=there, refresh_phase=refresh)
    f_star, x_star = balanced(spout)
    settled = run[SETTLE_SECS:]
    assert all(x >= NEAR * x_star for _, x in settled), (f_star, x_star, run)
    assert max(f for f, _ in settled) - min(f for f, _ in settled) <= 0.05, run  # no swing
    assert max(f for f, _ in run[15:]) - min(f for f, _ in run[15:]) <= 0.01, run  # and then still
    assert abs(settled[-1][0] - f_star) <= 0.1, run
    uniform = 1 / (spout + 0.5 + 0.25)
    local = 1 / (spout + 1.0 + 0.25)
    x = settled[-1][1]
    assert x > uniform * 1.05 and x > local * 1.2, (x, uniform, local)


def test_a_busy_start_of_the_other_worker_does_not_throw_it_off() -> None:
    # the other worker's first announcement says 0.9 busy (imports) while it had no tuples yet
    run = wordcount(chooser(), 30, there_startup=0.9)
    _, x_star = balanced(0.5)
    assert all(x >= NEAR * x_star for _, x in run[SETTLE_SECS:]), run


def test_noisy_measures_settle_too() -> None:
    run = wordcount(chooser(), 60, noise=0.05, rng=random.Random(11))
    shares = [f for f, _ in run]
    assert max(shares[-40:]) - min(shares[-40:]) <= 0.08, run
    _, x_star = balanced(0.5)
    assert all(x >= NEAR * x_star for _, x in run[SETTLE_SECS:]), run


def test_a_rate_limited_spout_keeps_everything_local() -> None:
    run = wordcount(chooser(), 30, rate_limit=0.3)  # its worker about half busy
    assert all(f == 1.0 for f, _ in run)
