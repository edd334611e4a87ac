"""Declaring windows: the `window` block of a bolt in the topology file, the builder's
`with_window` family, and every refusal naming its field (docs/topology.md, "Windowed bolts")."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.builder import TopologyBuilder, topology_to_yaml
from squall.errors import NO_VALUE, TopologyError
from squall.validation import check_topology, parse_topology
from squall.windowing import LATE_FIELDS, WindowConfig

pytestmark = pytest.mark.unit

SEARCH = (Path(__file__).resolve().parent,)
FX = "fixtures_windowing"

BASE: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "windows"},
    "spec": {
        "messageTimeoutSecs": 30,
        "spouts": [{"name": "events", "class": f"{FX}:EventSpout"}],
        "bolts": [
            {"name": "count", "class": f"{FX}:WindowCount",
             "inputs": [{"component": "events"}],
             "window": {"windowLength": "10s", "slidingInterval": "5s", "timestampField": "ts",
                        "lag": "2s", "lateStream": "late"}},
            {"name": "late", "class": f"{FX}:PlainBolt",
             "inputs": [{"component": "count", "stream": "late"}]},
        ],
    },
}


def doc(**window: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    w = d["spec"]["bolts"][0]["window"]
    for key, value in window.items():
        if value is None:
            w.pop(key, None)
        else:
            w[key] = value
    return d


def problems(d: dict[str, Any], resolve: bool = True) -> dict[str, tuple[Any, str]]:
    with pytest.raises(TopologyError) as info:
        check_topology(parse_topology(d), resolve_classes=resolve, search_paths=SEARCH)
    return {p.path: (p.value, p.message) for p in info.value.problems}


def test_a_good_window_declares_the_late_stream() -> None:
    resolved = check_topology(parse_topology(BASE), search_paths=SEARCH)
    late = resolved.streams["count"]["late"]
    assert tuple(late.fields) == LATE_FIELDS == ("tuple", "reason")
    window = resolved.topology.spec.bolts[0].window
    assert window is not None
    config = WindowConfig.from_spec(window.model_dump(by_alias=True, exclude_none=True))
    assert (config.length.value, config.sliding.value, config.lag) == (10.0, 5.0, 2.0)
    assert config.event_time and config.watermark_interval == 1.0


def test_schema_refusals_name_the_field() -> None:
    for window, path, words in (
        ({"windowLength": None}, "spec.bolts[0].window.windowLength", "required"),
        ({"windowLength": "10"}, "spec.bolts[0].window.windowLength", "not a duration"),
        ({"windowLength": 0}, "spec.bolts[0].window.windowLength", "at least 1"),
        ({"slidingInterval": 2.5}, "spec.bolts[0].window.slidingInterval", ""),
        ({"lag": "2 s"}, "spec.bolts[0].window.lag", ""),
        ({"lateStream": "late stream"}, "spec.bolts[0].window.lateStream", ""),
    ):
        with pytest.raises(TopologyError) as info:
            parse_topology(doc(**window))
        paths = {p.path: p.message for p in info.value.problems}
        assert path in paths, f"{window}: {info.value}"
        assert words in paths[path], paths[path]


def test_graph_refusals_name_the_field() -> None:
    got = problems(doc(slidingInterval="15s"))
    assert "longer than the window" in got["spec.bolts[0].window.slidingInterval"][1]

    got = problems(doc(timestampField="time"))
    value, message = got["spec.bolts[0].window.timestampField"]
    assert value == "time" and "inputs[0]" in message and "fields: word, ts" in message

    d = doc()
    d["spec"]["bolts"][0]["inputs"].append({"component": "events", "stream": "untimed"})
    got = problems(d)
    assert "inputs[1]" in got["spec.bolts[0].window.timestampField"][1]

    d = doc(timestampField=None, lag=None)
    d["spec"]["bolts"].pop()  # nothing subscribes to the (refused) late stream
    got = problems(d)
    assert "set timestampField" in got["spec.bolts[0].window.lateStream"][1]

    # lag 0 is fine, and 20 + 5 + 0 + 1 = 26 s < 30 s
    check_topology(parse_topology(doc(lag="0s", windowLength="20s")), search_paths=SEARCH)


def test_timeout_and_pending_limits() -> None:
    got = problems(doc(windowLength="25s"))  # 25 + 5 + 2 + 1 = 33 >= 30
    value, message = got["spec.bolts[0].window.windowLength"]
    assert value == "25s" and "33s" in message and "messageTimeoutSecs (30s)" in message
    assert "lag + watermarkInterval" in message

    d = doc(windowLength=100, slidingInterval=50, timestampField=None, lag=None, lateStream=None)
    d["spec"]["bolts"].pop()
    d["spec"]["maxSpoutPending"] = 100
    got = problems(d)
    assert "never fill" in got["spec.bolts[0].window.windowLength"][1]
    d["spec"]["maxSpoutPending"] = 150
    check_topology(parse_topology(d), search_paths=SEARCH)


def test_window_and_class_must_agree() -> None:
    d = doc()
    del d["spec"]["bolts"][0]["window"]
    d["spec"]["bolts"].pop()
    got = problems(d)
    assert got["spec.bolts[0].window"][0] is NO_VALUE
    assert "is a WindowedBolt" in got["spec.bolts[0].window"][1]

    d = doc()
    d["spec"]["bolts"][0]["class"] = f"{FX}:PlainBolt"
    got = problems(d)
    assert "not a WindowedBolt" in got["spec.bolts[0].window"][1]
    # without the classes (the operator imports no user code) the window alone is checked
    check_topology(parse_topology(d), resolve_classes=False)


def test_a_declared_late_stream_must_have_the_late_fields() -> None:
    d = doc()
    d["spec"]["bolts"][0]["outputs"] = [{"stream": "late", "fields": ["x"]}]
    got = problems(d)
    assert "tuple, reason" in got["spec.bolts[0].window.lateStream"][1]
    d = doc(lateStream="__late")
    d["spec"]["bolts"].pop()
    assert "reserved" in problems(d)["spec.bolts[0].window.lateStream"][1]


def test_builder_declares_the_same_window() -> None:
    b = TopologyBuilder("windows")
    b.set_spout("events", f"{FX}:EventSpout")
    (b.set_bolt("count", f"{FX}:WindowCount").shuffle_grouping("events")
     .with_window(timedelta(seconds=10), "5s").with_timestamp_field("ts")
     .with_lag(timedelta(seconds=2)).with_late_tuple_stream("late"))
    b.set_bolt("late", f"{FX}:PlainBolt").shuffle_grouping("count", "late")
    topo = b.build(message_timeout_secs=30)
    assert topo == parse_topology(BASE)
    assert parse_topology(topology_to_yaml(topo)) == topo
    check_topology(topo, search_paths=SEARCH)

    c = TopologyBuilder("tumbling")
    c.set_spout("events", f"{FX}:EventSpout")
    c.set_bolt("count", f"{FX}:WindowCount").shuffle_grouping("events").with_tumbling_window(100)
    window = c.build().spec.bolts[0].window
    assert window is not None and (window.window_length, window.sliding_interval) == (100, None)
    d = TopologyBuilder("ms")
    d.set_spout("events", f"{FX}:EventSpout")
    d.set_bolt("count", f"{FX}:WindowCount").shuffle_grouping("events").with_window(
        timedelta(milliseconds=1500), timedelta(microseconds=2500))
    window = d.build().spec.bolts[0].window
    assert window is not None and (window.window_length, window.sliding_interval) == ("1500ms", "2.500ms")
