"""One set of limits for `squall validate`, `squall run` and the operator (squall.limits): each file
`squall validate` accepted and `squall run` then died on is refused, with its field path and the
limit, before anything is planned or allocated, in bounded time and memory; problem messages stay
linear in the fields named; names print escaped."""

from __future__ import annotations

import copy
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from childproc import die_with_this_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import limits, validation
from squall.errors import Problem, TopologyError, printable
from squall.models.cluster import StormBase
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall.validation import check_topology, load_topology, parse_topology

pytestmark = pytest.mark.unit

FX = "fixtures_components"
HEAD = "apiVersion: squall.io/v1alpha1\nkind: Topology\nmetadata: {name: t}\nspec:\n"


def doc(**spec: Any) -> dict[str, Any]:
    """A valid topology (a spout and three bolts), with `spec` laid over its spec."""
    base: dict[str, Any] = {
        "spouts": [{"name": "s", "class": f"{FX}:SentenceSpout"}],
        "bolts": [{"name": n, "class": f"{FX}:SplitBolt", "inputs": [{"component": "s"}]}
                  for n in ("a", "b", "c")],
    }
    base.update(spec)
    return {"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
            "spec": base}


def refused(data: str | bytes | dict[str, Any], *, seconds: float = 30.0,
            megabytes: float = 64.0) -> TopologyError:
    """The TopologyError `parse_topology` raises for `data`, within `seconds` and `megabytes`
    of Python allocations."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TopologyError) as info:
            parse_topology(data, source="t.yaml")
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert took < seconds, f"took {took:.1f}s: {info.value}"
    assert peak < megabytes * 2**20, f"peaked at {peak / 2**20:.0f} MiB: {info.value}"
    assert all(len(line) < 500 for line in info.value.lines()), info.value.lines()[0][:500]
    return info.value


def only(err: TopologyError) -> Problem:
    assert len(err.problems) == 1, err.lines()
    return err.problems[0]


def _bolt(i: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        d["spec"]["bolts"][i].update(fields)
    return edit


# ----------------------------------------------------------------- the reported reproductions

BIG_STRING = "x" * 500_000


def aliased_config_text(copies: int = 100) -> str:
    """A 500 KB string, anchored once and aliased `copies` times: a 0.5 MB file that stands for
    `copies` x 500 KB of config (the reported 50 MB value, which ZooKeeper refused)."""
    items = ", ".join(["*big"] * copies)
    return (HEAD + f"  config:\n    big: &big '{BIG_STRING}'\n    copies: [{items}]\n"
            f"  spouts: [{{name: s, class: '{FX}:SentenceSpout'}}]\n")


@pytest.mark.parametrize(("text", "path", "message"), [
    pytest.param(yaml.safe_dump(doc(bolts=[{"name": "a", "class": "m:B", "inputs": [{"component": "s"}]},
                                           {"name": "b", "class": "m:B", "inputs": [{"component": "s"}]},
                                           {"name": "c", "class": "m:B", "numTasks": 10**9,
                                            "inputs": [{"component": "s"}]}])),
                 "spec.bolts[2].numTasks", "is over the limit of 10000 tasks per component", id="numTasks"),
    pytest.param(yaml.safe_dump(doc(numAckers=10**9)), "spec.numAckers",
                 "is over the limit of 1000 ackers", id="numAckers"),
    pytest.param(yaml.safe_dump(doc(spouts=[{"name": "s", "class": "m:S", "parallelism": 10**6}])),
                 "spec.spouts[0].parallelism", "is over the limit of 1000 executors per component",
                 id="parallelism"),
    pytest.param(HEAD + "  messageTimeoutSecs: .inf\n  spouts: [{name: s, class: 'm:S'}]\n",
                 "spec.messageTimeoutSecs", "must be a finite number: the topology is stored as JSON",
                 id="messageTimeoutSecs-inf"),
    pytest.param(HEAD + "  tickTupleFreqSecs: .nan\n  spouts: [{name: s, class: 'm:S'}]\n",
                 "spec.tickTupleFreqSecs", "must be a finite number", id="tickTupleFreqSecs-nan"),
    pytest.param(HEAD + "  killWaitSecs: 1.0e+400\n  spouts: [{name: s, class: 'm:S'}]\n",
                 "spec.killWaitSecs", "must be a finite number", id="killWaitSecs-1e400"),
    pytest.param(HEAD + "  rebalanceWaitSecs: 1.0e+12\n  spouts: [{name: s, class: 'm:S'}]\n",
                 "spec.rebalanceWaitSecs", "is over the limit of 86400 seconds", id="rebalanceWaitSecs"),
    pytest.param(HEAD + "  spouts: [{name: s, class: 'm:S'}]\n  bolts:\n  - {name: b, class: 'm:B', "
                 "inputs: [{component: s}], config: {topology.tick.tuple.freq.secs: 1s}}\n",
                 "spec.bolts[0].config['topology.tick.tuple.freq.secs']",
                 "must be a positive number of seconds", id="tick-1s"),
    pytest.param(HEAD + "  spouts: [{name: s, class: 'm:S'}]\n  bolts:\n" + "".join(
                 f"  - {{name: b{i}, class: 'm:B', inputs: [{{component: s}}]}}\n" for i in range(4999)),
                 "spec.bolts", "4999 given, over the limit of 500 components", id="5000-components"),
])
def test_what_run_died_on_is_refused_with_the_path_and_the_limit(text: str, path: str,
                                                                  message: str) -> None:
    """Before: each passed `squall validate`; `squall run` then died (MemoryError, a kazoo
    ConnectionLoss after 16 s, a pydantic traceback, workers restarted in a loop, a 1.9 GB
    worker)."""
    problem = only(refused(text))
    assert problem.path == path, problem
    assert message in problem.message, problem


def test_an_aliased_50_mb_config_is_refused_without_building_it() -> None:
    """Before: accepted; `squall run` then wrote 50 MB to one ZooKeeper node (ConnectionLoss).
    The file is half a MB: the size is counted through the aliases, each string measured once."""
    text = aliased_config_text()
    assert len(text) < limits.MAX_DOCUMENT_BYTES
    problem = only(refused(text, megabytes=16))
    assert problem.path.startswith("spec.config.copies["), problem
    assert f"passes {limits.MAX_TOPOLOGY_BYTES} bytes" in problem.message
    assert "ZooKeeper" in problem.message


def test_the_same_limits_on_a_mapping_from_the_api_server() -> None:
    """The operator hands parse_topology the resource as read from the API server."""
    d = doc(config={"big": BIG_STRING, "copies": [BIG_STRING] * 100})
    assert "passes" in only(refused(d, megabytes=16)).message
    d = doc(messageTimeoutSecs=math.inf)
    assert only(refused(d)).path == "spec.messageTimeoutSecs"


@pytest.mark.parametrize(("spec", "path", "message"), [
    pytest.param({"bolts": [{"name": f"b{i}", "class": "m:B", "parallelism": 3,
                             "inputs": [{"component": "s"}]} for i in range(400)]},
                 "spec.bolts[332].parallelism", "brings the topology to 1001 executors", id="executors"),
    pytest.param({"numAckers": 0, "bolts": [{"name": f"b{i}", "class": "m:B", "numTasks": 9000,
                                             "inputs": [{"component": "s"}]} for i in range(3)]},
                 "spec.bolts[2].numTasks", "brings the topology to 27001 tasks", id="tasks"),
    pytest.param({"bolts": [{"name": "b", "class": "m:B", "parallelism": 900,
                             "inputs": [{"component": "s"}]}], "numAckers": 101},
                 "spec.bolts[0].parallelism", "over the limit of 1000 per topology", id="ackers-count"),
])
def test_totals_over_the_topology(spec: dict[str, Any], path: str, message: str) -> None:
    problem = only(refused(doc(**spec)))
    assert (problem.path, message in problem.message) == (path, True), problem


def test_limits_at_their_edge_are_accepted() -> None:
    spouts = [{"name": "s", "class": "m:S", "parallelism": 1, "numTasks": limits.MAX_TASKS_PER_COMPONENT}]
    bolts = [{"name": f"b{i}", "class": "m:B", "inputs": [{"component": "s"}]}
             for i in range(limits.MAX_COMPONENTS - 1)]
    topo = parse_topology(doc(spouts=spouts, bolts=bolts, numAckers=1, messageTimeoutSecs=86400,
                              maxSpoutPending=limits.MAX_SPOUT_PENDING, numWorkers=limits.MAX_WORKERS))
    check_topology(topo, resolve_classes=False)
    assert len(build_plan(topo, {}).executors) == limits.MAX_COMPONENTS + 1


@pytest.mark.parametrize(("key", "bad", "good"), [
    ("topology.tick.tuple.freq.secs", "1s", 1),
    ("topology.tick.tuple.freq.secs", 0, None),
    ("worker.heartbeat.frequency.secs", None, 0.5),
    ("task.refresh.poll.secs", True, 10),
    ("worker.switch.interval.secs", -1, 0.001),
    ("worker.switch.interval.secs", 1e9, 0.001),
    ("topology.message.timeout.secs", "30", 30),
    ("topology.disable.loadaware.messaging", "false", False),
    ("topology.localityaware.cpu", 0, True),
    ("topology.localityaware.trace", "yes", False),
    ("topology.localityaware.higher.bound", "0.8", 0.8),
    ("topology.localityaware.lower.bound", -0.1, 0),
    ("topology.max.spout.pending", 2.5, None),
    ("topology.max.spout.pending", 10**12, 1000),
    ("topology.workers", 0, 2),
    ("topology.name", 5, "t"),
])
def test_config_keys_squall_reads_have_their_type(key: str, bad: object, good: object) -> None:
    """Storm's ConfigValidation: a value the runtime cannot use is refused where it is written,
    in spec.config and in a component's config alike. Before: accepted, and the worker died."""
    for where in ("spec", "bolt"):
        for value, ok in ((bad, False), (good, True)):
            d = doc(config={key: value}) if where == "spec" else doc()
            if where == "bolt":
                d["spec"]["bolts"][1]["config"] = {key: value}
            if ok:
                check_topology(parse_topology(d), resolve_classes=False)
                continue
            problem = only(refused(d))
            base = "spec" if where == "spec" else "spec.bolts[1]"
            assert problem.path == f"{base}.config[{key!r}]", problem


