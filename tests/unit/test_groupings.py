"""squall.groupings: one chooser per grouping, hashes that agree across processes."""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

import fixtures_groupings as fxg
from squall import wire
from squall.groupings import (
    FIELDS_CACHE,
    OneFieldChooser,
    PartialKeyChooser,
    fields_hash,
    load_class,
    make_chooser,
    stable_hash,
)
from squall.models import Grouping

pytestmark = pytest.mark.unit

TASKS = [4, 5, 6, 7, 8]
FXG = fxg.__name__


def counts(chooser: Any, values: Sequence[Sequence[Any]]) -> collections.Counter[int]:
    c: collections.Counter[int] = collections.Counter()
    for v in values:
        for t in chooser(v):
            c[t] += 1
    return c


def make(grouping: Grouping, tasks: Sequence[int] = TASKS, **kw: Any) -> Any:
    chooser = make_chooser(grouping, tasks, **kw)
    assert chooser is not None
    return chooser


# --------------------------------------------------------------------------------------------
# shuffle, none, localOrShuffle
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grouping", [Grouping.SHUFFLE, Grouping.NONE])
@pytest.mark.parametrize("seed", range(5))
def test_shuffle_spreads_evenly_over_targets_only(grouping: Grouping, seed: int) -> None:
    chooser = make(grouping, rng=random.Random(seed))
    n = len(TASKS)
    seen: collections.Counter[int] = collections.Counter()
    for i in range(1, 40 * n + 1):
        picked = chooser(["x", i])
        assert len(picked) == 1 and picked[0] in TASKS
        seen[picked[0]] += 1
        # at every point the counts differ by at most one...
        assert max(seen.values()) - min(seen[t] for t in TASKS) <= 1
        if i % n == 0:  # ...and over a multiple of n tuples they are equal
            assert all(seen[t] == i // n for t in TASKS)


def test_shuffle_single_target() -> None:
    chooser = make(Grouping.SHUFFLE, [9])
    assert {tuple(chooser([i])) for i in range(20)} == {(9,)}


def test_shuffle_order_depends_on_rng_not_values() -> None:
    a = make(Grouping.SHUFFLE, rng=random.Random(3))
    b = make(Grouping.SHUFFLE, rng=random.Random(3))
    assert [a([i])[0] for i in range(30)] == [b(["other"])[0] for _ in range(30)]


@pytest.mark.parametrize("seed", range(3))
def test_local_or_shuffle_prefers_local_tasks(seed: int) -> None:
    chooser = make(Grouping.LOCAL_OR_SHUFFLE, local_tasks=[5, 8, 42], rng=random.Random(seed))
    c = counts(chooser, [[i] for i in range(100)])
    assert c == {5: 50, 8: 50}


@pytest.mark.parametrize("local", [(), (1, 2, 3)])
def test_local_or_shuffle_falls_back_to_all_targets(local: tuple[int, ...]) -> None:
    chooser = make(Grouping.LOCAL_OR_SHUFFLE, local_tasks=local, rng=random.Random(0))
    c = counts(chooser, [[i] for i in range(10 * len(TASKS))])
    assert c == {t: 10 for t in TASKS}


# --------------------------------------------------------------------------------------------
# fields
# --------------------------------------------------------------------------------------------

WORDS = [f"word{i}" for i in range(500)] + ["", "é", "日本語", "a b"]


def test_fields_same_key_same_task() -> None:
    chooser = make(Grouping.FIELDS, field_indexes=[0])
    for w in WORDS:
        first = chooser([w, 1])
        assert len(first) == 1 and first[0] in TASKS
        for n in range(5):
            assert chooser([w, n]) == first


def test_fields_agrees_across_independently_built_choosers() -> None:
    # two processes build their choosers separately, maybe from task lists in another order
    a = make(Grouping.FIELDS, TASKS, field_indexes=[0], rng=random.Random(1))
    b = make(Grouping.FIELDS, list(reversed(TASKS)), field_indexes=[0], rng=random.Random(2))
    for w in WORDS:
        assert a([w]) == b([w])


def test_fields_ignores_other_fields_and_their_order() -> None:
    # stream A declares (word, count), stream B (count, extra, word): the grouping is on "word"
    a = make(Grouping.FIELDS, field_indexes=[0])
    b = make(Grouping.FIELDS, field_indexes=[2])
    for i, w in enumerate(WORDS):
        assert a([w, i]) == b([i * 7, "noise", w])


def test_fields_on_several_fields_follows_the_grouping_order() -> None:
    # grouping fields ("user", "day"); stream A declares (user, x, day), stream B (day, user)
    a = make(Grouping.FIELDS, field_indexes=[0, 2])
    b = make(Grouping.FIELDS, field_indexes=[1, 0])
    tasks_hit = set()
    for u in range(50):
        for d in ("mon", "tue", "wed"):
            ta = a([f"u{u}", 3.5, d])
            assert ta == b([d, f"u{u}"])
            assert ta == a([f"u{u}", None, d])
            tasks_hit.add(ta[0])
    assert tasks_hit == set(TASKS)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16])
