"""Hostile input: every way of reading a topology refuses bad input in bounded time and memory,
with a message naming the place and no traceback (docs/reliability.md, "Hostile input")."""

from __future__ import annotations

import copy
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall.classcheck import check_topology_isolated
from squall.errors import TopologyError, format_value
from squall.validation import check_topology, load_topology, parse_topology

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FX = "fixtures_components"

# A topology that sets every field of the resource, so that each can be given a wrong type.
FULL: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "full", "namespace": "default", "labels": {"a": "b"},
                 "annotations": {"c": "d"}},
    "spec": {
        "numWorkers": 2,
        "numAckers": 1,
        "messageTimeoutSecs": 30,
        "maxSpoutPending": 100,
        "tickTupleFreqSecs": 1.5,
        "killWaitSecs": 3,
        "rebalanceWaitSecs": 3,
        "active": True,
        "config": {"k": "v"},
        "spouts": [{"name": "s", "class": f"{FX}:SentenceSpout", "parallelism": 1, "numTasks": 2,
                    "config": {}, "outputs": [{"stream": "default", "fields": ["x"],
                                               "direct": False}]}],
        "bolts": [{"name": "b", "class": f"{FX}:SplitBolt", "parallelism": 1, "numTasks": 1,
                   "config": {}, "outputs": [{"stream": "default", "fields": ["y"],
                                              "direct": False}],
                   "inputs": [{"component": "s", "stream": "default", "grouping": "custom",
                               "fields": ["x"], "customClass": f"{FX}:SplitBolt"}]}],
    },
}


def _scalar_fields(schema: dict[str, Any], path: tuple[str | int, ...] = ()
                   ) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, type) of every scalar field the CRD's schema declares; arrays at index 0."""
    kind = schema.get("type")
    if kind in ("integer", "number", "boolean", "string") and "enum" not in schema:
        yield path, kind
    for name, sub in (schema.get("properties") or {}).items():
        yield from _scalar_fields(sub, (*path, name))
    if kind == "array" and "items" in schema:
        yield from _scalar_fields(schema["items"], (*path, 0))


def _put(doc: dict[str, Any], path: tuple[str | int, ...], value: object) -> None:
    node: Any = doc
    for here, nxt in zip(path, path[1:]):
        if isinstance(node, list):
            node = node[here]  # type: ignore[index]
            continue
        if here not in node or node[here] is None:
            node[here] = [{}] if isinstance(nxt, int) else {}
        node = node[here]
    node[path[-1]] = value


# A value of the wrong type for each CRD type: the API server refuses each of these.
_WRONG = {"integer": ["2", 2.5, True], "number": ["2", True], "boolean": ["true", 1],
          "string": [1, True]}


def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "topology.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_full_document_is_valid() -> None:
    parse_topology(copy.deepcopy(FULL))


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for item in path:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else item)
    return out


@pytest.mark.parametrize(("path", "kind"), [
    pytest.param(p, k, id=_dotted(p)) for p, k in _scalar_fields(_crd_spec_schema())
    if p and p[0] == "spec"
])
def test_what_the_crd_refuses_validation_refuses(path: tuple[str | int, ...], kind: str) -> None:
    """One file, one meaning: a value of the wrong type for the CRD (a quoted number, a
    number for a boolean...) is refused by `squall validate` too, naming the field."""
    for wrong in _WRONG[kind]:
        doc = copy.deepcopy(FULL)
        _put(doc, path, wrong)
        with pytest.raises(TopologyError) as info:
            parse_topology(doc)
        paths = [p.path for p in info.value.problems]
        assert _dotted(path) in paths, (wrong, str(info.value))


def test_quoted_number_names_the_field() -> None:
    doc = copy.deepcopy(FULL)
    doc["spec"]["bolts"][0]["parallelism"] = "2"
    with pytest.raises(TopologyError) as info:
        parse_topology(doc)
    assert str(info.value) == "spec.bolts[0].parallelism: '2' — must be an integer"


# ------------------------------------------------------------------------- YAML: size, shape

HEAD = "apiVersion: squall.io/v1alpha1\nkind: Topology\nmetadata: {name: t}\nspec:\n"
SPOUTS = f"  spouts: [{{name: s, class: '{FX}:SentenceSpout'}}]\n"


def refused(data: str | bytes | dict[str, Any], *, seconds: float = 15.0,
            megabytes: float = 64.0) -> TopologyError:
    """The TopologyError parse_topology raises for `data`, checked to come within `seconds`
    and `megabytes` of Python allocations."""
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
    text = str(info.value)
    assert len(text) < 2000, text[:2000]
    return info.value


