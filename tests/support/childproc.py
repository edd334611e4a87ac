"""Children of a test that die with it: the ``preexec_fn`` every tier passes to ``subprocess.Popen``.

A test's teardown stops what it started, but a pytest killed with SIGTERM or SIGKILL runs no
teardown, and a ``squall run``, a ZooKeeper or a Kafka broker it started would run on with
nobody to stop it. ``die_with_this_process()`` gives the child ``PR_SET_PDEATHSIG`` (SIGKILL)
between fork and exec, so the kernel kills it when its parent goes, however the parent ends.
The child's own children are tied by their own parents (``squall run`` ties its ZooKeeper and
workers the same way); a child in its own session (``start_new_session=True``) stays there.

The signal fires when the *thread* that started the child ends, not the process, so this
refuses to be called off the main thread (a child started from a reader or pod thread would die
with that thread). pytest puts ``tests/support`` on ``sys.path`` (``pythonpath`` in
pyproject.toml), so every tier imports it as ``childproc``; a child script that needs it gets
the parent's ``sys.path`` as its ``PYTHONPATH``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["die_with_this_process"]

_PR_SET_PDEATHSIG = 1
_LINUX = sys.platform.startswith("linux")
# loaded here, in the parent: between fork and exec the child only calls it
_prctl = ctypes.CDLL(None, use_errno=True).prctl if _LINUX else None


def die_with_this_process(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that ties the child to the calling process: SIGKILL when it dies.

    ``then`` runs after it in the child (a site's own ``preexec_fn``, such as an rlimit). Call
    it on the main thread, at the ``Popen`` call: it captures this process's pid, and a child
    whose parent is already gone by the time it runs exits at once (status 1).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("die_with_this_process() off the main thread: PR_SET_PDEATHSIG would kill the "
                           f"child when thread {threading.current_thread().name!r} ends")
    parent = os.getpid()

    def setup() -> None:  # in the child, between fork and exec
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
        if then is not None:
            then()

    return setup
