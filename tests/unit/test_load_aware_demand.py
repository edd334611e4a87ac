"""Two saturated workers ranked by demand (`LoadAwareShuffle.refresh(..., demand=...)` and
squall.worker.load's uncapped busy), on plain values and an injected clock.

Issue 11: in word count on a 2-core machine both workers read busy 1.0 on the even split the
widening starts from, so the busy fractions could not say that the spout's worker was the
bottleneck (its threads wanted ~1.4x the CPU time of the other's: it runs the spout and its
share of the split). The demand (busy before its cap) ranks them; the model below is that word
count, with per-sentence costs fitted to what was measured (the other worker's demand 0.70x the
spout worker's at 50% local, 0.82x at 40%)."""

from __future__ import annotations

import random

import pytest

from squall import wire
from squall.groupings import (
    CPU_BAND,
    DEMAND_BAND,
    DEMAND_FLOOR,
    DEMAND_MIN_STEP,
    HOST_LOCAL,
    WORKER_LOCAL,
    LoadAwareShuffle,
)
from squall.worker.control import well_formed
from squall.worker.load import DEMAND_MAX, BusyMeter, PeerLoads, load_items

pytestmark = pytest.mark.unit

LOCAL, OTHER = 1, 2
SCOPES = {LOCAL: WORKER_LOCAL, OTHER: HOST_LOCAL}
IDLE_QUEUES = {LOCAL: 0.0, OTHER: 0.0}
SATURATED = {LOCAL: 1.0, OTHER: 1.0}


def widened(now: float = 10.0) -> LoadAwareShuffle:
    """A shuffle that just widened to an even split (its first step waits for measures of it)."""
    ch = LoadAwareShuffle([LOCAL, OTHER], SCOPES, random.Random(1))
    ch.refresh(IDLE_QUEUES, SATURATED, now=now, measured_since=now - 1.0, demand={LOCAL: 1.0, OTHER: 0.5})
    assert ch.scope == HOST_LOCAL and ch.share(LOCAL) == pytest.approx(0.5)
    return ch


def test_of_two_saturated_workers_the_one_wanting_more_cpu_gets_less() -> None:
    ch = widened()
    ch.refresh(IDLE_QUEUES, SATURATED, now=11.0, measured_since=10.0, demand={LOCAL: 1.4, OTHER: 1.0})
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0} and ch.demand_armed == {LOCAL}  # once: armed
    ch.refresh(IDLE_QUEUES, SATURATED, now=12.0, measured_since=11.0, demand={LOCAL: 1.4, OTHER: 1.0})
    # twice in a row: x (1 / 1.4) ** 2 = 0.51, about a third of the split stays local
    assert ch.cpu_factor[OTHER] == 1.0
    assert ch.cpu_factor[LOCAL] == pytest.approx(1 / 1.4**2)
    assert ch.share(LOCAL) == pytest.approx(0.51 / 1.51, abs=0.01)
    assert ch.cpu_moved_at == 12.0


def test_a_reading_over_the_band_once_is_not_enough() -> None:
    ch = widened()
    for t, d in enumerate([{LOCAL: 1.5, OTHER: 1.0}, {LOCAL: 1.0, OTHER: 1.0}, {LOCAL: 1.5, OTHER: 1.0},
                           {LOCAL: 1.0, OTHER: 1.5}], start=11):
        ch.refresh(IDLE_QUEUES, SATURATED, now=float(t), measured_since=t - 1.0, demand=d)
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0}


def test_a_far_larger_demand_steps_at_most_by_the_floor() -> None:
    ch = widened()
    for t in (11.0, 12.0):
        ch.refresh(IDLE_QUEUES, SATURATED, now=t, measured_since=t - 1.0, demand={LOCAL: 1.0, OTHER: 5.0})
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: DEMAND_MIN_STEP}


