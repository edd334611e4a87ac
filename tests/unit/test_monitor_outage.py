"""The operator's nimbus through a ZooKeeper outage, on the in-memory state of
test_operator_kube_nimbus and fake time: while ZooKeeper is away a round reads nothing and judges
nothing; once it is back, every worker gets a fresh heartbeat window."""

from __future__ import annotations

import pytest
from test_operator_kube_nimbus import SPEC, _beat_all, _make

from squall.state import CONNECTION_ERRORS, NotConnected

pytestmark = pytest.mark.unit


def test_outage_declares_no_worker_dead_and_replaces_no_pod() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    clock.now += 1
    nimbus.round()
    slots = dict(state.assignments["ns~wc"].executor_slots)
    pods_before = set(api.pods)
    # ZooKeeper goes away for 60 s (> the 5 s task timeout): rounds raise a connection error,
    # which the loop turns into one warning, and change nothing
    state.ready = False
    for _ in range(60):
        clock.now += 1
        with pytest.raises(NotConnected):
            nimbus.round()
        assert isinstance(NotConnected("x"), CONNECTION_ERRORS)
    # back: the session listeners run before `ready` is set (ClusterState's order)
    for listener in state.session_listeners:
        listener(False)
    state.ready = True
    clock.now += 1
    nimbus.round()  # no worker wrote since: staleness it could not observe does not count
    assert state.assignments["ns~wc"].executor_slots == slots
    assert set(api.pods) == pods_before and not api.deleted
    assert "WorkerReplaced" not in api.reasons("wc")
    _beat_all(state, clock, "ns~wc")
    for _ in range(10):
        clock.now += 1
        _beat_all(state, clock, "ns~wc")
        nimbus.round()
    assert state.assignments["ns~wc"].executor_slots == slots
    # a worker that stays silent after the outage is dead after the task timeout
    clock.now += 6
    nimbus.round()
    assert state.assignments["ns~wc"].executor_slots != slots
