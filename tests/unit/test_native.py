"""squall._native: the compiled hot path is used only when it was built from the sources beside
it; otherwise (edited since, half built, SQUALL_PURE=1) every hot-path module is plain Python."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from squall import _native

pytestmark = pytest.mark.unit

SO = importlib.machinery.EXTENSION_SUFFIXES[0]
MODS = ("squall.acker", "squall.worker.executor")


def package(tmp: Path, built: bool = True, manifest: bool = True) -> Path:
    """A fake squall package: two modules' sources, their 'extensions' and a manifest."""
    root = tmp / "squall"
    (root / "worker").mkdir(parents=True)
    hashes = {}
    for m in MODS:
        src = _native.source_of(m, root)
        src.write_text(f"# {m}\n")
        hashes[m] = hashlib.sha256(src.read_bytes()).hexdigest()
        if built:
            src.with_name(src.stem + SO).write_bytes(b"\0")
    if manifest:
        (root / "_native.json").write_text(json.dumps(hashes))
    return root


def test_a_fresh_build_is_used(tmp_path: Path) -> None:
    root = package(tmp_path)
    assert _native.decide({}, MODS, root) == (True, "compiled with mypyc")


def test_an_edited_module_makes_every_module_pure(tmp_path: Path) -> None:
    root = package(tmp_path)
    _native.source_of("squall.worker.executor", root).write_text("# edited after the build\n")
    use, why = _native.decide({}, MODS, root)
    assert not use and "squall.worker.executor" in why and "squall.acker" not in why


def test_a_half_build_is_not_used(tmp_path: Path) -> None:
    root = package(tmp_path)
    src = _native.source_of("squall.acker", root)
    src.with_name(src.stem + SO).unlink()
    use, why = _native.decide({}, MODS, root)
    assert not use and "squall.acker" in why


@pytest.mark.parametrize("built, manifest, words", [(False, True, "not compiled"), (True, False, "_native.json")])
def test_no_build_or_no_manifest_is_pure(tmp_path: Path, built: bool, manifest: bool, words: str) -> None:
    use, why = _native.decide({}, MODS, package(tmp_path, built, manifest))
    assert not use and words in why


def test_squall_pure_wins_over_a_fresh_build(tmp_path: Path) -> None:
    root = package(tmp_path)
    assert _native.decide({"SQUALL_PURE": "1"}, MODS, root) == (False, "SQUALL_PURE is set")
    assert _native.decide({"SQUALL_PURE": "0"}, MODS, root)[0]


def test_pure_finder_imports_the_source_file(tmp_path: Path) -> None:
    root = package(tmp_path)
    spec = _native.PureFinder(MODS, root).find_spec("squall.worker.executor", None)
    assert spec is not None and spec.origin == str(root / "worker" / "executor.py")
    assert _native.PureFinder(MODS, root).find_spec("squall.plan", None) is None


def where(env: dict[str, str]) -> list[str]:
    code = ("import squall._native as n, squall.acker, squall.worker.executor as e; "
            "print(n.compiled); print(squall.acker.__file__); print(e.__file__)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True, timeout=120)
    return out.stdout.split()


def test_squall_pure_imports_every_hot_module_from_python() -> None:
    compiled, *files = where({"SQUALL_PURE": "1"})
    assert compiled == "False" and all(f.endswith(".py") for f in files), files


def test_this_checkout_uses_its_build_when_it_is_fresh() -> None:
    use, why = _native.decide({})
    if not use:
        pytest.skip(f"the hot path is not compiled here: {why}")
    compiled, *files = where({"SQUALL_PURE": ""})
    assert compiled == "True" and all(f.endswith(SO) for f in files), files
