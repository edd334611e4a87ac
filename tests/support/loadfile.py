"""Import a Python file that is not on the path (a bench harness, an example's components) as a
module, for its pure functions and constants; every tier's tests share this one way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(path: Path, name: str | None = None) -> ModuleType:
    """`path` imported as module `name` (default `_loaded_<stem>`), registered in sys.modules
    (dataclasses look their module up there) and with its directory on sys.path while it runs
    (a bench harness imports its siblings)."""
    name = name or f"_loaded_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(folder)
    return module
