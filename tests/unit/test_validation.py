"""squall.validation and squall.errors: YAML -> Topology, and the whole-graph checks."""

from __future__ import annotations

import copy
import pickle
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.errors import NO_VALUE, Problem, TopologyError
from squall.models import BoltSpec, SpoutSpec, StreamSpec, Topology
from squall.validation import (
    ResolvedTopology,
    check_topology,
    declared_streams,
    load_topology,
    normalize_outputs,
    parse_topology,
    resolve_class,
    validate_file,
)

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent
SEARCH = (HERE,)
FX = "fixtures_components"

WORDCOUNT = f"""\
apiVersion: squall.io/v1alpha1
kind: Topology
metadata:
  name: wordcount
spec:
  numWorkers: 2
  spouts:
    - name: sentences
      class: {FX}:SentenceSpout
  bolts:
    - name: split
      class: {FX}:SplitBolt
      parallelism: 2
      inputs:
        - component: sentences
    - name: count
      class: {FX}:CountBolt
      parallelism: 2
      numTasks: 4
      inputs:
        - component: split
          grouping: fields
          fields: [word]
"""


def wordcount() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(WORDCOUNT))


def parse_error(data: Any, source: str = "<string>") -> TopologyError:
    with pytest.raises(TopologyError) as info:
        parse_topology(data, source=source)
    return info.value


def check_error(data: Any, **kwargs: Any) -> TopologyError:
    topo = data if isinstance(data, Topology) else parse_topology(data)
    kwargs.setdefault("search_paths", SEARCH)
    with pytest.raises(TopologyError) as info:
        check_topology(topo, **kwargs)
    return info.value


def find(err: TopologyError, path: str) -> Problem:
    matches = [p for p in err.problems if p.path == path]
    assert matches, f"no problem at {path}; got:\n{err}"
    assert len(matches) == 1, f"several problems at {path}:\n{err}"
    return matches[0]


def assert_problem(err: TopologyError, path: str, value: Any, *words: str) -> Problem:
    problem = find(err, path)
    assert problem.value == value, str(problem)
    for word in words:
        assert word in problem.message, f"{word!r} not in {problem.message!r}"
    return problem


def bolt(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in d["spec"]["bolts"] if b["name"] == name)


# ---------------------------------------------------------------------------------- errors


def test_problem_and_error_rendering() -> None:
    err = TopologyError(
        [
            Problem("spec.bolts[1].inputs[0].component", "splitt", "unknown component"),
            Problem("spec.spouts[0].class", NO_VALUE, "required field missing"),
            Problem("spec.numWorkers", None, "must be an integer"),
            Problem("", NO_VALUE, "the document is empty"),
        ],
        source="topology.yaml",
    )
    assert str(err).splitlines() == [
        "topology.yaml: spec.bolts[1].inputs[0].component: 'splitt' — unknown component",
        "topology.yaml: spec.spouts[0].class — required field missing",
        "topology.yaml: spec.numWorkers: null — must be an integer",
        "topology.yaml: the document is empty",
    ]
    assert isinstance(err, ValueError)
    assert str(err.with_source(None)).splitlines()[0].startswith("spec.bolts[1]")
    again = pickle.loads(pickle.dumps(err))
    assert again.problems == err.problems and again.source == "topology.yaml"


def test_long_values_are_cut_short() -> None:
    line = str(Problem("spec.config", {"k": "x" * 500}, "bad"))
    assert len(line) < 120 and "..." in line


# ---------------------------------------------------------------------------------- parsing


def test_parse_valid_yaml() -> None:
    topo = parse_topology(WORDCOUNT)
    assert topo.name == "wordcount"
    assert [c.name for c in topo.spec.components] == ["sentences", "split", "count"]
    assert topo.spec.bolts[1].inputs[0].fields == ["word"]
    assert parse_topology(wordcount()) == topo


def test_yaml_syntax_error_names_line_and_column() -> None:
    err = parse_error("apiVersion: squall.io/v1alpha1\nkind: [Topology\n", source="t.yaml")
    (problem,) = err.problems
    assert problem.path.startswith("line ")
    assert "invalid YAML" in problem.message
    assert str(err).startswith("t.yaml: line ")


def test_duplicate_yaml_key() -> None:
    text = WORDCOUNT.replace("  numWorkers: 2\n", "  numWorkers: 2\n  numWorkers: 3\n")
    (problem,) = parse_error(text).problems
    assert problem.path == "line 7, column 3"
    assert "duplicate key 'numWorkers'" in problem.message


