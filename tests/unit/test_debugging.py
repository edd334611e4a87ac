"""squall.worker.debugging's pure parts: which worker holds a component or a task, which request a
worker answers, and how stacks and profiles read (plain values, an injected time)."""

from __future__ import annotations

import threading
import traceback

import pytest

from squall.models.debugging import DebugRequest
from squall.worker import debugging
from squall.worker.debugging import (
    REQUEST_TTL_SECS,
    TargetError,
    ThreadStack,
    cut,
    format_profile,
    format_stacks,
    holders,
    parse_target,
    should_answer,
)

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
TASKS = {"words": (1, 2), "count": (3, 4, 5, 6), "__acker": (7, 8)}
# words one executor per task, count two executors of two tasks, one acker per worker
SLOTS = {"1-1": "a-6700", "2-2": "b-6700", "3-4": "a-6700", "5-6": "b-6700", "7-7": "a-6700", "8-8": "b-6700"}


def test_targets_are_components_or_tasks() -> None:
    assert parse_target(None) is None and parse_target(" ") is None
    assert parse_target("count") == "count" and parse_target("5") == 5 and parse_target(" 12 ") == 12


def test_holders_of_a_component_a_task_and_the_whole_topology() -> None:
    assert holders(TASKS, SLOTS, "count") == {"a-6700": ["count"], "b-6700": ["count"]}
    # task 4 runs in executor 3-4, on a; task 5 in 5-6, on b
    assert holders(TASKS, SLOTS, 4) == {"a-6700": ["count"]}
    assert holders(TASKS, SLOTS, 5) == {"b-6700": ["count"]}
    assert holders(TASKS, SLOTS, "__acker") == {"a-6700": ["__acker"], "b-6700": ["__acker"]}
    assert holders(TASKS, SLOTS, None) == {"a-6700": ["__acker", "count", "words"],
                                           "b-6700": ["__acker", "count", "words"]}
    assert holders(TASKS, {"1-1": "a-6700"}, "words") == {"a-6700": ["words"]}


def test_unknown_or_unassigned_targets_say_what_there_is() -> None:
    with pytest.raises(TargetError, match=r"no component 'cuont' \(it has count, words\)"):
        holders(TASKS, SLOTS, "cuont")
    with pytest.raises(TargetError, match=r"no task 9 \(it has tasks 1-8\)"):
        holders(TASKS, SLOTS, 9)
    with pytest.raises(TargetError, match="task 5 has no executor assigned"):
        holders(TASKS, {"1-1": "a-6700"}, 5)
    with pytest.raises(TargetError, match="component 'count' has no executor assigned"):
        holders(TASKS, {"1-1": "a-6700"}, "count")
    with pytest.raises(TargetError, match="the topology has no executor assigned"):
        holders(TASKS, {}, None)


def test_a_worker_answers_each_request_meant_for_it_once_and_never_an_old_one() -> None:
    req = DebugRequest(id="r1", action="stacks", slots=["a-6700"], time_secs=NOW)
    assert should_answer(req, "a-6700", None, NOW + 1)
    assert not should_answer(req, "a-6700", "r1", NOW + 1)  # answered already
    assert not should_answer(req, "b-6700", None, NOW + 1)  # not asked
    assert should_answer(req.model_copy(update={"slots": []}), "b-6700", "r0", NOW)  # every worker
    assert not should_answer(req, "a-6700", None, NOW + REQUEST_TTL_SECS + 1)  # too old
    assert not should_answer(None, "a-6700", None, NOW)


def test_cut_says_how_much_it_left_out() -> None:
    assert cut("abc", 5) == "abc"
    assert cut("abcdefgh", 5) == "abcde\n... (3 more characters left out)\n"


def test_stacks_read_as_tracebacks_main_thread_first() -> None:
    frames = [traceback.FrameSummary("/app/squall/worker/runtime.py", 10, "run", line="self.loop()"),
              traceback.FrameSummary("/app/squall/worker/engine.py", 99, "loop", line="poller.poll(5)")]
    text = format_stacks([ThreadStack(2, "zk-events", True, frames[:1]), ThreadStack(1, "MainThread", False, frames)],
                         "worker a-6700 (pid 7)")
    lines = text.splitlines()
    assert lines[:3] == ["worker a-6700 (pid 7)", "2 threads (each stack: most recent call last)", ""]
    assert lines[3] == '"MainThread" ident=1'
    assert lines[4] == '  File "/app/squall/worker/runtime.py", line 10, in run'
    assert lines[5] == "    self.loop()"
    assert lines[7] == "    poller.poll(5)"
    assert '"zk-events" ident=2 daemon' in lines


def test_profile_lists_cpu_top_functions_and_collapsed_stacks() -> None:
    samples = {("MainThread", ("run (runtime.py:1)", "loop (engine.py:2)")): 75,
               ("MainThread", ("run (runtime.py:1)", "beat (runtime.py:3)")): 25,
               ("zk", ("wait (threading.py:4)",)): 100}
    text = format_profile(samples, 100, 1.0, {"MainThread": 0.8, "zk": 0.0}, "worker a-6700")
    assert "100 samples over 1s" in text
    assert text.index("     0.800  MainThread") < text.index("     0.000  zk")
    assert "   75.0%  MainThread  loop (engine.py:2)" in text
    assert "MainThread;run (runtime.py:1);loop (engine.py:2) 75" in text.splitlines()
    assert "zk;wait (threading.py:4) 100" in text.splitlines()


def test_this_process_answers_with_its_own_threads() -> None:
    """The formatting above fed from the running interpreter: a thread parked in a known function
    shows in the dump and in a short profile."""
    release = threading.Event()

    def parked_here() -> None:
        release.wait(10)

    t = threading.Thread(target=parked_here, name="parked", daemon=True)
    t.start()
    try:
        dump = debugging.answer(DebugRequest(id="x", action="stacks", time_secs=NOW), "a-6700")
        assert '"parked" ident=' in dump and "in parked_here" in dump and '"MainThread"' in dump
        prof = debugging.answer(DebugRequest(id="y", action="profile", time_secs=NOW, seconds=0.2), "a-6700")
        assert "parked;" in prof and "parked_here" in prof
    finally:
        release.set()
        t.join()