@pytest.mark.parametrize(("value", "message"), [
    ("2020-01-31", "not a JSON value: a date"),
    ("2020-01-31 10:00:00", "not a JSON value: a timestamp"),
    ("!!binary aGVsbG8=", "not a JSON value: binary data"),
    ("!!set {a, b}", "not a JSON value: a set"),
    ("{1: one}", "keys must be strings"),
    ("[1, .nan]", "must be a finite number"),
])
def test_config_values_json_cannot_hold_are_refused(value: str, message: str) -> None:
    """The topology is stored as JSON: a YAML date, a set, bytes, a number key or a NaN would
    come back changed (or not at all: non-UTF-8 bytes stopped the store)."""
    problem = only(refused(HEAD + f"  config: {{k: {value}}}\n  spouts: [{{name: s, class: 'm:S'}}]\n"))
    assert problem.path.startswith("spec.config.k"), problem
    assert message in problem.message, problem


def test_check_topology_applies_the_limits_to_a_topology_built_in_python() -> None:
    """The worker and `squall build` hand check_topology a Topology: the same limits, first."""
    topo = Topology.model_validate(doc(bolts=[{"name": f"b{i}", "class": "m:B", "parallelism": 200,
                                                "inputs": [{"component": "s"}]} for i in range(6)]))
    with pytest.raises(TopologyError) as info:
        check_topology(topo, resolve_classes=False)
    assert "over the limit of 1000 per topology" in only(info.value).message