def test_empty_and_non_mapping_documents() -> None:
    assert "empty" in parse_error("").problems[0].message
    (problem,) = parse_error("- a\n- b\n").problems
    assert problem.path == "" and "expected a mapping" in problem.message and "list" in problem.message


def test_wrong_api_version_and_kind_are_named_alone() -> None:
    d = wordcount()
    d["apiVersion"] = "apps/v1"
    d["kind"] = "Deployment"
    d["spec"]["numWorkers"] = 0  # not reported: this is not a Topology at all
    err = parse_error(d)
    assert [p.path for p in err.problems] == ["apiVersion", "kind"]
    assert_problem(err, "apiVersion", "apps/v1", "unsupported apiVersion", "squall.io/v1alpha1")
    assert_problem(err, "kind", "Deployment", "expected kind 'Topology'")


def test_bad_name_is_not_a_dns_label() -> None:
    d = wordcount()
    d["metadata"]["name"] = "Word_Count"
    err = parse_error(d, source="topology.yaml")
    assert str(err) == (
        "topology.yaml: metadata.name: 'Word_Count' — must be a DNS label (lowercase letters, "
        "digits, '-'; starting and ending with a letter or digit; at most 63 characters)"
    )


def test_parallelism_zero() -> None:
    d = wordcount()
    d["spec"]["bolts"][0]["parallelism"] = 0
    assert str(parse_error(d)) == "spec.bolts[0].parallelism: 0 — must be >= 1"


def test_spout_inputs_are_rejected_clearly() -> None:
    d = wordcount()
    d["spec"]["spouts"][0]["inputs"] = [{"component": "count"}]
    err = parse_error(d)
    assert_problem(
        err, "spec.spouts[0].inputs", [{"component": "count"}], "spouts take no inputs"
    )


def test_unknown_field_suggests_the_right_one() -> None:
    d = wordcount()
    d["spec"]["numWorker"] = d["spec"].pop("numWorkers")
    d["spec"]["bolts"][1]["inputs"][0]["feilds"] = ["word"]
    err = parse_error(d)
    assert_problem(err, "spec.numWorker", 2, "unknown field", "did you mean 'numWorkers'?")
    assert_problem(err, "spec.bolts[1].inputs[0].feilds", ["word"], "did you mean 'fields'?")


def test_missing_required_fields() -> None:
    d = wordcount()
    del d["spec"]["spouts"][0]["class"]
    del d["metadata"]["name"]
    err = parse_error(d)
    assert_problem(err, "spec.spouts[0].class", NO_VALUE, "required field missing")
    assert_problem(err, "metadata.name", NO_VALUE, "required field missing")
    assert "spec.spouts[0].class — required field missing" in str(err).splitlines()


def test_type_enum_pattern_and_bound_messages() -> None:
    d = wordcount()
    d["spec"]["numWorkers"] = "two"
    d["spec"]["messageTimeoutSecs"] = 0
    d["spec"]["bolts"][0]["class"] = "SplitBolt"
    d["spec"]["bolts"][0]["inputs"][0]["grouping"] = "random"
    d["spec"]["bolts"][0]["inputs"][0]["stream"] = "my stream"
    d["spec"]["bolts"][1]["outputs"] = {"default": ["word"]}
    err = parse_error(d)
    assert_problem(err, "spec.numWorkers", "two", "must be an integer")
    assert_problem(err, "spec.messageTimeoutSecs", 0, "must be > 0")
    assert_problem(err, "spec.bolts[0].class", "SplitBolt", "module:Class")
    assert_problem(err, "spec.bolts[0].inputs[0].grouping", "random", "unknown grouping", "fields")
    assert_problem(err, "spec.bolts[0].inputs[0].stream", "my stream", "must be a stream name")
    assert_problem(err, "spec.bolts[1].outputs", {"default": ["word"]}, "list of streams")


def test_a_topology_needs_a_spout() -> None:
    d = wordcount()
    d["spec"]["spouts"] = []
    assert_problem(parse_error(d), "spec.spouts", [], "at least one spout")


def test_config_keys_with_dots_are_quoted_in_paths() -> None:
    d = wordcount()
    d["metadata"]["labels"] = {"app.kubernetes.io/name": 3}
    err = parse_error(d)
    assert_problem(err, "metadata.labels['app.kubernetes.io/name']", 3, "must be a string")