def test_demand_steps_stop_at_a_third_of_the_split() -> None:
    """A demand that stays higher whatever the split (the spout's worker's, measured) does not
    carry every tuple away: the factor stops at DEMAND_FLOOR of the other's."""
    ch = widened()
    for t in range(11, 31):
        ch.refresh(IDLE_QUEUES, SATURATED, now=float(t), measured_since=t - 1.0, demand={LOCAL: 1.3, OTHER: 1.0})
    assert ch.cpu_factor == {LOCAL: DEMAND_FLOOR, OTHER: 1.0}
    assert ch.share(LOCAL) == pytest.approx(1 / 3, abs=0.01)
    # the busy rule is not bound by it: a local worker clearly busier than the other still sheds
    ch.refresh(IDLE_QUEUES, {LOCAL: 1.0, OTHER: 0.6}, now=31.0, measured_since=30.0, demand={LOCAL: 1.3, OTHER: 0.6})
    assert ch.cpu_factor[LOCAL] < DEMAND_FLOOR


def test_demands_within_the_band_and_unsaturated_workers_do_not_move() -> None:
    ch = widened()
    for t in (11.0, 11.5):
        ch.refresh(IDLE_QUEUES, SATURATED, now=t, measured_since=t - 1.0,
                   demand={LOCAL: 1.0 + DEMAND_BAND - 0.01, OTHER: 1.0})
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0}
    # busy 0.85 and 0.8: within CPU_BAND, and not both saturated: their demands are their busy
    # fractions, and a difference the busy band keeps still is not stepped on again
    for t in (12.0, 12.5):
        ch.refresh(IDLE_QUEUES, {LOCAL: 0.85, OTHER: 0.8}, now=t, measured_since=11.0,
                   demand={LOCAL: 1.7, OTHER: 0.8})
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0}
    # a worker not announced yet (no demand): hold
    for t in (13.0, 13.5):
        ch.refresh(IDLE_QUEUES, SATURATED, now=t, measured_since=12.0, demand={LOCAL: 1.7})
    assert ch.cpu_factor == {LOCAL: 1.0, OTHER: 1.0}


def test_the_busy_fractions_rank_first_and_the_demand_step_waits_for_fresh_measures() -> None:
    ch = widened()
    # one worker clearly less busy: the busy rule steps, the demand is not looked at
    ch.refresh(IDLE_QUEUES, {LOCAL: 1.0, OTHER: 1.0 - CPU_BAND - 0.1}, now=11.0, measured_since=10.0,
               demand={LOCAL: 1.0, OTHER: 3.0})
    assert ch.cpu_factor[LOCAL] < 1.0 and ch.cpu_factor[OTHER] == 1.0
    stepped = dict(ch.cpu_factor)
    # measured partly before that step: hold (and not armed either)
    ch.refresh(IDLE_QUEUES, SATURATED, now=12.0, measured_since=10.9, demand={LOCAL: 2.0, OTHER: 1.0})
    ch.refresh(IDLE_QUEUES, SATURATED, now=12.5, measured_since=10.95, demand={LOCAL: 2.0, OTHER: 1.0})
    assert ch.cpu_factor == stepped
    ch.refresh(IDLE_QUEUES, SATURATED, now=13.0, measured_since=12.0, demand={LOCAL: 2.0, OTHER: 1.0})
    assert ch.cpu_factor == stepped  # armed
    ch.refresh(IDLE_QUEUES, SATURATED, now=14.0, measured_since=13.0, demand={LOCAL: 2.0, OTHER: 1.0})
    assert ch.cpu_factor[LOCAL] < stepped[LOCAL]


def test_a_worker_that_is_not_saturated_keeps_every_tuple_local_whatever_the_demands() -> None:
    ch = LoadAwareShuffle([LOCAL, OTHER], SCOPES, random.Random(1))
    for t in range(5):
        ch.refresh(IDLE_QUEUES, {LOCAL: 0.6, OTHER: 0.1}, now=float(t), measured_since=t - 1.0,
                   demand={LOCAL: 0.6, OTHER: 0.1})
    assert ch.scope == WORKER_LOCAL and ch.share(LOCAL) == 1.0


# word count on two saturated workers: CPU time per sentence in each, for the local share p
def spout_worker(p: float) -> float:
    return 0.64 + 0.36 * p  # the spout, the local split, packing the sentences that leave


