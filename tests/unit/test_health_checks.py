"""The worker's readiness and liveness checks (squall.worker.health), on plain values."""

from __future__ import annotations

import pytest

from squall.worker.health import Probe, liveness_problems, readiness_problems

pytestmark = pytest.mark.unit

NOW = 1000.0
LOOPS = {"main": NOW - 0.5, "receive-data": NOW - 0.1, "receive-control": NOW - 0.1,
         "transfer-data": NOW - 0.1, "transfer-control": NOW - 0.1}


def probe(**kw: object) -> Probe:
    base: dict[str, object] = dict(zk_connected=True, endpoint=True, assignment_loaded=True, loops=LOOPS)
    return Probe(**{**base, **kw})  # type: ignore[arg-type]


def test_ready_when_every_check_passes() -> None:
    assert readiness_problems(probe(), NOW) == []
    assert liveness_problems(probe(), NOW) == []


def test_a_disconnected_session_is_not_ready_but_alive() -> None:
    p = probe(zk_connected=False, endpoint=None)
    assert readiness_problems(p, NOW) == [
        "zookeeper: session not connected (peers cannot find this worker's endpoint)"]
    assert liveness_problems(p, NOW) == []


def test_an_endpoint_missing_from_the_session_is_not_ready() -> None:
    assert readiness_problems(probe(endpoint=False), NOW) == [
        "zookeeper: this worker's endpoint is not registered in the current session"]
    got = readiness_problems(probe(endpoint=False, zk_error="KazooTimeoutError"), NOW)
    assert got == ["zookeeper: could not check this worker's endpoint: KazooTimeoutError"]


def test_no_assignment_is_not_ready() -> None:
    assert readiness_problems(probe(assignment_loaded=False), NOW) == [
        "assignment: not loaded, or this slot is not in it"]


def test_a_wedged_loop_is_not_ready_and_later_not_alive() -> None:
    wedged = {**LOOPS, "transfer-data": NOW - 12.0}
    assert readiness_problems(probe(loops=wedged), NOW) == ["thread transfer-data: stuck for 12s"]
    assert liveness_problems(probe(loops=wedged), NOW) == []
    long_wedged = {**LOOPS, "transfer-data": NOW - 61.0}
    assert liveness_problems(probe(loops=long_wedged), NOW) == ["thread transfer-data: stuck for 61s"]


def test_a_dead_thread_is_neither_ready_nor_alive_and_every_reason_is_listed() -> None:
    p = probe(zk_connected=False, endpoint=None, dead=["receive-data", "executor-split-3-3"])
    assert readiness_problems(p, NOW) == [
        "zookeeper: session not connected (peers cannot find this worker's endpoint)",
        "thread executor-split-3-3: not running",
        "thread receive-data: not running",
    ]
    assert liveness_problems(p, NOW) == ["thread executor-split-3-3: not running", "thread receive-data: not running"]
