"""squall.builder: TopologyBuilder produces the same resource as YAML; topology_to_yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import fixtures_components as fx
from squall.builder import TopologyBuilder, class_path, topology_to_yaml
from squall.errors import TopologyError
from squall.models import Grouping, StreamSpec, Topology
from squall.validation import check_topology, parse_topology

pytestmark = pytest.mark.unit

SEARCH = (Path(__file__).resolve().parent,)
FX = fx.__name__

WORDCOUNT = f"""\
apiVersion: squall.io/v1alpha1
kind: Topology
metadata:
  name: wordcount
spec:
  numWorkers: 2
  messageTimeoutSecs: 30
  maxSpoutPending: 100
  config:
    topology.debug: true
  spouts:
    - name: sentences
      class: {FX}:SentenceSpout
  bolts:
    - name: split
      class: {FX}:SplitBolt
      parallelism: 2
      inputs:
        - component: sentences
          grouping: shuffle
    - name: count
      class: {FX}:CountBolt
      parallelism: 2
      numTasks: 4
      config:
        window: 10
      inputs:
        - component: split
          grouping: fields
          fields: [word]
"""


def wordcount_builder() -> TopologyBuilder:
    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", fx.SentenceSpout, parallelism=1)
    b.set_bolt("split", fx.SplitBolt, parallelism=2).shuffle_grouping("sentences")
    b.set_bolt("count", fx.CountBolt, 2, num_tasks=4, config={"window": 10}).fields_grouping(
        "split", ["word"]
    )
    return b


def test_builder_equals_parsed_yaml() -> None:
    topo = wordcount_builder().build(
        num_workers=2,
        message_timeout_secs=30,
        max_spout_pending=100,
        config={"topology.debug": True},
    )
    assert isinstance(topo, Topology)
    assert topo == parse_topology(WORDCOUNT)
    check_topology(topo, search_paths=SEARCH)


def test_class_objects_become_class_paths() -> None:
    assert class_path(fx.SplitBolt) == f"{FX}:SplitBolt"
    assert class_path("pkg.mod:Cls") == "pkg.mod:Cls"
    topo = wordcount_builder().build()
    assert [c.class_name for c in topo.spec.components] == [
        f"{FX}:SentenceSpout",
        f"{FX}:SplitBolt",
        f"{FX}:CountBolt",
    ]


def test_unimportable_classes_are_refused() -> None:
    class Local:
        def execute(self, tup: object) -> None:
            pass

    with pytest.raises(ValueError, match="inside a function"):
        TopologyBuilder("t").set_bolt("b", Local)
    Main = type("Main", (), {"__module__": "__main__"})
    with pytest.raises(ValueError, match="__main__"):
        TopologyBuilder("t").set_bolt("b", Main)
    with pytest.raises(TypeError):
        TopologyBuilder("t").set_bolt("b", fx.SplitBolt())  # type: ignore[arg-type]


def test_defaults_match_the_resource_defaults() -> None:
    b = TopologyBuilder("tiny")
    b.set_spout("s", "m:S")
    text = "apiVersion: squall.io/v1alpha1\nkind: Topology\nmetadata: {name: tiny}\n" \
           "spec: {spouts: [{name: s, class: 'm:S'}]}\n"
    assert b.build() == parse_topology(text)


def test_every_grouping_method() -> None:
    b = TopologyBuilder("groupings")
    b.set_spout("src", fx.SentenceSpout)
    b.set_bolt("multi", fx.MultiStreamBolt).shuffle_grouping("src")
    sink = b.set_bolt("sink", fx.SinkBolt)
    assert sink.local_or_shuffle_grouping("src") is sink
    (
        sink.fields_grouping("multi", ["word"])
        .partial_key_grouping("multi", "word", stream="lengths")
        .direct_grouping("multi", stream="targeted")
    )
    other = b.set_bolt("other", fx.SinkBolt)
    other.all_grouping("src").global_grouping("multi").none_grouping("multi", "lengths")
    last = b.set_bolt("last", fx.SinkBolt)
    last.custom_grouping("multi", fx.FirstLetterGrouping, stream="lengths")
    topo = b.build()
    inputs = {bolt.name: bolt.inputs for bolt in topo.spec.bolts}
    assert [(i.component, i.stream, i.grouping, i.fields) for i in inputs["sink"]] == [
        ("src", "default", Grouping.LOCAL_OR_SHUFFLE, None),
        ("multi", "default", Grouping.FIELDS, ["word"]),
        ("multi", "lengths", Grouping.PARTIAL_KEY, ["word"]),
        ("multi", "targeted", Grouping.DIRECT, None),
    ]
    assert [i.grouping for i in inputs["other"]] == [Grouping.ALL, Grouping.GLOBAL, Grouping.NONE]
    (custom,) = inputs["last"]
    assert custom.grouping is Grouping.CUSTOM
    assert custom.custom_class == f"{FX}:FirstLetterGrouping"
    assert custom.stream == "lengths"
    check_topology(topo, search_paths=SEARCH)


def test_outputs_forms() -> None:
    b = TopologyBuilder("outs")
    b.set_spout("a", "m:A", outputs=["x", "y"])
    b.set_spout("b", "m:B", outputs={"default": ["x"], "side": {"fields": ["z"], "direct": True}})
    b.set_spout("c", "m:C").declare_stream("s", ["q"], direct=True).declare_stream("s", ["r"])
    b.set_spout("d", "m:D")
    spouts = {s.name: s for s in b.build().spec.spouts}
    assert spouts["a"].outputs == [StreamSpec(fields=["x", "y"])]
    assert spouts["b"].outputs == [
        StreamSpec(fields=["x"]),
        StreamSpec(stream="side", fields=["z"], direct=True),
    ]
    assert spouts["c"].outputs == [StreamSpec(stream="s", fields=["r"])]
    assert spouts["d"].outputs is None


def test_num_tasks_and_configuration_setters() -> None:
    b = TopologyBuilder("setters")
    b.set_spout("s", "m:S", 2).set_num_tasks(6).add_configuration("k", 1).add_configurations(
        {"j": 2}
    )
    (spout,) = b.build().spec.spouts
    assert (spout.parallelism, spout.num_tasks, spout.config) == (2, 6, {"k": 1, "j": 2})


def test_build_options() -> None:
    b = TopologyBuilder("opts", namespace="prod", labels={"team": "data"})
    b.set_spout("s", "m:S")
    topo = b.build(
        3,
        num_ackers=0,
        message_timeout_secs=12.5,
        max_spout_pending=7,
        tick_tuple_freq_secs=1,
        kill_wait_secs=2,
        rebalance_wait_secs=4,
        active=False,
    )
    spec = topo.spec
    assert (spec.num_workers, spec.ackers, spec.message_timeout_secs) == (3, 0, 12.5)
    assert (spec.max_spout_pending, spec.tick_tuple_freq_secs) == (7, 1)
    assert (spec.kill_wait, spec.rebalance_wait, spec.active) == (2, 4, False)
    assert topo.metadata.namespace == "prod" and topo.metadata.labels == {"team": "data"}


def test_duplicate_component_names_are_refused_at_once() -> None:
    b = TopologyBuilder("dupes")
    b.set_spout("x", "m:S")
    with pytest.raises(ValueError, match="already has a component named 'x'"):
        b.set_bolt("x", "m:B")


def test_build_reports_schema_problems_as_topology_error() -> None:
    b = TopologyBuilder("Bad_Name")
    b.set_spout("s", "m:S", parallelism=0)
    with pytest.raises(TopologyError) as info:
        b.build()
    paths = [p.path for p in info.value.problems]
    assert paths == ["metadata.name", "spec.spouts[0].parallelism"]
    assert "must be >= 1" in str(info.value)


def test_yaml_round_trip_and_key_order() -> None:
    topo = wordcount_builder().build(num_workers=2, config={"topology.debug": True})
    text = topology_to_yaml(topo)
    assert parse_topology(text) == topo
    top_keys = [line.split(":")[0] for line in text.splitlines() if line[:1].isalpha()]
    assert top_keys == ["apiVersion", "kind", "metadata", "spec"]
    data = yaml.safe_load(text)
    assert list(data["spec"])[:1] == ["numWorkers"]
    assert list(data["spec"])[-2:] == ["spouts", "bolts"]
    assert "null" not in text
    assert "labels" not in text  # empty defaults are left out
    assert "fields: [word]" in text
    assert "class: fixtures_components:SplitBolt" in text
    # The YAML of a parsed file round-trips too.
    parsed = parse_topology(WORDCOUNT)
    assert parse_topology(topology_to_yaml(parsed)) == parsed


def test_yaml_keeps_user_config_values() -> None:
    b = TopologyBuilder("cfg")
    b.set_spout("s", "m:S", config={"empty": {}, "list": [], "nested": {"a": [1, 2]}})
    topo = b.build()
    assert parse_topology(topology_to_yaml(topo)) == topo