def laughs(levels: int, width: int = 10, where: str = "parallelism") -> str:
    """A billion-laughs document: each anchor repeats the previous one `width` times."""
    lines = [HEAD, "  config:\n", "    a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
    for i in range(1, levels + 1):
        lines.append(f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n")
    lines.append(f"  spouts: [{{name: s, class: '{FX}:SentenceSpout', {where}: *a{levels}}}]\n")
    return "".join(lines)


def test_alias_bomb_is_refused_at_the_alias() -> None:
    """Before: parse_topology grew past a GB (pydantic walked the expanded value and the error
    message formatted all of it)."""
    err = refused(laughs(9))
    (problem,) = err.problems
    assert problem.path.startswith("line 10, column ")  # the alias that crossed the limit: a4's
    assert "expands" in problem.message and "100000 nodes" in problem.message


def test_a_few_aliases_are_fine() -> None:
    topo = parse_topology(HEAD + "  config:\n    base: &b {x: 1}\n    again: *b\n" + SPOUTS)
    assert topo.spec.config == {"base": {"x": 1}, "again": {"x": 1}}


def test_recursive_alias_is_refused() -> None:
    err = refused(HEAD + "  config: &a {self: *a}\n" + SPOUTS)
    assert "recursive" in err.problems[0].message
    assert err.problems[0].path.startswith("line 5, column ")


@pytest.mark.parametrize("style", ["flow", "block", "aliases"])
def test_deep_nesting_is_refused_with_its_line(style: str) -> None:
    """Before: RecursionError (a traceback) a few hundred levels down."""
    n = 600
    if style == "flow":
        text = HEAD + "  config: {a: " + "[" * n + "]" * n + "}\n" + SPOUTS
        line = 5
    elif style == "block":
        text = HEAD + "  config:\n" + "".join(" " * (4 + 2 * i) + "- \n" for i in range(n)) + SPOUTS
        line = 6 + 98  # the 101st level: root, spec, config and 98 sequences
    else:
        text = HEAD + "  config:\n    a0: &a0 []\n" + "".join(
            f"    a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, n)) + SPOUTS
        line = 6 + 97  # *a96 inside a97: 4 levels open + the 97 it stands for
    err = refused(text)
    (problem,) = err.problems
    assert problem.path.startswith(f"line {line}, column "), problem
    assert "deeper than 100 levels" in problem.message


def test_deep_mapping_from_the_api_is_refused_with_its_path() -> None:
    """The operator hands parse_topology a mapping read from the API server."""
    doc = copy.deepcopy(FULL)
    deep: Any = []
    for _ in range(2000):
        deep = [deep]
    doc["spec"]["config"] = {"k": deep}
    err = refused(doc)
    (problem,) = err.problems
    assert problem.path.startswith("spec.config.k[0][0][0]")
    assert "nests deeper than 100 levels" in problem.message


def test_wide_mapping_from_the_api_is_refused() -> None:
    doc = copy.deepcopy(FULL)
    doc["spec"]["config"] = {"k": [[0] * 1000] * 1000}  # shared rows: a million values
    err = refused(doc)
    assert "more than 100000 values" in err.problems[0].message


def test_very_large_text_is_refused() -> None:
    text = HEAD + "  config: {pad: '" + "x" * (2 << 20) + "'}\n" + SPOUTS
    err = refused(text, megabytes=16)
    assert "larger than 1 MiB" in err.problems[0].message


def test_very_large_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.write(HEAD.encode())
        f.truncate(1 << 30)  # a sparse GiB
    t0 = time.monotonic()
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert time.monotonic() - t0 < 5
    assert str(info.value) == (
        f"{path}: the file is larger than 1 MiB (1048576 bytes), the most a topology may be"
    )


def test_non_utf8_bytes_name_the_line(tmp_path: Path) -> None:
    """Before: "'utf-8' codec can't decode byte 0xe9 in position 84" (a byte offset)."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes(HEAD.encode() + b"  config: {city: 'Z\xfcrich'}\n" + SPOUTS.encode())
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    (problem,) = info.value.problems
    assert problem.path == "line 5, column 20"
    assert problem.message == "not UTF-8 text: byte 0xfc (invalid start byte)"


def test_control_characters_name_the_line() -> None:
    """Before: PyYAML's "position 84" (a character offset) instead of a line."""
    err = refused(HEAD + "  config: {a: 'x\x00y'}\n" + SPOUTS)
    (problem,) = err.problems
    assert problem.path == "line 5, column 17"
    assert "#x0000" in problem.message


def test_yaml_error_names_the_line_where_the_construct_began() -> None:
    """Before: the line where the parser gave up (line 7), not where the sequence began."""
    text = HEAD + f"  spouts: [{{name: s,\n    class: '{FX}:SentenceSpout'}}\n  bolts: []\n"
    err = refused(text)
    (problem,) = err.problems
    assert problem.path == "line 5, column 11"
    assert problem.message == (
        "invalid YAML: did not find expected ',' or ']' at line 7, column 3 "
        "(while parsing a flow sequence that starts here)"
    )


@pytest.mark.parametrize(("value", "message"), [
    ("1" * 5000, "Exceeds the limit"),
    ("2020-02-30", "day is out of range"),
])
def test_scalars_that_python_cannot_build_are_refused(value: str, message: str) -> None:
    """Before: a ValueError traceback from PyYAML's constructor."""
    err = refused(HEAD + f"  config: {{a: {value}}}\n" + SPOUTS)
    (problem,) = err.problems
    assert problem.path == "line 5, column 15"
    assert message in problem.message


def test_format_value_is_bounded() -> None:
    """Before: `repr` of the whole value, then cut to 80 characters."""
    big: Any = [["lol"] * 1000] * 1000
    t0 = time.monotonic()
    shown = format_value(big)
    assert time.monotonic() - t0 < 1
    assert len(shown) <= 80 and shown.startswith("[['lol', 'lol'")
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert format_value(deep).startswith("[[[")
    assert format_value("x" * 10**6).endswith("...")
    assert format_value(None) == "null" and format_value(True) == "true"


# ------------------------------------------------------------------ properties (hypothesis)

_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
            | st.text(max_size=20))
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=12) | st.integers() | st.none(), inner, max_size=4),
    max_leaves=30,
)
_yaml_pieces = st.sampled_from([
    "apiVersion: squall.io/v1alpha1\n", "kind: Topology\n", "metadata: {name: t}\n", "spec:\n",
    "  spouts:\n", "  bolts:\n", "    - name: s\n", f"      class: {FX}:SentenceSpout\n",
    "      parallelism: 2\n", "      inputs: [{component: s, grouping: fields, fields: [x]}]\n",
    "&a ", "*a", "<<: *a\n", "[", "]", "{", "}", ": ", "- ", "? ", "!!binary ", "!!set ",
    "!!timestamp ", "!!python/object:os.system ", "'", '"', "\\", "#", "---\n", "...\n",
    "%YAML 1.1\n", "\t", "\n", "  ", "\x00", "\x85", "\ufeff", "é", "1e999", "0x1F", "~",
    "2020-02-30", "!!int ", "!!float ", "!!str ", "!!omap ", "!!pairs ", "key", "9" * 40,
])


