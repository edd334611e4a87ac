"""Importing the user's component classes: ``module:Class`` paths, with the topology's directory
on ``sys.path`` while a check or a worker reads them.

This is the one place that runs user code to find a class: `squall.validation` decides whether a
topology is right from the objects it is handed (a `ClassLoader`), and its `check_topology` uses
`importing(search_paths)` when it is asked to resolve the classes itself. A module may do anything
at import; every exception (``SystemExit`` and ``KeyboardInterrupt`` too) comes back as an
``ImportError`` whose message names the module and what it did, fit for a user. To keep a module
that hangs or ends the process from taking the caller with it, `squall.classcheck` runs the whole
check in a child process.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

__all__ = ["ClassLoader", "ModuleLoader", "describe", "importing", "on_sys_path"]


class ClassLoader(Protocol):
    """What loads user objects by ``module:attr``: `ModuleLoader` imports them from ``sys.path``;
    a test can hand plain objects."""

    def load(self, class_path: str) -> object:
        """The object at ``module:attr``; ``ImportError`` with a message fit for a user if none
        (caused by a ``ModuleNotFoundError`` when the module is not there)."""
        ...


@contextmanager
def on_sys_path(paths: Iterable[str | Path]) -> Iterator[None]:
    """``paths`` (resolved) first on ``sys.path`` for the duration, those not there already."""
    added: list[str] = []
    for p in paths:
        entry = str(Path(p).resolve())
        if entry not in sys.path and entry not in added:
            added.append(entry)
    sys.path[0:0] = added
    if added:
        importlib.invalidate_caches()
    try:
        yield
    finally:
        for entry in added:
            try:
                sys.path.remove(entry)
            except ValueError:
                pass


class ModuleLoader:
    """A `ClassLoader` that imports from ``sys.path``."""

    def load(self, class_path: str) -> object:
        """The object at ``module:attr`` (``attr`` may be dotted); ``ImportError`` with a message
        for a user if it cannot be imported or read."""
        module_name, sep, attr = class_path.partition(":")
        if not sep or not module_name or not attr:
            raise ImportError("must be a class path 'module:Class'")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise ImportError(f"cannot import module '{module_name}': {exc}") from exc
        except BaseException as exc:  # noqa: BLE001 - a SyntaxError, any exception, sys.exit()
            raise _escaped(f"importing module '{module_name}' failed", exc) from exc
        obj: object = module
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise ImportError(f"module '{module_name}' has no attribute '{attr}'") from None
            except BaseException as exc:  # noqa: BLE001 - a module __getattr__ that misbehaves
                raise _escaped(f"reading '{class_path}' failed", exc) from exc
        return obj


@contextmanager
def importing(search_paths: Iterable[str | Path] = ()) -> Iterator[ModuleLoader]:
    """A loader importing with ``search_paths`` (typically the topology file's directory) first
    on ``sys.path``, for the duration."""
    with on_sys_path(search_paths):
        yield ModuleLoader()


def describe(exc: BaseException) -> str:
    """What user code did, for a message: ``it called sys.exit(1)``, ``ValueError: boom``, or
    the bare type name of an exception with no text."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _escaped(what: str, exc: BaseException) -> ImportError:
    """A problem for user code that raised, or tried to end the process (SystemExit and
    KeyboardInterrupt are not the checker's to obey: they are reported like any exception)."""
    raised = "" if isinstance(exc, (Exception, SystemExit)) else "raised "
    return ImportError(f"{what}: {raised}{describe(exc)}")
