"""The event inspector's pure part (squall.sampling): settings merged and lapsing at an
injected time, a component's own setting over `*`, and deterministic 1-in-N sampling into a
bounded buffer."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from squall.sampling import ALL, Sampler, SamplingError, merge, next_change, parse_config, pct_for

pytestmark = pytest.mark.unit


def test_a_component_is_sampled_until_its_setting_lapses_and_its_own_setting_wins_over_all() -> None:
    cfg = merge({}, None, 1, None, now=100.0)
    cfg = merge(cfg, "split", 50, 30, now=100.0)
    assert cfg == {ALL: {"pct": 1.0, "expires": None}, "split": {"pct": 50.0, "expires": 130.0}}
    assert pct_for(cfg, "split", 129.9) == 50.0
    assert pct_for(cfg, "count", 129.9) == 1.0
    assert pct_for(cfg, "split", 130.0) == 1.0  # lapsed: back to every component's
    assert next_change(cfg, 100.0) == 130.0 and next_change(cfg, 130.0) is None
    assert merge(cfg, None, None, None, now=200.0) == {}  # off, and the lapsed one dropped
    assert pct_for({}, "split", 0.0) == 0.0


@pytest.mark.parametrize(("pct", "secs", "message"), [
    (0, None, "above 0 and at most 100 (got 0)"),
    (101, None, "above 0 and at most 100 (got 101)"),
    (float("nan"), None, "above 0 and at most 100"),
    (10, 0, "sampling time must be above 0"),
    (10, 10 ** 9, "at most 604800 seconds"),
])
def test_a_setting_that_cannot_be_used_is_refused_in_one_line(pct: float, secs: float | None, message: str) -> None:
    with pytest.raises(SamplingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        merge({}, "split", pct, secs, now=0.0)


def test_a_stored_config_is_checked() -> None:
    assert parse_config({"split": {"pct": 5, "expires": None}}) == {"split": {"pct": 5.0, "expires": None}}
    for bad, message in [({"split": {"pct": "x"}}, "split: the sample percentage"),
                         ({"split": {"pct": 5, "expires": "soon"}}, "split: expires must be"),
                         ({"": {"pct": 5}}, "component must be a name"),
                         ({"split": 5}, "split: a sampling setting is")]:
        with pytest.raises(SamplingError, match=message):
            parse_config(bad)


def test_one_emit_in_round_100_over_pct_is_sampled_with_its_values_as_text_into_a_bounded_buffer() -> None:
    sink: deque[tuple[Any, ...]] = deque(maxlen=3)
    s = Sampler(25.0, "split", sink, clock=lambda: 7.0)
    for i in range(12):
        s.offer(3, "default", [f"w{i}", i], msg_id=None if i % 2 else i)
    # every 4th emit: the 4th, 8th and 12th (i = 3, 7, 11), values as text
    assert list(sink) == [(7.0, "split", 3, "default", None, ["'w3'", "3"]),
                          (7.0, "split", 3, "default", None, ["'w7'", "7"]),
                          (7.0, "split", 3, "default", None, ["'w11'", "11"])]
    s100 = Sampler(100.0, "s", sink, clock=lambda: 8.0)
    s100.offer(1, "default", ["x" * 1000], msg_id=42)
    when, comp, task, stream, msg_id, values = sink[-1]
    assert (comp, task, msg_id) == ("s", 1, "42") and len(values[0]) <= 310  # cut, not stored whole
    assert len(sink) == 3  # bounded: the oldest went
