"""Worker threads the kernel knows by name.

A worker is one process with a thread per executor and per loop (receive, transfer, health).
CPython names its OS threads only from 3.14, so on 3.11 `top -H`, `ps -L`, perf and
`/proc/PID/task/TID/comm` show every one of them as `python`, and a profile of a busy worker
cannot say which executor burns the CPU (bench/profile_workers.py needed py-spy for that).
`NamedThread` sets the kernel's name of its thread (Linux `prctl(PR_SET_NAME)`, at most 15
bytes) from inside the thread when it starts: a thread may only name itself safely, since a
finished thread's handle is freed. Elsewhere (or where prctl fails) threads keep the kernel's
default name; nothing else changes.

The standard library's ctypes rather than a dependency (setproctitle has `setthreadtitle`): one
system call, and a new dependency would rebuild every image's dependency layer.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["NamedThread", "executor_thread_name", "name_this_thread", "os_thread_name"]

OS_NAME_BYTES = 15  # the kernel keeps 16 bytes with the terminating NUL (TASK_COMM_LEN)
_PR_SET_NAME = 15


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_prctl = _load_prctl()


def os_thread_name(name: str) -> bytes:
    """`name` as the kernel keeps it: UTF-8, at most 15 bytes, cut on a character boundary."""
    raw = name.encode("utf-8", "replace")
    if len(raw) <= OS_NAME_BYTES:
        return raw
    return raw[:OS_NAME_BYTES].decode("utf-8", "ignore").encode("utf-8")


def executor_thread_name(component: str, first: int, last: int) -> str:
    """An executor thread's kernel name: the component and its task range (`split-3`,
    `count-5-6`), the component shortened so that the tasks always fit."""
    suffix = f"-{first}" if first == last else f"-{first}-{last}"
    room = max(1, OS_NAME_BYTES - len(suffix))
    raw = os_thread_name(component)
    if len(raw) <= room:
        return component + suffix
    # shortened: cut on a character boundary, without a dangling separator
    return (raw[:room].decode("utf-8", "ignore").rstrip("-_.") or component[:1]) + suffix


def name_this_thread(name: str) -> bool:
    """Give the calling thread `name` in the kernel (cut to 15 bytes); False where it cannot."""
    if _prctl is None:
        return False
    return _prctl(_PR_SET_NAME, ctypes.c_char_p(os_thread_name(name)), 0, 0, 0) == 0


class NamedThread(threading.Thread):
    """A `threading.Thread` that names its OS thread when it starts: `os_name`, or its Python
    name cut to 15 bytes."""

    def __init__(self, *args: Any, os_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.os_name = os_name

    def run(self) -> None:
        name_this_thread(self.os_name or self.name)
        super().run()