# -------------------------------------------------------------- messages linear in the fields

def fields_topology(declared: int, named: int) -> str:
    """A spout declaring `declared` fields, a bolt grouping by `named` other fields."""
    fields = ", ".join(f"f{i}" for i in range(declared))
    wanted = ", ".join(f"g{i}" for i in range(named))
    return (HEAD + f"  spouts: [{{name: s, class: 'm:S', outputs: [{{fields: [{fields}]}}]}}]\n"
            f"  bolts: [{{name: b, class: 'm:B', inputs: [{{component: s, grouping: fields, "
            f"fields: [{wanted}]}}]}}]\n")


def test_a_49000_field_stream_is_refused_at_once() -> None:
    """Before: MemoryError (exit 2) after every problem joined all 49,000 declared fields. Now
    the file is past the size a topology may take (its JSON form); a smaller one past the
    limit of fields per stream."""
    assert "bytes here" in only(refused(fields_topology(49_000, 49_000), seconds=30)).message
    err = refused(fields_topology(30_000, 30_000), seconds=30)
    assert [p.path for p in err.problems] == ["spec.spouts[0].outputs[0].fields",
                                              "spec.bolts[0].inputs[0].fields"]
    assert all(p.message == "30000 given, over the limit of 1000 fields per stream"
               for p in err.problems)