def _check(data: str | bytes | dict[str, Any]) -> None:
    """The property: a Topology, or a TopologyError that prints; nothing else, and quickly."""
    t0 = time.monotonic()
    try:
        topo = parse_topology(data, source="t.yaml")
    except TopologyError as exc:
        assert exc.lines() and all(len(line) < 2000 for line in exc.lines())
        return
    finally:
        assert time.monotonic() - t0 < 15
    try:
        check_topology(topo, resolve_classes=False)
    except TopologyError as exc:
        assert exc.lines()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_yaml_pieces, max_size=40).map("".join))
def test_random_yaml_text_raises_only_topology_errors(text: str) -> None:
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_topology_errors(data: bytes) -> None:
    _check(data)
    _check(HEAD.encode() + data)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


_FULL_PATHS = list(_paths(FULL))[1:]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_FULL_PATHS), _json), min_size=1, max_size=4),
       st.booleans())
def test_mutated_documents_raise_only_topology_errors(
    edits: list[tuple[tuple[Any, ...], Any]], as_yaml: bool
) -> None:
    """A valid topology with random subtrees replaced by random values, as a mapping (the
    operator's path) and as YAML text (`squall validate`'s)."""
    doc = copy.deepcopy(FULL)
    for path, value in edits:
        node: Any = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced a parent
    _check(yaml.safe_dump(doc) if as_yaml else doc)


# ------------------------------------------------------------------ the command, end to end

