"""The worker's memory allocator: jemalloc for topologies with windows, CPython's own otherwise.

A windowed bolt holds every tuple of its windows (the `Tuple`, its values list, the word) for
its length and slide, and the spout and the ackers keep an entry per tree the windows hold open.
CPython's small-object allocator (pymalloc) hands out the blocks of a size class from its first
partly used pool, so once a window's expired tuples are freed in a burst, later allocations of
the process, on any thread, take blocks freed seconds ago and out of every cache: in the
sliding-window word count the allocator's share of the workers' CPU was 10-13% against 4.5% in
the plain word count, 89% of it on the load of the free block (docs/performance.md).
jemalloc's per-thread caches hand recently freed blocks out first: with it the windowed word
count runs about a quarter faster, while the plain word count and the no-op topology run a few
percent slower than on pymalloc (docs/performance.md, "The worker's allocator"). So by default
(`auto`) a worker runs on jemalloc when its topology has a windowed bolt, and on CPython's own
allocator otherwise.

`SQUALL_WORKER_ALLOCATOR` in the worker's environment chooses: `auto` (the default), `jemalloc`
or `pymalloc`. jemalloc is Debian's `libjemalloc2` (in the worker image; scripts/setup installs
it). The allocator is fixed when a process starts (`LD_PRELOAD`, and `PYTHONMALLOC=malloc` so
that Python's small objects go to it too), so a worker that wants it re-executes itself once,
with the same arguments: at once, before it imports anything else, when jemalloc is asked for by
name; under `auto`, as soon as it has read its topology from ZooKeeper (before it registers or
starts anything). Its pid, parent and death signal stay the same. The processes it starts
(Spark's JVM, for one) get the environment it was started with: the preload is the worker's own.
A worker that cannot have jemalloc (the library is missing, the user set `PYTHONMALLOC`, or the
preload did not take) runs on CPython's allocator and says why in its log; an unknown value stops
the worker with an error naming the variable.

The decision (`decide`) is pure: the environment, the library lookup, whether jemalloc is
already in the process and whether the topology has windows are passed in.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["AUTO", "ENV", "JEMALLOC", "MMAP_THRESHOLD", "PYMALLOC", "Decision", "active", "decide",
           "decided_early", "fix_mmap_threshold", "jemalloc_loaded", "select"]

ENV = "SQUALL_WORKER_ALLOCATOR"
# set on the re-executed process (its value: LD_PRELOAD as it was before, maybe empty): never
# re-execute twice, and give the worker's own children the environment it was started with
MARK = "SQUALL_WORKER_ALLOCATOR_WAS"
AUTO = "auto"
JEMALLOC = "jemalloc"
PYMALLOC = "pymalloc"
CHOICES = (AUTO, JEMALLOC, PYMALLOC)
INSTALL_HINT = "Debian and Ubuntu: apt-get install libjemalloc2"


@dataclass(frozen=True)
class Decision:
    """What a worker process runs on: `allocator`, after re-executing with `exec_env` if that
    is not None; `message` says so (and why, when it is not what was asked) for the log;
    `warn`: the log line is a warning (jemalloc was asked for by name and cannot be had)."""

    allocator: str
    exec_env: dict[str, str] | None
    message: str
    warn: bool = False


def asked(env: Mapping[str, str]) -> str:
    """The allocator `SQUALL_WORKER_ALLOCATOR` asks for (`auto` when unset or empty). Raises
    ValueError, naming the variable and the choices, for anything else."""
    raw = env.get(ENV, "")
    value = raw.strip().lower() or AUTO
    if value not in CHOICES:
        raise ValueError(f"{ENV}={raw!r}: expected one of {', '.join(CHOICES)} (default {AUTO})")
    return value


def decided_early(env: Mapping[str, str]) -> bool:
    """Whether the allocator is settled without the topology: asked for by name, or this is the
    re-executed process. Raises ValueError for an unknown value."""
    return asked(env) != AUTO or MARK in env


def decide(env: Mapping[str, str], find: Callable[[], str | None], loaded: bool,
           windowed: bool = False) -> Decision:
    """The allocator for a worker started with `env`; `find()` names the jemalloc library (a
    path or soname for `LD_PRELOAD`, None when the machine has none); `loaded`: jemalloc is in
    this process already; `windowed`: its topology has a windowed bolt (what `auto` goes by).
    Raises ValueError for an unknown `SQUALL_WORKER_ALLOCATOR`."""
    value = asked(env)
    why = f"{ENV}={env[ENV].strip()}" if value != AUTO else (
        "auto: the topology has windowed bolts" if windowed else "auto: the topology has no windowed bolt")
    wanted = value if value != AUTO else (JEMALLOC if windowed else PYMALLOC)
    if MARK in env:  # re-executed for jemalloc: whatever the topology, it stays so
        if loaded:
            return Decision(JEMALLOC, None, "allocator: jemalloc (re-executed with it preloaded)")
        return Decision(PYMALLOC, None, "allocator: CPython's own: jemalloc was preloaded "
                                        f"(LD_PRELOAD={env.get('LD_PRELOAD', '')!r}) but is not in the "
                                        "process (the loader refused it)", warn=True)
    if wanted == PYMALLOC:
        if loaded:
            return Decision(JEMALLOC, None, f"allocator: jemalloc, preloaded by LD_PRELOAD="
                                            f"{env.get('LD_PRELOAD', '')!r} ({why} asks for CPython's own; "
                                            "left as is)", warn=value == PYMALLOC)
        return Decision(PYMALLOC, None, f"allocator: CPython's own ({why})")
    named = value == JEMALLOC
    if loaded:
        small = "" if env.get("PYTHONMALLOC") == "malloc" else (
            "; PYTHONMALLOC is not malloc, so Python's small objects stay on CPython's own")
        return Decision(JEMALLOC, None, f"allocator: jemalloc (preloaded by the environment{small})")
    if env.get("PYTHONMALLOC"):
        return Decision(PYMALLOC, None, f"allocator: PYTHONMALLOC={env['PYTHONMALLOC']} as set in the "
                                        f"environment; jemalloc ({why}) not used", warn=named)
    lib = find()
    if lib is None:
        return Decision(PYMALLOC, None, f"allocator: CPython's own: jemalloc wanted ({why}) but "
                                        f"libjemalloc is not on this machine ({INSTALL_HINT}; "
                                        f"{ENV}=pymalloc says CPython's own is meant)", warn=named)
    before = env.get("LD_PRELOAD", "")
    out = dict(env)
    out["LD_PRELOAD"] = f"{lib}:{before}" if before else lib
    out["PYTHONMALLOC"] = "malloc"  # Python's small objects to jemalloc too, not to pymalloc
    out[MARK] = before
    return Decision(JEMALLOC, out, f"allocator: jemalloc ({why}): re-executing with {lib} preloaded")


def jemalloc_loaded() -> bool:
    """Whether jemalloc is this process's malloc (it exports `mallctl`; glibc does not)."""
    try:
        return hasattr(ctypes.CDLL(None), "mallctl")
    except OSError:
        return False