def test_every_schema_problem_is_listed_in_document_order() -> None:
    d = wordcount()
    d["metadata"]["name"] = "Bad"
    d["spec"]["spouts"][0]["parallelism"] = 0
    d["spec"]["bolts"][1]["numTasks"] = -1
    err = parse_error(d)
    assert [p.path for p in err.problems] == [
        "metadata.name",
        "spec.spouts[0].parallelism",
        "spec.bolts[1].numTasks",
    ]
    assert len(str(err).splitlines()) == 3


def test_load_topology_prefixes_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(WORDCOUNT.replace("parallelism: 2", "parallelism: 0", 1))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert str(info.value) == f"{path}: spec.bolts[0].parallelism: 0 — must be >= 1"
    path.write_text(WORDCOUNT)
    assert load_topology(path).name == "wordcount"


def test_load_topology_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path / "nope.yaml")
    assert "cannot read the file" in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "nope.yaml") + ": ")


# ---------------------------------------------------------------------------------- graph


def test_check_ok_resolves_classes_and_streams() -> None:
    import fixtures_components as fx

    resolved = check_topology(parse_topology(WORDCOUNT), search_paths=SEARCH)
    assert isinstance(resolved, ResolvedTopology)
    assert resolved.name == "wordcount"
    assert resolved.classes == {
        "sentences": fx.SentenceSpout,
        "split": fx.SplitBolt,
        "count": fx.CountBolt,
    }
    assert resolved.streams["sentences"] == {"default": StreamSpec(fields=["sentence"])}
    assert resolved.streams["count"]["default"].fields == ["word", "count"]
    assert set(resolved.components) == {"sentences", "split", "count"}


def test_unknown_component_lists_the_known_ones() -> None:
    d = wordcount()
    bolt(d, "count")["inputs"][0]["component"] = "splitt"
    err = check_error(d)
    assert str(err) == (
        "spec.bolts[1].inputs[0].component: 'splitt' — unknown component "
        "(known: count, sentences, split)"
    )


def test_duplicate_names_share_one_namespace() -> None:
    d = wordcount()
    d["spec"]["bolts"][1]["name"] = "sentences"
    d["spec"]["bolts"].append(copy.deepcopy(d["spec"]["bolts"][0]))  # a second "split"
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[1].name", "sentences", "duplicate component name", "spec.spouts[0].name"
    )
    assert_problem(err, "spec.bolts[2].name", "split", "duplicate", "spec.bolts[0].name")


def test_reserved_names() -> None:
    # The DNS-label pattern already rejects "__acker"; check_topology guards a model built
    # without validation too.
    topo = parse_topology(WORDCOUNT)
    spout = SpoutSpec.model_construct(
        **{**topo.spec.spouts[0].__dict__, "name": "__acker"}
    )
    spec = topo.spec.model_copy(update={"spouts": [spout, *topo.spec.spouts]})
    err = check_error(topo.model_copy(update={"spec": spec}))
    assert_problem(err, "spec.spouts[0].name", "__acker", "reserved for system components")


def test_unknown_stream() -> None:
    d = wordcount()
    bolt(d, "split")["inputs"][0]["stream"] = "lines"
    err = check_error(d)
    assert_problem(
        err,
        "spec.bolts[0].inputs[0].stream",
        "lines",
        "'sentences' declares no stream 'lines'",
        "declared: default",
    )


def test_stream_of_a_component_declaring_none() -> None:
    d = wordcount()
    bolt(d, "count")["class"] = f"{FX}:SinkBolt"
    d["spec"]["bolts"].append({"name": "after", "class": f"{FX}:SinkBolt",
                               "inputs": [{"component": "count"}]})
    err = check_error(d)
    assert_problem(err, "spec.bolts[2].inputs[0].stream", "default", "declares no output streams")


def test_fields_grouping_without_fields() -> None:
    d = wordcount()
    del bolt(d, "count")["inputs"][0]["fields"]
    err = check_error(d)
    assert_problem(err, "spec.bolts[1].inputs[0].fields", None, "fields grouping needs fields")
    bolt(d, "count")["inputs"][0]["fields"] = []
    assert_problem(check_error(d), "spec.bolts[1].inputs[0].fields", [], "needs fields")


def test_partial_key_grouping_without_fields() -> None:
    d = wordcount()
    inp = bolt(d, "count")["inputs"][0]
    inp["grouping"] = "partialKey"
    del inp["fields"]
    err = check_error(d)
    assert_problem(err, "spec.bolts[1].inputs[0].fields", None, "partialKey grouping needs fields")