def test_undeclared_fields_list_a_bounded_few() -> None:
    """Within the limits, 1,000 undeclared fields of a 1,000-field stream: each message names 10
    declared fields and counts the rest. Before: each joined all 1,000 (6 KB a message)."""
    topo = parse_topology(fields_topology(1000, 1000))
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TopologyError) as info:
            check_topology(topo, resolve_classes=False)
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert took < 5 and peak < 16 * 2**20, (took, peak)
    err = info.value
    assert len(err.problems) == 1000
    assert str(err.problems[0]) == (
        "spec.bolts[0].inputs[0].fields[0]: 'g0' — stream 'default' of 's' has no field 'g0' "
        "(fields: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, ... (990 more))")
    assert max(len(line) for line in err.lines()) < 200


def test_a_close_field_is_suggested() -> None:
    text = fields_topology(3, 0).replace("fields: []", "fields: [f11]")
    with pytest.raises(TopologyError) as info:
        check_topology(parse_topology(text), resolve_classes=False)
    assert only(info.value).message.endswith("(fields: f0, f1, f2); did you mean 'f1'?")


def test_unknown_component_lists_a_bounded_few() -> None:
    bolts = [{"name": f"b{i}", "class": "m:B", "inputs": [{"component": "nope"}]} for i in range(400)]
    with pytest.raises(TopologyError) as info:
        check_topology(parse_topology(doc(bolts=bolts)), resolve_classes=False)
    assert len(info.value.problems) == 400
    assert info.value.problems[0].message.endswith(", ... (391 more))")


# ------------------------------------------------------------------ names printed escaped

ESCAPES = "\x1b[2J\x1b]0;TITLE\x07"


def test_a_field_name_made_of_escapes_prints_escaped() -> None:
    """Before: the raw bytes reached the terminal: the screen cleared, the window retitled."""
    d = doc()
    d["spec"]["spouts"][0]["outputs"] = [{"fields": ["word"]}]
    d["spec"]["bolts"][0]["inputs"] = [{"component": "s", "grouping": "fields", "fields": [ESCAPES]}]
    with pytest.raises(TopologyError) as info:
        check_topology(parse_topology(yaml.safe_dump(d)), resolve_classes=False)
    text = str(info.value)
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert "has no field '\\x1b[2J\\x1b]0;TITLE\\x07'" in text