def other_worker(p: float) -> float:
    return 0.84 - 0.54 * p  # the sentences it gets (unpacked and split), its share of counting


@pytest.mark.parametrize(("contention", "noise"), [(1.3, 0.0), (1.6, 0.0), (2.5, 0.0), (1.6, 0.05)])
def test_saturated_word_count_settles_near_the_balance_and_stays(contention: float, noise: float) -> None:
    """Both workers pass the same sentences per second (the slower one's) and read busy 1.0
    (run-queue waits on a full machine: `contention` scales the CPU time they want; `noise`:
    each demand off by up to that share, at random). Each refresh sees the demands measured over
    the second before, on the split then in place."""
    ch = widened(now=0.0)
    rng = random.Random(7)
    shares, rates = [], []
    for t in range(1, 31):
        p = ch.share(LOCAL)
        a, b = spout_worker(p), other_worker(p)
        rate = 1.0 / max(a, b)
        rates.append(rate)
        a *= 1 + rng.uniform(-noise, noise)
        b *= 1 + rng.uniform(-noise, noise)
        demand = {LOCAL: min(DEMAND_MAX, contention * a * rate), OTHER: min(DEMAND_MAX, contention * b * rate)}
        busy = {t_: min(1.0, d) for t_, d in demand.items()}
        ch.refresh(IDLE_QUEUES, busy, now=float(t), measured_since=t - 1.0, demand=demand)
        shares.append(ch.share(LOCAL))
    even = 1.0 / max(spout_worker(0.5), other_worker(0.5))
    balance = 1.0 / spout_worker(2 / 9)  # the two costs meet at p = 2/9
    assert max(shares[-18:]) - min(shares[-18:]) <= 0.01  # settled within 12 s, no swing after
    assert rates[-1] > 1.05 * even  # ahead of the even split (uniform shuffle)
    assert rates[-1] >= balance / (1 + DEMAND_BAND)  # the band stops it short of the balance, no more
    assert 0.2 <= shares[-1] <= 0.4
    assert shares[-1] >= 1 / 3 - 0.01  # where DEMAND_FLOOR stops it in this model (balance: 2/9)


def test_the_meter_keeps_the_demand_before_the_cap() -> None:
    t, secs = [0.0], [0.0]
    meter = BusyMeter(read=lambda: secs[0], clock=lambda: t[0])
    t[0] += 1.0
    secs[0] += 1.7  # threads ran or waited for a CPU 1.7 s in 1 s
    assert meter.sample() == 1.0 and meter.demand == pytest.approx(1.7)
    t[0] += 1.0
    secs[0] += 0.4
    assert meter.sample() == pytest.approx(0.4) and meter.demand == pytest.approx(0.4)
    t[0] += 1.0
    secs[0] += 100.0
    meter.sample()
    assert meter.demand == DEMAND_MAX


def test_the_demand_travels_in_the_busy_field_and_is_capped_for_busy() -> None:
    items = load_items(1.0, {7: 0.25}, window=1.0, demand=1.734)
    assert items == [[wire.LOAD, 7, 1734, 250, 1000]] and all(well_formed(it) for it in items)
    loads = PeerLoads()
    loads.hear(items, now=5.0)
    assert loads.of(7, 5.0) == (1.0, 0.25)  # what a receiver that knows no demand reads too
    assert loads.demand(7, 5.0) == pytest.approx(1.734)
    assert loads.demand(7, 60.0) is None and loads.demand(8, 5.0) is None  # stale, unknown
    # a sender that announces busy alone: the demand is the busy fraction
    loads.hear(load_items(0.6, {8: 0.0}), now=5.0)
    assert loads.demand(8, 5.0) == pytest.approx(0.6)
    # a demand below busy is not announced (busy wins); absurd ones are clamped
    assert load_items(0.8, {7: 0.0}, demand=0.5)[0][2] == 800
    assert load_items(1.0, {7: 0.0}, demand=1e9)[0][2] == round(1000 * DEMAND_MAX)
