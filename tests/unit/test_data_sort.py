"""The sorting of received tuples by destination (squall.worker.routing.sort_data, the per-tuple
part of Worker._dispatch_data), with plain values: inboxes and slots as plain strings. Its shape
check must agree with squall.wire.check_tuple on anything a frame can decode to."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.models.cluster import WorkerSlot
from squall.wire import check_tuple
from squall.worker.routing import sort_data

pytestmark = pytest.mark.unit

HERE = WorkerSlot("n1", 6700)
THERE = WorkerSlot("n2", 6700)
# task -> a local inbox (a string here), another worker's slot, or this worker's own slot (a
# task assigned here without an inbox, e.g. an acker task: nowhere to hand a tuple)
DEST: dict[int, Any] = {1: "inbox-a", 2: "inbox-a", 3: "inbox-b", 4: THERE, 5: HERE}


def _sort(items: list[Any], checked: bool = False) -> tuple[dict[Any, list[list[Any]]], int, int]:
    groups: dict[Any, list[list[Any]]] = {}
    bad, dropped = sort_data(items, checked, DEST, HERE, groups)
    return groups, bad, dropped


def t(dest: int, anchors: Any = None) -> list[Any]:
    return [dest, 9, "default", ["w"], anchors]


def test_each_tuple_goes_to_its_destination_in_order() -> None:
    items = [t(1), t(1, {7: 8}), t(3), t(2), t(4), t(1), t(99), t(99), t(5), t(4, {1: 2})]
    groups, bad, dropped = _sort(items)
    assert groups == {
        "inbox-a": [items[0], items[1], items[3], items[5]],
        "inbox-b": [items[2]],
        THERE: [items[4], items[9]],  # a task that moved: forwarded to its worker
    }
    assert (bad, dropped) == (0, 3)  # two for an unknown task, one for this slot without an inbox
    assert groups["inbox-a"][0] is items[0]  # the tuples themselves, not copies


def test_a_dropped_task_between_two_runs_does_not_join_them() -> None:
    items = [t(1), t(99), t(1), t(99)]
    groups, bad, dropped = _sort(items)
    assert groups == {"inbox-a": [items[0], items[2]]}
    assert (bad, dropped) == (0, 2)


@pytest.mark.parametrize(
    "item",
    [
        None,
        (1, 9, "default", ["w"], None),
        [1, 9, "default", ["w"]],
        [1, 9, "default", ["w"], None, 0],
        ["1", 9, "default", ["w"], None],
        [True, 9, "default", ["w"], None],
        [1, 9.0, "default", ["w"], None],
        [1, 9, b"default", ["w"], None],
        [1, 9, "default", ("w",), None],
        [1, 9, "default", ["w"], []],
        [1, 9, "default", ["w"], False],
        [1, 9, "default", ["w"], {"r": 1}],
        [1, 9, "default", ["w"], {1: 2, 3: "e"}],
        [1, 9, "default", ["w"], {True: 1}],
    ],
)
def test_malformed_items_are_skipped_and_counted(item: Any) -> None:
    good = t(1)
    groups, bad, dropped = _sort([item, good])
    assert groups == {"inbox-a": [good]}
    assert (bad, dropped) == (1, 0)


def test_checked_items_are_not_checked_again() -> None:
    # items parked for an inbox that left were checked when they arrived
    items = [t(1, {1: 2}), t(4)]
    assert _sort(items, checked=True) == ({"inbox-a": [items[0]], THERE: [items[1]]}, 0, 0)


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.integers() | st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=10,
)
_items = st.one_of(
    st.tuples(st.integers(0, 6) | _values, st.integers(-1, 9) | _values, st.sampled_from(["default", "s"]) | _values,
              st.lists(_values, max_size=2) | _values,
              st.none() | st.dictionaries(st.integers(0, 9) | st.booleans() | st.floats() | st.text(max_size=2),
                                           st.integers(0, 9) | _values, max_size=2)
              | _values).map(list),
    _values,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_items, max_size=8))
def test_agrees_with_the_wires_shape_check(items: list[Any]) -> None:
    groups, bad, dropped = _sort(items)
    good = [it for it in items if check_tuple(it)]
    assert bad == len(items) - len(good)
    assert sum(len(g) for g in groups.values()) + dropped == len(good)