def _find_jemalloc() -> str | None:
    if not sys.platform.startswith("linux"):
        return None  # LD_PRELOAD and the loader's lookup are Linux's
    return ctypes.util.find_library("jemalloc")


# this process's decision, for the worker's log once logging is set up (None before `select`)
active: Decision | None = None


def select(windowed: bool = False, before_exec: Callable[[Decision], None] | None = None,
           argv: list[str] | None = None) -> Decision:
    """Apply the decision to this process: re-execute it (after `before_exec(decision)`, which
    may log and release what the process holds; this call then does not return) or restore the
    environment its children get, and remember the decision in `active`. Raises ValueError for
    an unknown `SQUALL_WORKER_ALLOCATOR`."""
    global active
    env = os.environ
    decision = decide(env, _find_jemalloc, jemalloc_loaded(), windowed)
    if decision.exec_env is not None:
        if before_exec is not None:
            before_exec(decision)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv if argv is not None else sys.orig_argv, decision.exec_env)
    if MARK in env:
        # the preload is the worker's own: its children start as the worker was started
        was = env.pop(MARK)
        if was:
            env["LD_PRELOAD"] = was
        else:
            env.pop("LD_PRELOAD", None)
        env.pop("PYTHONMALLOC", None)
    active = decision
    return decision


# glibc's malloc: blocks from this size up are mapped on their own, and given back to the system
# when freed. glibc raises its threshold by itself to the size of every mapped block freed (up to
# 32 MiB), so that after one large frame (a batch of large tuples; or garbage from the network)
# the next ones come from the heap, which keeps their pages once freed: 12 MiB frames of garbage
# left a worker 48 MB larger for good (tests/integration/test_fuzz_worker.py). Setting it fixes
# it (mallopt turns the adjustment off).
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
# Fixing the mmap threshold also fixes the trim threshold at glibc's 128 KiB, and the heap is then
# shrunk and grown again at every burst of small frees: the no-op bench's worker lost 5-10% to it.
# Heap tops up to this size are kept; large frames are mapped on their own and given back anyway.
TRIM_THRESHOLD = 8 << 20
_M_TRIM_THRESHOLD = -1


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `size` (the worker does this at start); False where there is
    no glibc `mallopt` (musl; jemalloc preloaded takes the allocations then, and gives memory
    back on its own)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, size)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
