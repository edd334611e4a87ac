"""The `squall` command: build and validate, through typer's CliRunner."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from squall.validation import parse_topology
from squall_operator.cli import EXIT_INVALID, app

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent
_counter = itertools.count()

COMPONENTS = """\
class Numbers:
    outputs = ["n"]
    def next_tuple(self):
        pass

class Square:
    outputs = ["n", "square"]
    def execute(self, tup):
        pass
"""


def unique(prefix: str) -> str:
    """A fresh module name per test: sys.modules would otherwise keep the first one."""
    return f"{prefix}_{next(_counter)}_{id(object())}"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def topology_yaml(module: str, *, fields: str = "[n]") -> str:
    return textwrap.dedent(f"""\
        apiVersion: squall.io/v1alpha1
        kind: Topology
        metadata:
          name: squares
        spec:
          spouts:
            - name: numbers
              class: {module}:Numbers
          bolts:
            - name: square
              class: {module}:Square
              parallelism: 2
              inputs:
                - component: numbers
                  grouping: fields
                  fields: {fields}
            - name: again
              class: {module}:Square
              inputs:
                - component: square
        """)


def test_validate_ok(runner: CliRunner, tmp_path: Path) -> None:
    module = unique("cli_components")
    (tmp_path / f"{module}.py").write_text(COMPONENTS)
    path = tmp_path / "topology.yaml"
    path.write_text(topology_yaml(module))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok: squares (1 spout, 2 bolts)\n"


def test_validate_bad_file_lists_problems(runner: CliRunner, tmp_path: Path) -> None:
    module = unique("cli_components")
    (tmp_path / f"{module}.py").write_text(COMPONENTS)
    path = tmp_path / "topology.yaml"
    text = topology_yaml(module, fields="[m]").replace("component: square", "component: sqaure")
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == EXIT_INVALID
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines == [
        f"{path}: spec.bolts[0].inputs[0].fields[0]: 'm' — stream 'default' of 'numbers' has "
        "no field 'm' (fields: n)",
        f"{path}: spec.bolts[1].inputs[0].component: 'sqaure' — unknown component "
        "(known: again, numbers, square)",
        "invalid topology: 2 problems",
    ]
    assert "Traceback" not in result.output


def test_validate_schema_error_and_missing_file(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(topology_yaml("m").replace("parallelism: 2", "parallelism: 0"))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == EXIT_INVALID
    assert f"{path}: spec.bolts[0].parallelism: 0 — must be >= 1" in result.stderr
    result = runner.invoke(app, ["validate", str(tmp_path / "missing.yaml")])
    assert result.exit_code == EXIT_INVALID
    assert "cannot read the file" in result.stderr


def test_validate_without_classes(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(topology_yaml("not_installed_anywhere"))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == EXIT_INVALID
    assert "cannot import module 'not_installed_anywhere'" in result.stderr
    result = runner.invoke(app, ["validate", "--no-classes", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: squares")


BUILD_MODULE = """\
from squall.builder import TopologyBuilder
from fixtures_components import SentenceSpout, SplitBolt, CountBolt


def builder():
    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", SplitBolt, parallelism=2).shuffle_grouping("sentences")
    b.set_bolt("count", CountBolt, parallelism=2).fields_grouping("split", ["word"])
    return b


def topology():
    return builder().build(num_workers=2)


def broken():
    b = builder()
    b.set_bolt("oops", CountBolt).fields_grouping("split", ["wrd"])
    return b


def not_a_topology():
    return 42
"""


@pytest.fixture
def build_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module = unique("cli_build")
    (tmp_path / f"{module}.py").write_text(BUILD_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(HERE))  # fixtures_components
    yield module
    sys.modules.pop(module, None)


def test_build_prints_yaml(runner: CliRunner, build_module: str) -> None:
    result = runner.invoke(app, ["build", f"{build_module}:topology"])
    assert result.exit_code == 0, result.output
    topo = parse_topology(result.stdout)
    assert topo.name == "wordcount" and topo.spec.num_workers == 2
    assert [b.name for b in topo.spec.bolts] == ["split", "count"]
    assert result.stdout.startswith("apiVersion: squall.io/v1alpha1\nkind: Topology\n")


def test_build_accepts_a_builder_and_writes_a_file(
    runner: CliRunner, build_module: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.yaml"
    result = runner.invoke(app, ["build", f"{build_module}:builder", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert parse_topology(out.read_text()).spec.num_workers == 1
    # The written file validates as it is.
    result = runner.invoke(app, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok: wordcount (1 spout, 2 bolts)\n"


def test_build_reports_check_problems(runner: CliRunner, build_module: str) -> None:
    result = runner.invoke(app, ["build", f"{build_module}:broken"])
    assert result.exit_code == EXIT_INVALID
    assert result.stdout == ""
    assert (
        f"{build_module}:broken: spec.bolts[2].inputs[0].fields[0]: 'wrd' — stream 'default' of "
        "'split' has no field 'wrd' (fields: word)"
    ) in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("no_module_here_xyz:topology", ["cannot import module 'no_module_here_xyz'"]),
        ("{module}:missing", ["has no attribute 'missing'"]),
        ("{module}:not_a_topology", ["gave a int", "expected a Topology or a TopologyBuilder"]),
        ("nocolon", ["expected MODULE:FUNCTION"]),
    ],
)
def test_build_bad_targets(
    runner: CliRunner, build_module: str, target: str, words: list[str]
) -> None:
    result = runner.invoke(app, ["build", target.format(module=build_module)])
    assert result.exit_code == EXIT_INVALID
    for word in words:
        assert word in result.stderr
    assert "Traceback" not in result.output


def test_help_lists_the_commands(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "build" in result.stdout and "validate" in result.stdout