def test_grouping_on_an_undeclared_field() -> None:
    d = wordcount()
    bolt(d, "count")["inputs"][0]["fields"] = ["word", "wrd"]
    err = check_error(d)
    assert [p.path for p in err.problems] == ["spec.bolts[1].inputs[0].fields[1]"]
    assert_problem(
        err,
        "spec.bolts[1].inputs[0].fields[1]",
        "wrd",
        "stream 'default' of 'split' has no field 'wrd'",
        "(fields: word)",
    )


def test_fields_given_to_a_grouping_that_takes_none() -> None:
    d = wordcount()
    bolt(d, "split")["inputs"][0]["fields"] = ["sentence"]
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[0].inputs[0].fields", ["sentence"], "shuffle grouping takes no fields"
    )


def test_custom_grouping_needs_custom_class() -> None:
    d = wordcount()
    bolt(d, "split")["inputs"][0]["grouping"] = "custom"
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[0].inputs[0].customClass", NO_VALUE, "custom grouping needs customClass"
    )


def test_custom_class_on_another_grouping() -> None:
    d = wordcount()
    bolt(d, "split")["inputs"][0]["customClass"] = f"{FX}:FirstLetterGrouping"
    err = check_error(d)
    assert_problem(
        err,
        "spec.bolts[0].inputs[0].customClass",
        f"{FX}:FirstLetterGrouping",
        "only custom grouping takes customClass",
    )


def test_custom_grouping_class_is_imported_and_checked() -> None:
    d = wordcount()
    inp = bolt(d, "split")["inputs"][0]
    inp.update(grouping="custom", customClass=f"{FX}:FirstLetterGrouping")
    check_topology(parse_topology(d), search_paths=SEARCH)
    inp["customClass"] = f"{FX}:SplitBolt"
    err = check_error(d)
    assert_problem(
        err,
        "spec.bolts[0].inputs[0].customClass",
        f"{FX}:SplitBolt",
        "not a custom grouping",
        "choose_tasks()",
    )
    inp["customClass"] = "no_such_module_xyz:Grouping"
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[0].inputs[0].customClass", "no_such_module_xyz:Grouping",
        "cannot import module 'no_such_module_xyz'", "No module named 'no_such_module_xyz'",
    )


MULTI = f"""\
apiVersion: squall.io/v1alpha1
kind: Topology
metadata: {{name: multi}}
spec:
  spouts:
    - {{name: sentences, class: "{FX}:SentenceSpout"}}
  bolts:
    - name: split
      class: {FX}:MultiStreamBolt
      inputs: [{{component: sentences}}]
    - name: direct-sink
      class: {FX}:SinkBolt
      inputs:
        - {{component: split, stream: targeted, grouping: direct}}
        - {{component: split, stream: lengths, grouping: fields, fields: [length]}}
"""


def test_direct_grouping_needs_a_direct_stream() -> None:
    resolved = check_topology(parse_topology(MULTI), search_paths=SEARCH)
    assert resolved.streams["split"]["targeted"].direct is True
    assert set(resolved.streams["split"]) == {"default", "lengths", "targeted"}
    d = yaml.safe_load(MULTI)
    d["spec"]["bolts"][1]["inputs"][0]["stream"] = "default"
    err = check_error(d)
    assert_problem(
        err,
        "spec.bolts[1].inputs[0].grouping",
        "direct",
        "stream 'default' of 'split' is not declared direct",
    )


def test_a_direct_stream_needs_direct_grouping() -> None:
    d = yaml.safe_load(MULTI)
    d["spec"]["bolts"][1]["inputs"][0]["grouping"] = "shuffle"
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[1].inputs[0].grouping", "shuffle", "is direct", "direct grouping"
    )


def test_subscribing_twice_to_one_stream() -> None:
    d = wordcount()
    bolt(d, "count")["inputs"].append({"component": "split", "grouping": "shuffle"})
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[1].inputs[1].stream", "default", "already subscribes", "inputs[0]"
    )


def test_num_tasks_below_parallelism() -> None:
    d = wordcount()
    bolt(d, "count").update(parallelism=4, numTasks=2)
    err = check_error(d)
    assert_problem(err, "spec.bolts[1].numTasks", 2, "parallelism 4 > numTasks 2")


def test_bolt_cycles_are_legal() -> None:
    d = wordcount()
    bolt(d, "split")["inputs"].append({"component": "count", "grouping": "global"})
    bolt(d, "count")["inputs"].append({"component": "count", "grouping": "all"})
    check_topology(parse_topology(d), search_paths=SEARCH)


