"""Builds the compiled hot path: the per-tuple modules compiled with mypyc (C extensions).

Everything else is in pyproject.toml. The modules below are plain, mypy --strict clean Python;
mypyc compiles them to C extensions that sit beside the .py files (`pip install -e .` builds them
in place, a wheel carries them). `squall/_native.py` decides at import whether to use them: only
when they were built from exactly the sources beside them (a content hash per module, written
here to `squall/_native.json`), so an edited module is never shadowed by a stale build, and
`SQUALL_PURE=1` forces the plain Python. Users' components stay plain Python either way.

SQUALL_COMPILE=0 skips compiling (pure Python install). A failed compile is reported and the
install goes on without the compiled modules (they are optional extensions).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
SRC = HERE / "worker_image"
# the per-tuple path: routing and groupings, the acker ledger and pending book, the input tuple,
# the executor loops and collectors, counters, per-peer send queues. Keep in step with squall/_native.py.
COMPILED = [
    "squall/acker.py",
    "squall/counters.py",
    "squall/groupings.py",
    "squall/tuples.py",
    "squall/worker/anchoring.py",
    "squall/worker/bolt.py",
    "squall/worker/control.py",
    "squall/worker/executor.py",
    "squall/worker/routing.py",
    "squall/worker/spout.py",
    "squall/worker/transport.py",
]


def remove_stale_extensions(src: Path = SRC) -> None:
    """Delete in-place builds of modules no longer in COMPILED (a module taken off the list
    would otherwise keep importing its old extension, linked to a shared library that is gone).
    A .so with no .py beside it is not an in-place build of ours: it stays."""
    keep = {p[: -len(".py")] for p in COMPILED}
    for so in src.joinpath("squall").rglob("*.so"):
        rel = so.relative_to(src).as_posix()
        if rel.split(".", 1)[0] not in keep and so.with_name(so.name.split(".", 1)[0] + ".py").exists():
            so.unlink()
            print(f"setup.py: removed {rel}: no longer compiled", file=sys.stderr)


def compiled_extensions() -> list:  # type: ignore[type-arg]
    remove_stale_extensions()
    if os.environ.get("SQUALL_COMPILE", "1") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("setup.py: mypyc is not installed; the hot path stays pure Python", file=sys.stderr)
        return []
    manifest = {
        p[: -len(".py")].replace("/", "."): hashlib.sha256((SRC / p).read_bytes()).hexdigest() for p in COMPILED
    }
    cwd = os.getcwd()
    try:
        # mypyc names modules from paths relative to the working directory
        os.chdir(SRC)
        # (an isolated build has none of the dependencies: their types are Any there)
        exts = mypycify(
            ["--config-file", str(HERE / "pyproject.toml"), "--ignore-missing-imports",
             # errors outside the compiled modules are not ours to stop the build (an isolated
             # build has no pydantic, so code typed by it reads as Any): followed silently
             "--follow-imports=silent", *COMPILED],
            opt_level="3",
            target_dir=str(HERE / "build" / "mypyc"),
        )
    except (Exception, SystemExit) as exc:  # a type error mypyc rejects: install pure Python
        print(f"setup.py: mypyc could not compile the hot path ({exc}); it stays pure Python", file=sys.stderr)
        return []
    finally:
        os.chdir(cwd)
    for ext in exts:
        ext.optional = True  # a C compiler missing or failing: pure Python, not a failed install
        ext.sources = [s if os.path.isabs(s) else str(SRC / s) for s in ext.sources]
    (SRC / "squall" / "_native.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return exts


setup(ext_modules=compiled_extensions())