def squall(*args: str, cwd: Path, limit_mb: int = 1024, timeout: float = 60
           ) -> subprocess.CompletedProcess[str]:
    """`squall ARGS` in a child process whose address space is capped at `limit_mb`."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    return subprocess.run([sys.executable, "-m", "squall_operator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=cap,
                          check=False)


@pytest.mark.integration
def test_validate_refuses_hostile_files_without_a_traceback(tmp_path: Path) -> None:
    """Before: the bomb grew past a GB for over 30 s; the deep file ended in a RecursionError
    traceback."""
    files = {
        "bomb.yaml": (laughs(9), "line 10, column"),
        "deep.yaml": (HEAD + "  config: " + "[" * 500 + "]" * 500 + "\n" + SPOUTS,
                      "nests deeper than 100 levels"),
        "big.yaml": (HEAD + "  config: {pad: '" + "x" * (1 << 20) + "'}\n" + SPOUTS,
                     "larger than 1 MiB"),
    }
    for name, (text, expected) in files.items():
        (tmp_path / name).write_text(text)
        t0 = time.monotonic()
        result = squall("validate", name, cwd=tmp_path, limit_mb=512)
        assert time.monotonic() - t0 < 30
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr


# ------------------------------------------------------------ component modules at import

_unique = iter(range(10**6))


def component_module(tmp_path: Path, body: str) -> str:
    """A module in tmp_path holding `body` and then a spout class `Spout`; its fresh name."""
    name = f"hostile_mod_{next(_unique)}_{id(tmp_path)}"
    (tmp_path / f"{name}.py").write_text(
        body + "\nclass Spout:\n    outputs = ['x']\n    def next_tuple(self):\n        pass\n")
    return name


def topology_text(module: str) -> str:
    return HEAD + f"  spouts: [{{name: s, class: '{module}:Spout'}}]\n"


@pytest.mark.parametrize(("body", "shown"), [
    ("import sys\nsys.exit(3)\n", "called sys.exit(3)"),
    ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt"),
    ("raise RuntimeError('no database')\n", "RuntimeError: no database"),
])
def test_module_escaping_at_import_is_a_problem_in_process(tmp_path: Path, body: str,
                                                          shown: str) -> None:
    """The worker imports its classes in-process: SystemExit and KeyboardInterrupt at import
    become problems naming the module and the field. Before: they escaped check_topology."""
    module = component_module(tmp_path, body)
    topo = parse_topology(topology_text(module))
    with pytest.raises(TopologyError) as info:
        check_topology(topo, search_paths=(tmp_path,))
    (problem,) = info.value.problems
    assert problem.path == "spec.spouts[0].class"
    assert f"importing module '{module}' failed" in problem.message and shown in problem.message


@pytest.mark.integration
@pytest.mark.parametrize(("body", "shown"), [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0)"),
    ("import os\nos._exit(7)\n", "ended the process (exit code 7)"),
    ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt"),
])
def test_validate_reports_a_module_that_exits(tmp_path: Path, body: str, shown: str) -> None:
    """Before: `sys.exit(0)` at import made `squall validate` exit 0, as if the file were valid."""
    module = component_module(tmp_path, body)
    (tmp_path / "t.yaml").write_text(topology_text(module))
    result = squall("validate", "t.yaml", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"t.yaml: spec.spouts[0].class: '{module}:Spout' — " in result.stderr, result.stderr
    assert shown in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_hanging_import_is_cut_off(tmp_path: Path, command: str) -> None:
    """A module that never finishes importing: refused after --import-timeout, naming the
    module and the field, and the process importing it (and its children) is gone."""
    module = component_module(tmp_path, (
        "import os, pathlib, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '3600'])\n"
        "pathlib.Path('pids').write_text(f'{os.getpid()} {child.pid}')\n"
        "time.sleep(3600)\n"))
    (tmp_path / "t.yaml").write_text(topology_text(module))
    t0 = time.monotonic()
    result = squall(command, "t.yaml", "--import-timeout", "3", cwd=tmp_path, timeout=120)
    took = time.monotonic() - t0
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert (f"t.yaml: spec.spouts[0].class: '{module}:Spout' — importing module '{module}' did "
            "not finish within 3 s") in result.stderr, result.stderr
    assert took < 60
    for pid in map(int, (tmp_path / "pids").read_text().split()):
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"process {pid} outlived the check"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.integration
def test_module_output_does_not_confuse_the_check(tmp_path: Path) -> None:
    module = component_module(tmp_path, "print('hello from the module')\n")
    (tmp_path / "t.yaml").write_text(topology_text(module))
    result = squall("validate", "t.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok: t (1 spout, 0 bolts)\n"
    assert "hello from the module" in result.stderr


@pytest.mark.integration
def test_isolated_check_spawns_when_the_caller_has_threads(tmp_path: Path) -> None:
    """The operator has threads, so its check runs in a new interpreter rather than a fork:
    the same problems come back, and a hanging import is cut off there too."""
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)
    helper.start()
    try:
        exits = component_module(tmp_path, "import sys\nsys.exit(4)\n")
        with pytest.raises(TopologyError) as info:
            check_topology_isolated(parse_topology(topology_text(exits)), search_paths=(tmp_path,))
        assert [str(p) for p in info.value.problems] == [
            f"spec.spouts[0].class: '{exits}:Spout' — importing module '{exits}' failed: it "
            "called sys.exit(4)"]
        hangs = component_module(tmp_path, "import time\ntime.sleep(3600)\n")
        t0 = time.monotonic()
        with pytest.raises(TopologyError) as info:
            check_topology_isolated(parse_topology(topology_text(hangs)),
                                    search_paths=(tmp_path,), timeout=2)
        assert time.monotonic() - t0 < 30
        assert "did not finish within 2 s" in str(info.value)
        fine = component_module(tmp_path, "")
        resolved = check_topology_isolated(parse_topology(topology_text(fine)),
                                           search_paths=(tmp_path,))
        assert resolved.streams["s"]["default"].fields == ["x"]
    finally:
        stop.set()


@pytest.mark.integration
def test_a_file_with_many_problems_is_reported_briefly(tmp_path: Path) -> None:
    """Before: 60,000 problem lines, printed through rich in about a minute. (60 streams of
    1,000 fields: one stream of 60,000 is past the limit of fields per stream, one problem.)"""
    fields = ", ".join(["1"] * 1000)
    streams = ", ".join([f"{{fields: [{fields}]}}"] * 60)
    (tmp_path / "t.yaml").write_text(
        HEAD + f"  spouts: [{{name: s, class: 'm:S', outputs: [{streams}]}}]\n")
    t0 = time.monotonic()
    result = squall("validate", "--no-classes", "t.yaml", cwd=tmp_path)
    assert time.monotonic() - t0 < 30
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "t.yaml: spec.spouts[0].outputs[0].fields[0]: 1 — must be a string"
    assert lines[-2:] == ["... and 59950 more", "invalid topology: 60000 problems"]
    assert len(lines) == 52


@pytest.mark.integration
@pytest.mark.parametrize(("body", "shown"), [
    ("import sys\nsys.exit(0)\n", "importing module '{m}' failed: it called sys.exit(0)"),
    ("def make():\n    raise KeyboardInterrupt\n", "{m}:make() failed: KeyboardInterrupt"),
])
def test_build_reports_a_module_that_exits(tmp_path: Path, body: str, shown: str) -> None:
    """`squall build` runs the user's function in-process; before, sys.exit(0) in it made the
    command exit 0 without output."""
    module = component_module(tmp_path, body)
    result = squall("build", f"{module}:make", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert shown.format(m=module) in result.stderr and "Traceback" not in result.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("body", "shown"), [
    ("import time\ntime.sleep(3600)\n", "importing module '{m}' did not finish within 2 s"),
    ("import threading, time\ndef make():\n    threading.Thread(target=time.sleep, args=(3600,)).start()\n"
     "    time.sleep(3600)\n", "{m}:make() did not finish within 2 s"),
    ("import os\ndef make():\n    os._exit(0)\n", "{m}:make() ended the process (exit code 0)"),
])
def test_build_cuts_off_a_function_that_hangs(tmp_path: Path, body: str, shown: str) -> None:
    """`squall build` runs the user's module and function in a child process under
    `--build-timeout`; the message names the module or the function, and nothing the user's code
    started is left running. Before: `squall build` waited as long as the function did (still
    hanging after 20 s), and `os._exit(0)` in the function made it exit 0 with no output."""
    module = component_module(tmp_path, body)
    t0 = time.monotonic()
    result = squall("build", f"{module}:make", "--build-timeout", "2", cwd=tmp_path)
    assert time.monotonic() - t0 < 30
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert shown.format(m=module) in result.stderr and "Traceback" not in result.stderr
    assert "--build-timeout" in result.stderr or "ended the process" in shown
    assert result.stdout == ""
    left = subprocess.run(["pgrep", "-f", module], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"left running: {left.stdout}"


@pytest.mark.integration
def test_build_in_a_child_still_builds(tmp_path: Path) -> None:
    """What the function prints goes to stderr; the YAML alone to stdout."""
    module = component_module(tmp_path, "")
    (tmp_path / "maker.py").write_text(
        "from squall.builder import TopologyBuilder\n"
        "def make():\n"
        "    print('hello from make')\n"
        f"    b = TopologyBuilder('built')\n    b.set_spout('s', '{module}:Spout')\n    return b\n")
    result = squall("build", "maker:make", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "hello from make" in result.stderr and "hello" not in result.stdout
    topo = parse_topology(yaml.safe_load(result.stdout))
    assert topo.name == "built" and topo.spec.spouts[0].class_name == f"{module}:Spout"