@pytest.mark.parametrize("where", ["component", "source", "config-key", "message"])
def test_every_part_of_a_problem_prints_escaped(where: str) -> None:
    d = doc()
    source = "t.yaml"
    if where == "component":
        d["spec"]["bolts"][0]["inputs"] = [{"component": ESCAPES}]
    elif where == "source":
        d["spec"]["bolts"][0]["inputs"] = [{"component": "nope"}]
        source = f"{ESCAPES}.yaml"
    elif where == "config-key":
        d["spec"]["config"] = {f"{ESCAPES}": math.nan}
    if where == "message":  # a message from elsewhere (an import error's text)
        err = TopologyError([Problem("spec.spouts[0].class", "m:S", f"boom {ESCAPES}")], source)
    else:
        with pytest.raises(TopologyError) as info:
            check_topology(parse_topology(d, source=source), resolve_classes=False, source=source)
        err = info.value
    for line in err.lines():
        assert line.isprintable(), repr(line)
        assert "\\x1b" in line, line


def test_a_long_key_is_cut_in_the_path() -> None:
    """A 100,000-character config key (or one aliased in many places) costs a path of 80."""
    problem = only(refused(doc(config={"k" * 100_000: math.nan})))
    assert str(problem).startswith("spec.config['" + "k" * 80 + "'...]: nan — must be a finite")


def test_printable_is_bounded_and_leaves_printable_text_alone() -> None:
    assert printable("wordcount — é") == "wordcount — é"
    assert printable("\u202eevil") == "\\u202eevil"
    assert printable("x" * 10**7, 20) == "x" * 17 + "..."
    assert printable("\x1b" * 10**6, 20) == "\\x1b" * 4 + "\\..."
    assert printable("a\nb", None) == "a\\nb"


# -------------------------------------------------------------- validate and run agree

def what_run_does(topo: Topology) -> None:
    """What `squall run` and the workers do with a topology `squall validate` accepted, short of
    processes: nimbus stores it (one ZooKeeper node, JSON), the workers read it back with the
    model, check it, plan it, and read the config keys Squall reads as the runtime does
    (squall.worker.runtime). Any exception here is a file validate passed and run dies on."""
    from squall_operator.nimbus import initial_storm_base

    stored = initial_storm_base(topo, 0.0).model_dump_json().encode()
    assert len(stored) < 0xFFFFF, len(stored)  # ZooKeeper's jute.maxbuffer
    read = Topology.model_validate(StormBase.model_validate_json(stored).topology)
    assert read == topo
    check_topology(read, resolve_classes=False)
    plan = build_plan(read, {})
    assert len(plan.executors) <= limits.MAX_EXECUTORS + 1
    spec = read.spec
    conf = {"topology.tick.tuple.freq.secs": spec.tick_tuple_freq_secs, **spec.config}
    for key in ("worker.switch.interval.secs", "worker.heartbeat.frequency.secs", "task.refresh.poll.secs"):
        value = float(conf.get(key, 1.0))
        assert 0 < value <= limits.MAX_SECONDS
    for component in spec.components:
        merged = {**conf, **component.config}
        tick = component.config.get("topology.tick.tuple.freq.secs", spec.tick_tuple_freq_secs)
        assert tick is None or 0 < float(tick) <= limits.MAX_SECONDS
        for key in ("topology.localityaware.higher.bound", "topology.localityaware.lower.bound"):
            assert math.isfinite(float(merged.get(key, 0.5)))
        for key in ("topology.localityaware.cpu", "topology.localityaware.trace",
                    "topology.disable.loadaware.messaging"):
            assert isinstance(merged.get(key, False), bool)
    json.dumps(read.model_dump(mode="json", by_alias=True), allow_nan=False)


_INTS = st.sampled_from([-(2**63), -1, 0, 1, 2, 7, 999, 1000, 1001, 10_000, 10_001, 20_001,
                         10**6, 10**9, 2**63, 10**30])
