"""Storm 2's load-aware, locality-preferring shuffle (`squall.groupings.LoadAwareShuffle`), with
plain values: target scopes and loads are given, nothing runs."""

from __future__ import annotations

import collections
import random
from collections.abc import Mapping

import pytest

from squall.groupings import EVERYTHING, HOST_LOCAL, RING, WORKER_LOCAL, LoadAwareShuffle, make_chooser
from squall.models import Grouping

pytestmark = pytest.mark.unit

# tasks 1, 2 in the emitter's worker; 3 in another worker on its node; 4, 5 on other nodes
SCOPES = {1: WORKER_LOCAL, 2: WORKER_LOCAL, 3: HOST_LOCAL, 4: EVERYTHING, 5: EVERYTHING}


def picks(chooser: LoadAwareShuffle, n: int = RING) -> collections.Counter[int]:
    c: collections.Counter[int] = collections.Counter()
    for i in range(n):
        (t,) = chooser([i])
        c[t] += 1
    return c


def test_with_no_load_known_it_keeps_tuples_in_the_worker_evenly() -> None:
    ch = LoadAwareShuffle(list(SCOPES), SCOPES, random.Random(1))
    assert ch.scope == WORKER_LOCAL
    assert picks(ch, 3 * RING) == {1: 1500, 2: 1500}


@pytest.mark.parametrize("scopes, first", [
    ({3: HOST_LOCAL, 4: EVERYTHING}, HOST_LOCAL),
    ({4: EVERYTHING, 5: EVERYTHING}, EVERYTHING),
])
def test_nothing_in_the_worker_starts_at_the_nearest_scope_that_has_targets(
    scopes: Mapping[int, int], first: int
) -> None:
    ch = LoadAwareShuffle(list(scopes), scopes, random.Random(2))
    assert ch.scope == first
    assert set(picks(ch)) == {t for t, s in scopes.items() if s <= first}


def test_busy_local_targets_widen_the_scope_one_step_at_a_time() -> None:
    ch = LoadAwareShuffle(list(SCOPES), SCOPES, random.Random(3))
    busy = {1: 0.9, 2: 0.85, 3: 0.9, 4: 0.0, 5: 0.0}
    ch.refresh(busy)  # the worker's targets average 0.875 > 0.8
    assert ch.scope == HOST_LOCAL
    ch.refresh(busy)  # the node's average still > 0.8
    assert ch.scope == EVERYTHING
    ch.refresh(busy)
    assert ch.scope == EVERYTHING
    # the idle remote targets get the most tuples; the busy ones lose weight fast
    for _ in range(5):
        ch.refresh(busy)
    c = picks(ch)
    assert c[4] > 3 * c[1] and c[5] > 3 * c[2] and c[4] > 3 * c[3]


def test_idle_again_narrows_the_scope_back_to_the_worker() -> None:
    ch = LoadAwareShuffle(list(SCOPES), SCOPES, random.Random(4))
    ch.refresh({1: 1.0, 2: 1.0, 3: 1.0})
    ch.refresh({1: 1.0, 2: 1.0, 3: 1.0})
    assert ch.scope == EVERYTHING
    ch.refresh({t: 0.1 for t in SCOPES})  # average below 0.2: one step nearer
    assert ch.scope == HOST_LOCAL
    ch.refresh({t: 0.1 for t in SCOPES})
    assert ch.scope == WORKER_LOCAL
    assert set(picks(ch)) == {1, 2}


def test_between_the_bounds_the_scope_stays() -> None:
    ch = LoadAwareShuffle(list(SCOPES), SCOPES, random.Random(5))
    for load in (0.5, 0.8, 0.2):
        ch.refresh({t: load for t in SCOPES})
        assert ch.scope == WORKER_LOCAL


def test_a_loaded_target_in_the_scope_gets_fewer_tuples_and_recovers_slowly() -> None:
    ch = LoadAwareShuffle([1, 2], {1: WORKER_LOCAL, 2: WORKER_LOCAL}, random.Random(6))
    for _ in range(5):
        ch.refresh({1: 0.6, 2: 0.0})  # average 0.3: stays in the worker
    assert ch.weight == {1: 50, 2: 100}
    c = picks(ch)
    assert c[1] + c[2] == RING and abs(c[1] - RING * 50 / 150) <= 2
    ch.refresh({1: 0.0, 2: 0.0})  # within 0.05 of the least loaded: +1 only
    assert ch.weight == {1: 51, 2: 100}


def test_every_target_at_zero_weight_still_spreads_over_the_scope() -> None:
    ch = LoadAwareShuffle([1, 2], {1: WORKER_LOCAL, 2: WORKER_LOCAL}, random.Random(7))
    ch.weight = {1: 0, 2: 0}
    ch.refresh({1: 0.5, 2: 0.7})  # 2 loses weight, 1 is the least loaded and gains one
    assert picks(ch) == {1: RING}


def test_ring_is_always_full_and_only_names_targets() -> None:
    rng = random.Random(8)
    ch = LoadAwareShuffle(list(SCOPES), SCOPES, rng)
    for _ in range(50):
        ch.refresh({t: rng.random() for t in SCOPES})
        assert len(ch.ring) == RING
        assert {r[0] for r in ch.ring} <= set(SCOPES)


def test_make_chooser_gives_load_aware_shuffle_only_when_asked() -> None:
    for grouping in (Grouping.SHUFFLE, Grouping.NONE):
        assert isinstance(make_chooser(grouping, [1, 2], load_aware=SCOPES), LoadAwareShuffle)
        assert not isinstance(make_chooser(grouping, [1, 2]), LoadAwareShuffle)
    # one target: nothing to weigh
    assert make_chooser(Grouping.SHUFFLE, [4], load_aware=SCOPES)([0]) == [4]  # type: ignore[misc]
    assert not isinstance(make_chooser(Grouping.LOCAL_OR_SHUFFLE, [1, 2], load_aware=SCOPES), LoadAwareShuffle)


def test_no_targets_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one target"):
        LoadAwareShuffle([], {}, random.Random(0))