def test_fields_distribution_hits_every_task(n: int) -> None:
    tasks = list(range(10, 10 + n))
    chooser = make(Grouping.FIELDS, tasks, field_indexes=[0])
    keys = [f"key-{i}" for i in range(200 * n)]
    c = counts(chooser, [[k] for k in keys])
    assert set(c) == set(tasks)
    # a fair hash: no task gets less than half or more than twice its share
    for t in tasks:
        assert 100 <= c[t] <= 400, (t, c)
    ints = counts(chooser, [[i] for i in range(200 * n)])
    assert set(ints) == set(tasks)


def test_fields_single_index_fast_path_equals_fields_hash() -> None:
    chooser = make(Grouping.FIELDS, field_indexes=[1])
    for v in [*WORDS, b"raw", 0, -1, 2**40, 3.25, True, None, ("a", 1)]:
        assert chooser(["x", v]) == [sorted(TASKS)[fields_hash(["x", v], [1]) % len(TASKS)]]


def test_fields_key_chooses_the_same_task_after_a_wire_round_trip() -> None:
    # A bolt that re-emits a field it received: locally (no serialisation) it is the emitter's
    # object, from another worker it went through msgpack. Both must go to the same task.
    chooser = make(Grouping.FIELDS, field_indexes=[0])
    for key in ["w", b"bytes", 7, -2**62, 1.5, ("a", 1), ("nested", ("b", 2)), ["l", 3]]:
        [[_d, _s, _stream, received, _a]] = wire.unpack_data(
            wire.pack([[1, 2, "default", [key], None]])
        )
        assert chooser(received) == chooser([key]), key


# --------------------------------------------------------------------------------------------
# stable_hash
# --------------------------------------------------------------------------------------------

HASHED: list[Any] = [
    "hello",
    "",
    "日本語",
    b"hello",
    b"",
    0,
    1,
    -1,
    2**62 - 1,
    -(2**63),
    1.0,
    -0.5,
    3.141592653589793,
    ("a", 1),
    ("a", ("b", 2.5)),
    (),
]


def test_stable_hash_of_str_and_bytes_is_crc32() -> None:
    assert stable_hash("hello") == zlib.crc32(b"hello") == stable_hash(b"hello")
    assert stable_hash("日本語") == zlib.crc32("日本語".encode())


def test_stable_hash_is_deterministic_and_32_bit() -> None:
    for v in HASHED:
        h = stable_hash(v)
        assert h == stable_hash(v)
        assert 0 <= h < 2**32


def test_stable_hash_distinguishes_values() -> None:
    hashes = [stable_hash(v) for v in HASHED]
    # str and bytes with the same content hash alike ("hello", ""): both are CRC-32 of the bytes
    assert len(set(hashes)) == len(HASHED) - 2
    assert stable_hash(1) != stable_hash(2)
    assert stable_hash(True) != stable_hash(1)