_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e-300, 0.5, 30.0, 86_400.0,
                           86_400.5, 1e300])
_WRONG = st.sampled_from(["1s", "", "x" * 100_000, ESCAPES, True, False, None, [], {}, [1], {"a": 1}])
_EXTREME = _INTS | _FLOATS | _WRONG

# the spec's fields and what hypothesis may set them to
_SPEC_FIELDS = ["numWorkers", "numAckers", "messageTimeoutSecs", "maxSpoutPending",
                "tickTupleFreqSecs", "killWaitSecs", "rebalanceWaitSecs", "active"]
_COMPONENT_FIELDS = ["parallelism", "numTasks", "name", "class", "stateful"]


@st.composite
def topology_documents(draw: st.DrawFn) -> dict[str, Any]:
    n_bolts = draw(st.sampled_from([0, 1, 3, 50, 499, 500, 700]))
    n_fields = draw(st.sampled_from([1, 3, 1000, 1001, 3000]))
    fields = [f"f{i}" for i in range(n_fields)]
    spout: dict[str, Any] = {"name": "s", "class": "m:S", "outputs": [{"fields": fields}]}
    bolts: list[dict[str, Any]] = []
    for i in range(n_bolts):
        grouping = draw(st.sampled_from(["shuffle", "fields"])) if i < 3 else "shuffle"
        inp: dict[str, Any] = {"component": "s", "grouping": grouping}
        if grouping == "fields":
            inp["fields"] = draw(st.sampled_from([["f0"], ["nope"], fields, [f"g{j}" for j in range(n_fields)]]))
        bolts.append({"name": f"b{i}", "class": "m:B", "inputs": [inp]})
    d = doc(spouts=[spout], bolts=bolts)
    spec = d["spec"]
    for field in draw(st.lists(st.sampled_from(_SPEC_FIELDS), max_size=4, unique=True)):
        spec[field] = draw(_EXTREME)
    components = [spout, *bolts]
    for _ in range(draw(st.integers(0, 3))):
        component = components[draw(st.integers(0, len(components) - 1))]
        component[draw(st.sampled_from(_COMPONENT_FIELDS))] = draw(_EXTREME)
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from([*limits.CONFIG_KEYS, "my.own.key", ESCAPES]))
        target = spec if draw(st.booleans()) else components[draw(st.integers(0, len(components) - 1))]
        target.setdefault("config", {})[key] = draw(_EXTREME)
    if draw(st.booleans()):
        spec.setdefault("config", {})["big"] = ["y" * 100_000] * draw(st.sampled_from([1, 7, 8, 100]))
    return d


class _AliasingDumper(yaml.SafeDumper):
    """Writes a string met twice as an alias of the first (PyYAML writes strings out in full):
    the file is as small as its author could make it, and aliases are exercised."""

    def ignore_aliases(self, data: Any) -> bool:
        return data is None or isinstance(data, (bool, int, float))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])