@pytest.mark.parametrize(
    ("class_path", "words"),
    [
        ("no_such_module_xyz:Spout", ["cannot import module 'no_such_module_xyz'",
                                       "No module named 'no_such_module_xyz'"]),
        (f"{FX}:MissingSpout", [f"module '{FX}' has no attribute 'MissingSpout'"]),
        (f"{FX}:not_a_class", ["is not a class", "int"]),
        (f"{FX}:NotAComponent", ["not a spout", "no next_tuple() method"]),
        (f"{FX}:SplitBolt", ["not a spout", "it looks like a bolt"]),
    ],
)
def test_spout_class_problems(class_path: str, words: list[str]) -> None:
    d = wordcount()
    d["spec"]["spouts"][0]["class"] = class_path
    err = check_error(d)
    assert_problem(err, "spec.spouts[0].class", class_path, *words)


def test_bolt_class_must_have_execute() -> None:
    d = wordcount()
    bolt(d, "split")["class"] = f"{FX}:SentenceSpout"
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[0].class", f"{FX}:SentenceSpout", "not a bolt", "no execute() method",
        "looks like a spout",
    )


def test_an_import_that_fails_shows_the_error(tmp_path: Path) -> None:
    (tmp_path / "broken_components_mod.py").write_text("raise RuntimeError('boom at import')\n")
    d = wordcount()
    bolt(d, "split")["class"] = "broken_components_mod:SplitBolt"
    err = check_error(d, search_paths=(tmp_path,))
    assert_problem(
        err, "spec.bolts[0].class", "broken_components_mod:SplitBolt",
        "importing module 'broken_components_mod' failed", "RuntimeError: boom at import",
    )


def test_an_unresolvable_source_does_not_cascade() -> None:
    d = wordcount()
    bolt(d, "split")["class"] = "no_such_module_xyz:SplitBolt"
    err = check_error(d)  # count's fields grouping on split's "word" cannot be checked
    assert [p.path for p in err.problems] == ["spec.bolts[0].class"]


def test_invalid_outputs_declaration_on_a_class() -> None:
    d = wordcount()
    bolt(d, "split")["class"] = f"{FX}:BadOutputsBolt"
    err = check_error(d)
    assert_problem(
        err, "spec.bolts[0].class", f"{FX}:BadOutputsBolt", "invalid outputs declaration",
        "not the string 'word'",
    )


def test_search_paths_are_added_for_the_check_only(tmp_path: Path) -> None:
    (tmp_path / "own_components_mod.py").write_text(
        "class Spout:\n    outputs = ['n']\n    def next_tuple(self):\n        pass\n"
    )
    d = {
        "metadata": {"name": "own"},
        "spec": {"spouts": [{"name": "numbers", "class": "own_components_mod:Spout"}]},
    }
    before = list(sys.path)
    err = check_error(d, search_paths=())
    assert "cannot import module 'own_components_mod'" in find(err, "spec.spouts[0].class").message
    resolved = check_topology(parse_topology(d), search_paths=(tmp_path,))
    assert resolved.classes["numbers"].__module__ == "own_components_mod"
    assert sys.path == before
    sys.modules.pop("own_components_mod", None)


def test_every_graph_problem_is_reported_at_once() -> None:
    d = wordcount()
    d["spec"]["spouts"][0]["class"] = f"{FX}:NotAComponent"
    bolt(d, "split")["inputs"][0]["component"] = "sentence"
    bolt(d, "count").update(parallelism=8)
    bolt(d, "count")["inputs"][0]["fields"] = ["wrd"]
    err = check_error(d)
    assert [p.path for p in err.problems] == [
        "spec.spouts[0].class",
        "spec.bolts[1].numTasks",
        "spec.bolts[0].inputs[0].component",
        "spec.bolts[1].inputs[0].fields[0]",
    ]
    assert len(str(err).splitlines()) == 4


def test_check_without_resolving_classes() -> None:
    d = wordcount()
    for c in [*d["spec"]["spouts"], *d["spec"]["bolts"]]:
        c["class"] = "not_installed_here:Component"
    bolt(d, "split")["inputs"][0]["stream"] = "anything"  # unknowable: not reported
    resolved = check_topology(parse_topology(d), resolve_classes=False)
    assert resolved.classes == {}
    assert resolved.streams["split"] == {}
    # Streams the spec declares are checked all the same.
    bolt(d, "split")["outputs"] = [{"stream": "default", "fields": ["token"]}]
    err = check_error(d, resolve_classes=False)
    assert_problem(err, "spec.bolts[1].inputs[0].fields[0]", "word", "has no field 'word'",
                   "(fields: token)")