def test_stable_hash_of_any_int() -> None:
    # Python ints are unbounded; a fields grouping must not crash on a big one
    for v in (2**127 - 1, 2**127, -(2**127) - 1, 2**200, -(3**150)):
        h = stable_hash(v)
        assert h == stable_hash(v) and 0 <= h < 2**32
    assert stable_hash(2**200) != stable_hash(2**200 + 1)


def test_stable_hash_treats_tuple_and_list_alike() -> None:
    # msgpack turns tuples into lists: the same key must hash alike on both sides of the wire
    assert stable_hash(("a", 1)) == stable_hash(["a", 1])
    assert stable_hash(("a", ("b", 2))) == stable_hash(["a", ["b", 2]])
    assert stable_hash(("a", 1)) != stable_hash(("a", 2))
    assert stable_hash(("a",)) != stable_hash("a")


_SUBPROCESS = """
import json, sys
from squall.groupings import make_chooser, stable_hash
from squall.models import Grouping
keys = json.loads(sys.argv[1])
chooser = make_chooser(Grouping.FIELDS, [4, 5, 6, 7, 8], field_indexes=[0])
values = [k if not isinstance(k, list) else tuple(k) for k in keys]
print(json.dumps({
    "tasks": [chooser([v])[0] for v in values],
    "hashes": [stable_hash(v) for v in values],
    "pyhash": hash("word-for-python-hash"),
}))
"""


def test_fields_grouping_agrees_across_processes_with_different_hash_seeds() -> None:
    keys: list[Any] = [f"word{i}" for i in range(64)] + [7, -3, 2.5, ["a", 1]]
    values = [k if not isinstance(k, list) else tuple(k) for k in keys]
    here = make(Grouping.FIELDS, field_indexes=[0])
    expected = [here([v])[0] for v in values]
    results = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS, json.dumps(keys)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        results.append(json.loads(out.stdout))
    # the seeds do randomise Python's own hash of a str...
    assert results[0]["pyhash"] != results[1]["pyhash"]
    # ...but not the grouping
    for r in results:
        assert r["tasks"] == expected
        assert r["hashes"] == [stable_hash(v) for v in values]
    assert len(set(expected)) == 5


# --------------------------------------------------------------------------------------------
# partialKey
# --------------------------------------------------------------------------------------------


def _candidates(chooser: PartialKeyChooser, key: Any) -> set[int]:
    probe = PartialKeyChooser(chooser.tasks, chooser.indexes)
    return {probe([key])[0] for _ in range(10)}


def test_partial_key_sends_a_key_to_at_most_two_tasks() -> None:
    chooser = make(Grouping.PARTIAL_KEY, field_indexes=[0])
    assert isinstance(chooser, PartialKeyChooser)
    rng = random.Random(5)
    per_key: dict[str, set[int]] = collections.defaultdict(set)
    keys = [f"k{i}" for i in range(300)]
    for _ in range(6000):
        k = rng.choice(keys)
        [t] = chooser([k, rng.random()])
        assert t in TASKS
        per_key[k].add(t)
    assert all(1 <= len(ts) <= 2 for ts in per_key.values())
    assert any(len(ts) == 2 for ts in per_key.values())
    # every key stays within its two candidates, whatever this emitter's load was
    for k, ts in per_key.items():
        assert ts <= _candidates(chooser, k)


def test_partial_key_splits_a_hot_key_between_its_two_tasks() -> None:
    chooser = PartialKeyChooser(TASKS, [0])
    hot = next(f"hot{i}" for i in range(1000) if len(_candidates(chooser, f"hot{i}")) == 2)
    c = counts(chooser, [[hot]] * 1001)
    assert len(c) == 2
    a, b = c.values()
    assert abs(a - b) <= 1 and a + b == 1001


def test_partial_key_candidates_agree_across_choosers() -> None:
    a = PartialKeyChooser(TASKS, [0])
    b = PartialKeyChooser(list(reversed(TASKS)), [0])
    for k in WORDS[:100]:
        assert _candidates(a, k) == _candidates(b, k)


