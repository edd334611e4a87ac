"""setup.py's removal of stale in-place extensions: a module taken off COMPILED must not keep
importing the extension an earlier `pip install -e .` built beside it (after the compiled window
was reverted, its stale .so broke three unit tests until it was deleted by hand).

setup.py calls setup() when run, so the function and the list are taken from its source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / "setup.py"


def load_setup_parts() -> dict[str, object]:
    tree = ast.parse(SETUP.read_text())
    keep = [n for n in tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom)) and not (isinstance(n, ast.ImportFrom) and n.module == "setuptools")
            or isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("HERE", "SRC", "COMPILED") for t in n.targets)
            or isinstance(n, ast.FunctionDef) and n.name == "remove_stale_extensions"]
    ns: dict[str, object] = {"__file__": str(SETUP)}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(SETUP), "exec"), ns)
    return ns


@pytest.fixture
def parts() -> dict[str, object]:
    return load_setup_parts()


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_a_module_off_the_list_loses_its_extension(tmp_path: Path, parts: dict[str, object]) -> None:
    compiled = parts["COMPILED"]
    assert isinstance(compiled, list) and "squall/worker/executor.py" in compiled
    tag = ".cpython-311-x86_64-linux-gnu.so"
    kept_py = touch(tmp_path / "squall/worker/executor.py")
    kept_so = touch(tmp_path / ("squall/worker/executor" + tag))
    gone_py = touch(tmp_path / "squall/windowing.py")
    gone_so = touch(tmp_path / ("squall/windowing" + tag))
    foreign = touch(tmp_path / ("squall/vendored" + tag))  # no .py beside it: not ours
    parts["remove_stale_extensions"](tmp_path)  # type: ignore[operator]
    assert kept_py.exists() and kept_so.exists(), "a module still in COMPILED keeps its extension"
    assert gone_py.exists() and not gone_so.exists(), "a module off COMPILED loses its stale extension"
    assert foreign.exists(), "an extension with no source beside it is left alone"

