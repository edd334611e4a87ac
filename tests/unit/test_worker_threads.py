"""Worker threads named in the kernel (squall.worker.threads): what top -H, perf and
/proc/PID/task/TID/comm show for an executor or a loop; real threads, the real kernel."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from squall.worker.threads import NamedThread, executor_thread_name, name_this_thread, os_thread_name

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's thread names are Linux's")


def comm_of(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().rstrip("\n")


def test_names_fit_the_kernels_15_bytes_on_a_character_boundary() -> None:
    assert os_thread_name("receive-data") == b"receive-data"
    assert os_thread_name("transfer-control") == b"transfer-contro"
    # a 2-byte character that would straddle byte 15 is left out, not cut in half
    assert os_thread_name("abcdefghijklmn\u00e9x") == b"abcdefghijklmn"
    assert os_thread_name("\u00e9" * 10) == ("\u00e9" * 7).encode()


def test_an_executor_keeps_its_tasks_in_its_name() -> None:
    assert executor_thread_name("split", 3, 3) == "split-3"
    assert executor_thread_name("count", 5, 6) == "count-5-6"
    # a long component is shortened, never its task range
    assert executor_thread_name("sentence-splitter", 12, 12) == "sentence-spl-12"
    assert executor_thread_name("a-very-long-component", 100, 107) == "a-very-100-107"
    for name in (executor_thread_name("x" * 40, 1, 1), executor_thread_name("\u00e9" * 20, 10, 20)):
        assert len(name.encode()) <= 15, name


@linux
def test_a_named_thread_is_known_to_the_kernel_by_its_name() -> None:
    seen: dict[str, str] = {}
    named = threading.Barrier(4, timeout=10)  # the three threads, named and read, and this one
    gate = threading.Event()

    def body(key: str) -> None:
        seen[key] = comm_of(threading.get_native_id())
        named.wait()
        gate.wait(10)

    threads = [
        NamedThread(target=body, args=("python-name",), name="receive-control", daemon=True),
        NamedThread(target=body, args=("os-name",), name="executor-count-5-6", daemon=True,
                    os_name=executor_thread_name("count", 5, 6)),
        NamedThread(target=body, args=("long",), name="transfer-control", daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        named.wait()
        assert seen == {"python-name": "receive-control", "os-name": "count-5-6", "long": "transfer-contro"}
        # the Python names are untouched
        assert [t.name for t in threads] == ["receive-control", "executor-count-5-6", "transfer-control"]
    finally:
        gate.set()
        for t in threads:
            t.join(10)


@linux
def test_naming_one_thread_leaves_the_others_alone() -> None:
    before = comm_of(threading.get_native_id())
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(name_this_thread("only-me")))
    t.start()
    t.join(10)
    assert out == [True]
    assert comm_of(threading.get_native_id()) == before