@given(topology_documents(), st.booleans())
def test_validate_and_run_agree(tmp_path_factory: pytest.TempPathFactory, d: dict[str, Any],
                                as_file: bool) -> None:
    """Topologies built from the schema with extreme values (huge, negative and zero integers,
    infinities and NaN, wrong types, long strings, hundreds of components, thousands of fields,
    config keys Squall reads with any value, megabytes of aliased config): whatever `squall
    validate` accepts, `squall run` can store, read back, check and plan, and its workers can
    read their config; whatever it refuses is refused by run's loader (the same `load_topology`
    on the file) with the same problems. Each within bounded time and memory."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        if as_file:
            path = tmp_path_factory.mktemp("agree") / "t.yaml"
            path.write_text(yaml.dump(d, Dumper=_AliasingDumper, width=1 << 20))
            load: Callable[[], Topology] = lambda: load_topology(path)  # noqa: E731
        else:
            load = lambda: parse_topology(d)  # noqa: E731 - the operator's path
        try:
            topo = load()
            check_topology(topo, resolve_classes=False)
        except TopologyError as exc:
            verdict = exc.lines()
            assert verdict and all(len(line) < 500 and line.isprintable() for line in verdict)
            try:
                load()
                check_topology(load(), resolve_classes=False)
            except TopologyError as again:
                assert again.lines() == verdict
            else:
                pytest.fail("run's loader accepted what validate refused")
        else:
            what_run_does(topo)
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert took < 30, took
    assert peak < 256 * 2**20, peak


# --------------------------------------------------------------------- the operator's admission

def test_the_operator_refuses_the_same_specs() -> None:
    """The operator's admission of a Topology resource (KubeNimbus.validate, on `kubectl
    apply`): each reproduction fails the resource with the same problem line, nothing is stored
    in ZooKeeper, and the other topologies keep running."""
    from test_operator_kube_nimbus import SPEC, _make, _status

    cases = {
        "tasks": ({"numTasks": 10**9}, "spec.bolts[0].numTasks: 1000000000 — is over the limit of 10000 tasks per component"),
        "ackers": ({"numAckers": 10**9}, "spec.numAckers: 1000000000 — is over the limit of 1000 ackers"),
        "executors": ({"parallelism": 10**6}, "spec.bolts[0].parallelism: 1000000 — is over the limit of 1000"),
        "timeout": ({"messageTimeoutSecs": math.inf}, "spec.messageTimeoutSecs: inf — must be a finite number"),
        "tick": ({"config": {"topology.tick.tuple.freq.secs": "1s"}},
                 "spec.bolts[0].config['topology.tick.tuple.freq.secs']: '1s' — must be a positive number"),
        "size": ({"big": [BIG_STRING] * 100}, "spec.config.big["),
        "components": ({"components": 5000}, "spec.bolts — 5000 given, over the limit of 500 components"),
    }
    nimbus, state, api, _clock = _make()
    nimbus.register("ns", "wc", "uid-0", 1, SPEC)
    for i, (name, (change, line)) in enumerate(cases.items(), 1):
        spec = copy.deepcopy(SPEC)
        bolt = spec["bolts"][0]  # type: ignore[index]
        if "numTasks" in change or "parallelism" in change or "config" in change:
            bolt.update(change)
            if "parallelism" in change:
                bolt.pop("numTasks")
        elif "big" in change:
            spec["config"] = change
        elif "components" in change:
            spec["bolts"] = [{**bolt, "name": f"b{j}"} for j in range(5000)]
        else:
            spec.update(change)
        nimbus.register("ns", name, f"uid-{i}", 1, spec)
    nimbus.round()
    for name, (_change, line) in cases.items():
        st_ = _status(api, name)
        assert st_["phase"] == "Failed" and line in st_["message"], (name, st_["message"][:300])
        assert "InvalidSpec" in api.reasons(name) and name not in state.storms
    assert "ns~wc" in state.storms


# --------------------------------------------------- the commands, end to end (subprocesses)

def squall(*args: str, cwd: Path, limit_mb: int = 1024, timeout: float = 60
           ) -> subprocess.CompletedProcess[str]:
    """`squall ARGS` in its own process group, its address space capped at `limit_mb`."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    proc = subprocess.Popen([sys.executable, "-m", "squall_operator", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=die_with_this_process(then=cap), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it started, if it started anything
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


CLI_CASES = {
    "tasks.yaml": (HEAD + f"  spouts: [{{name: s, class: '{FX}:SentenceSpout', numTasks: 1000000000}}]\n",
                   "t.yaml: spec.spouts[0].numTasks: 1000000000 — is over the limit of 10000 tasks per component"),
    "ackers.yaml": (HEAD + f"  numAckers: 1000000000\n  spouts: [{{name: s, class: '{FX}:SentenceSpout'}}]\n",
                    "t.yaml: spec.numAckers: 1000000000 — is over the limit of 1000 ackers (executors)"),
    "timeout.yaml": (HEAD + f"  messageTimeoutSecs: .inf\n  spouts: [{{name: s, class: '{FX}:SentenceSpout'}}]\n",
                     "t.yaml: spec.messageTimeoutSecs: inf — must be a finite number"),
    "tick.yaml": (HEAD + f"  spouts: [{{name: s, class: '{FX}:SentenceSpout'}}]\n  bolts:\n"
                  f"  - {{name: b, class: '{FX}:SplitBolt', inputs: [{{component: s}}], "
                  "config: {topology.tick.tuple.freq.secs: 1s}}\n",
                  "t.yaml: spec.bolts[0].config['topology.tick.tuple.freq.secs']: '1s' — must be a positive"),
    "alias.yaml": (aliased_config_text(), "t.yaml: spec.config.copies["),
    "fields.yaml": (fields_topology(30_000, 30_000), "t.yaml: spec.spouts[0].outputs[0].fields — 30000 given"),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_validate_and_run_refuse_alike_before_anything_starts(tmp_path: Path, name: str) -> None:
    """The real commands, under 1 GB of address space: `squall validate` and `squall run` refuse
    each file with the same problem line and exit 2, without a traceback, within seconds; run
    starts nothing (no ZooKeeper, no worker: it never gets that far)."""
    text, line = CLI_CASES[name]
    (tmp_path / "t.yaml").write_text(text)
    (tmp_path / f"{FX}.py").write_text((Path(__file__).parent / f"{FX}.py").read_text())
    results = {}
    for command in ("validate", "run"):
        t0 = time.monotonic()
        args = (command, "t.yaml") if command == "validate" else (command, "t.yaml", "--duration", "1")
        result = squall(*args, cwd=tmp_path)
        took = time.monotonic() - t0
        assert result.returncode == 2, (command, result.stdout, result.stderr[-2000:])
        assert "Traceback" not in result.stderr and took < 30, (command, took, result.stderr[-2000:])
        problem_lines = [ln for ln in result.stderr.splitlines() if ln.startswith("t.yaml: ")]
        assert problem_lines and problem_lines[0].startswith(line), (command, result.stderr[-2000:])
        # nothing but the problems: no ZooKeeper's or worker's line, no table
        assert all(ln.startswith(("t.yaml: ", "invalid topology: ", "... and "))
                   for ln in result.stderr.splitlines()), (command, result.stderr[-2000:])
        assert result.stdout == "", (command, result.stdout)
        results[command] = problem_lines
    assert results["validate"] == results["run"]


# --- a rebalance keeps the limits a submitted topology keeps ---------------------------------


def test_a_rebalance_past_the_executor_limit_is_refused_with_the_total() -> None:
    topology = Topology.model_validate(doc())
    # ackers follow the worker count: 900 workers are 900 ackers beside the components
    over = validation.rebalance_problem(topology, 900, {"a": 200})
    assert over is not None and "over the limit of 1000" in over and "executors" in over
    assert validation.rebalance_problem(topology, 4, {"a": 2}) is None


def test_a_rebalance_past_the_worker_limit_is_refused() -> None:
    topology = Topology.model_validate(doc())
    over = validation.rebalance_problem(topology, limits.MAX_WORKERS + 1, None)
    assert over is not None and str(limits.MAX_WORKERS) in over
    assert validation.rebalance_problem(topology, 0, None) is not None


def test_fixed_ackers_do_not_follow_a_rebalance_of_workers() -> None:
    fixed = Topology.model_validate(doc(numAckers=1))
    assert validation.rebalance_problem(fixed, limits.MAX_WORKERS, None) is None
    following = Topology.model_validate(doc())
    assert validation.rebalance_problem(following, limits.MAX_WORKERS, None) is not None