def test_partial_key_on_one_task() -> None:
    chooser = make(Grouping.PARTIAL_KEY, [3], field_indexes=[0])
    assert {chooser([w])[0] for w in WORDS[:20]} == {3}


# --------------------------------------------------------------------------------------------
# all, global, direct
# --------------------------------------------------------------------------------------------


def test_all_returns_every_task() -> None:
    chooser = make(Grouping.ALL, [8, 4, 6])
    assert chooser(["x"]) == [4, 6, 8]
    assert chooser(["y"]) == [4, 6, 8]


def test_global_returns_the_lowest_task() -> None:
    chooser = make(Grouping.GLOBAL, [8, 4, 6])
    assert {tuple(chooser([i])) for i in range(10)} == {(4,)}


def test_direct_has_no_chooser() -> None:
    assert make_chooser(Grouping.DIRECT, TASKS) is None


# --------------------------------------------------------------------------------------------
# custom
# --------------------------------------------------------------------------------------------


def test_custom_loads_prepares_and_chooses() -> None:
    ctx = object()
    before = len(fxg.PREPARED)
    chooser = make(
        Grouping.CUSTOM,
        [12, 10, 11],
        custom_class=f"{FXG}:FirstFieldModulo",
        context=ctx,
        stream=("split", "words"),
        source_task=3,
    )
    assert len(fxg.PREPARED) == before + 1
    impl, got_ctx, stream, targets = fxg.PREPARED[-1]
    assert isinstance(impl, fxg.FirstFieldModulo)
    assert got_ctx is ctx
    assert stream == ("split", "words")
    assert targets == [10, 11, 12]
    assert chooser([0, "a"]) == [10]
    assert chooser([4, "b"]) == [11]
    assert chooser([2, "c"]) == [12]
    assert impl.calls == [(3, [0, "a"]), (3, [4, "b"]), (3, [2, "c"])]


def test_custom_rejects_a_task_outside_the_targets() -> None:
    chooser = make(
        Grouping.CUSTOM, [10, 11], custom_class=f"{FXG}:OutOfRange", stream=("src", "s")
    )
    with pytest.raises(ValueError) as err:
        chooser(["x"])
    msg = str(err.value)
    assert f"{FXG}:OutOfRange" in msg
    assert "[999]" in msg
    assert "[10, 11]" in msg


@pytest.mark.parametrize("custom_class", [None, ""])
def test_custom_without_class_raises(custom_class: str | None) -> None:
    with pytest.raises(ValueError, match=r"custom grouping on src:s needs customClass"):
        make_chooser(Grouping.CUSTOM, TASKS, custom_class=custom_class, stream=("src", "s"))


def test_custom_class_path_may_name_a_nested_class() -> None:
    assert load_class(f"{FXG}:Nested.Inner") is fxg.Nested.Inner
    chooser = make(Grouping.CUSTOM, [1, 2], custom_class=f"{FXG}:Nested.Inner")
    assert chooser([1]) == [2]


def test_custom_class_that_does_not_exist_raises() -> None:
    with pytest.raises(AttributeError):
        make_chooser(Grouping.CUSTOM, TASKS, custom_class=f"{FXG}:NoSuchClass")
    with pytest.raises(ModuleNotFoundError):
        make_chooser(Grouping.CUSTOM, TASKS, custom_class="no_such_module_xyz:Cls")


def test_one_field_chooser_remembers_str_keys_within_its_bound() -> None:
    tasks = [3, 4, 5, 6]
    chooser = OneFieldChooser(tasks, 1)
    keys: list[Any] = [f"w{i}" for i in range(FIELDS_CACHE + 100)] + [1, True, 1.0, b"w1", ("a", 2), "w1"]
    for _round in range(2):  # the second round reads what the first remembered (or re-learns it)
        for k in keys:
            assert chooser(["x", k]) == [sorted(tasks)[stable_hash(k) % 4]], k
    assert 0 < len(chooser.known) <= FIELDS_CACHE
    assert all(type(k) is str for k in chooser.known)