def test_spec_outputs_problems() -> None:
    d = wordcount()
    bolt(d, "split")["outputs"] = [
        {"stream": "default", "fields": ["word", "word"]},
        {"stream": "default", "fields": ["word"]},
        {"stream": "__tick", "fields": []},
    ]
    err = check_error(d)
    assert_problem(err, "spec.bolts[0].outputs[0].fields[1]", "word", "field declared twice")
    assert_problem(err, "spec.bolts[0].outputs[1].stream", "default", "stream declared twice")
    assert_problem(err, "spec.bolts[0].outputs[2].stream", "__tick", "reserved")


def test_validate_file_uses_the_files_directory(tmp_path: Path) -> None:
    (tmp_path / "vf_components_mod.py").write_text(
        "class Spout:\n    outputs = ['n']\n    def next_tuple(self):\n        pass\n"
    )
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: squall.io/v1alpha1
        kind: Topology
        metadata: {name: vf}
        spec:
          spouts: [{name: numbers, class: "vf_components_mod:Spout"}]
          bolts:
            - name: sink
              class: vf_components_mod:Missing
              inputs: [{component: numbers, grouping: fields, fields: [n]}]
        """))
    with pytest.raises(TopologyError) as info:
        validate_file(path)
    assert str(info.value) == (
        f"{path}: spec.bolts[0].class: 'vf_components_mod:Missing' — module "
        "'vf_components_mod' has no attribute 'Missing'"
    )
    sys.modules.pop("vf_components_mod", None)


# ---------------------------------------------------------------------------------- streams


def test_declared_streams_merges_class_and_spec() -> None:
    import fixtures_components as fx

    spec = BoltSpec(
        name="split",
        class_name=f"{FX}:MultiStreamBolt",
        outputs=[
            StreamSpec(stream="lengths", fields=["word", "len"]),
            StreamSpec(stream="extra", fields=["x"]),
        ],
    )
    streams = declared_streams(spec, fx.MultiStreamBolt)
    assert list(streams) == ["default", "lengths", "targeted", "extra"]
    assert streams["lengths"].fields == ["word", "len"]  # the spec's replaces the class's
    assert streams["targeted"] == StreamSpec(stream="targeted", fields=["word"], direct=True)
    assert declared_streams(spec, None) == {
        "lengths": StreamSpec(stream="lengths", fields=["word", "len"]),
        "extra": StreamSpec(stream="extra", fields=["x"]),
    }
    assert declared_streams(BoltSpec(name="s", class_name="a:B"), fx.SinkBolt) == {}


@pytest.mark.parametrize(
    ("declaration", "expected"),
    [
        (None, []),
        ([], []),
        ({}, []),
        (["a", "b"], [StreamSpec(fields=["a", "b"])]),
        (("a",), [StreamSpec(fields=["a"])]),
        ({"s": ["a"]}, [StreamSpec(stream="s", fields=["a"])]),
        ({"s": {"fields": ["a"], "direct": True}}, [StreamSpec(stream="s", fields=["a"], direct=True)]),
        ({"s": StreamSpec(stream="x", fields=["a"])}, [StreamSpec(stream="s", fields=["a"])]),
        ([StreamSpec(stream="s")], [StreamSpec(stream="s")]),
        ([{"stream": "s", "fields": ["a"]}], [StreamSpec(stream="s", fields=["a"])]),
    ],
)
def test_normalize_outputs_forms(declaration: Any, expected: list[StreamSpec]) -> None:
    assert normalize_outputs(declaration) == expected


@pytest.mark.parametrize(
    ("declaration", "words"),
    [
        ("word", ["not the string"]),
        (["a", 1], ["list of field names"]),
        ({"s": "a"}, ["expected a list of field names"]),
        ({"bad stream": ["a"]}, ["must be a stream name"]),
        (42, ["not int"]),
    ],
)
def test_normalize_outputs_rejects(declaration: Any, words: list[str]) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        normalize_outputs(declaration)
    for word in words:
        assert word in str(info.value)


def test_resolve_class_public_helper() -> None:
    import fixtures_components as fx

    assert resolve_class(f"{FX}:SplitBolt", "bolt", search_paths=SEARCH) is fx.SplitBolt
    with pytest.raises(ImportError, match="not a spout"):
        resolve_class(f"{FX}:SplitBolt", "spout", search_paths=SEARCH)
