"""The compiled hot path or the plain Python one, decided once when `squall` is imported.

setup.py compiles the per-tuple modules (`MODULES`) with mypyc into C extensions beside their
.py files and writes `_native.json`: each module's source hash at build time. The compiled
modules are used only when every one of them was built from exactly the source beside it;
otherwise (a module edited since the build, a build that failed half way, `SQUALL_PURE=1`) all of
them are imported from their .py files, so a stale build never shadows an edit. The compiled
modules call each other natively, hence all or none.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

# keep in step with setup.py's COMPILED
MODULES = (
    "squall.acker",
    "squall.counters",
    "squall.groupings",
    "squall.tuples",
    "squall.worker.anchoring",
    "squall.worker.bolt",
    "squall.worker.control",
    "squall.worker.executor",
    "squall.worker.routing",
    "squall.worker.spout",
    "squall.worker.transport",
)
ROOT = Path(__file__).resolve().parent  # the squall package
MANIFEST = ROOT / "_native.json"

# set by `install`: whether the compiled modules are in use, and why (or why not)
compiled = False
reason = "not decided yet"


def source_of(module: str, root: Path = ROOT) -> Path:
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py")


def has_extension(module: str, root: Path = ROOT) -> bool:
    base = source_of(module, root).with_suffix("")
    return any(base.with_name(base.name + sfx).exists() for sfx in importlib.machinery.EXTENSION_SUFFIXES)


def stale(manifest: Mapping[str, str], modules: Sequence[str] = MODULES, root: Path = ROOT) -> list[str]:
    """The modules whose compiled build is missing or was not made from the source beside it."""
    out = []
    for m in modules:
        want = manifest.get(m)
        try:
            have = hashlib.sha256(source_of(m, root).read_bytes()).hexdigest()
        except OSError:
            have = None
        if want is None or have != want or not has_extension(m, root):
            out.append(m)
    return out


def decide(env: Mapping[str, str], modules: Sequence[str] = MODULES, root: Path = ROOT) -> tuple[bool, str]:
    """(use the compiled modules?, why)."""
    if env.get("SQUALL_PURE", "") not in ("", "0"):
        return False, "SQUALL_PURE is set"
    if not any(has_extension(m, root) for m in modules):
        return False, "not compiled (install with mypyc and a C compiler to compile it)"
    try:
        manifest = json.loads((root / MANIFEST.name).read_text())
    except (OSError, ValueError):
        return False, f"no readable {MANIFEST.name} beside the compiled modules"
    bad = stale(manifest, modules, root)
    if bad:
        return False, f"compiled from other sources than {', '.join(bad)} (rebuild: pip install -e .)"
    return True, "compiled with mypyc"


class PureFinder(importlib.abc.MetaPathFinder):
    """Imports the hot-path modules from their .py files, ahead of any compiled extension."""

    def __init__(self, modules: Sequence[str], root: Path) -> None:
        self.paths = {m: source_of(m, root) for m in modules}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        p = self.paths.get(fullname)
        return None if p is None else importlib.util.spec_from_file_location(fullname, p)


def install() -> None:
    """Decide once per process; with the plain Python path, put a PureFinder first."""
    global compiled, reason
    if reason != "not decided yet":
        return
    compiled, reason = decide(os.environ)
    if not compiled and any(has_extension(m) for m in MODULES):
        sys.meta_path.insert(0, PureFinder(MODULES, ROOT))
