"""An operator that stopped in the middle of a graph upgrade, between storing the new launch and
deleting the worker pods of the old one (nimbus.act's Resubmit, then KubeNimbus.relaunched):
every worker pod carries the launch it was made for (pods.ANNOTATION_LAUNCH), and the next
operator deletes those of an older launch than the stored one (roll.older_launch) and makes
their slots' new pods. First the decision on plain pod objects, then KubeNimbus's rounds with
the in-memory cluster state and fake API of test_operator_kube_nimbus, the first operator
stopped right after the new launch was stored."""

from __future__ import annotations

from typing import Any

import pytest
from squall.models.cluster import TopologyStatus, WorkerSlot
from squall_operator import pods
from squall_operator import roll as rolls
from test_operator_kube_nimbus import SPEC, _beat_all, _make

pytestmark = pytest.mark.unit

# the graph change: a bolt's class
NEW_SPEC = {**SPEC, "bolts": [{**SPEC["bolts"][0], "class": "m:B2"}]}  # type: ignore[index, dict-item]


def _pod(name: str, launch: Any = None, deleting: bool = False) -> dict[str, Any]:
    ann = {} if launch is None else {pods.ANNOTATION_LAUNCH: launch}
    return {"metadata": {"name": name, "annotations": ann,
                         **({"deletionTimestamp": "2026-11-28T10:00:00Z"} if deleting else {})}}


def test_pods_of_an_older_launch_than_the_stored_one_are_found_by_name() -> None:
    launch = 1_764_320_000.123456
    # as pods.worker_pod writes it on the pod it makes for that launch: read back exactly
    config = pods.WorkerPodConfig(image="squall-worker:0.1.0", zookeeper="zk:2181", zk_root="/squall")
    made = pods.worker_pod("wc", "u", "ns", WorkerSlot("n1", 6700), config, launch=launch)
    mine = made["metadata"]["annotations"][pods.ANNOTATION_LAUNCH]
    assert float(mine) == launch
    assert pods.ANNOTATION_LAUNCH not in pods.worker_pod("wc", "u", "ns", WorkerSlot("n1", 6700),
                                                         config)["metadata"]["annotations"]
    found = rolls.older_launch([
        _pod("wc-b-old", repr(launch - 30)),
        _pod("wc-a-old", repr(launch - 0.001)),
        _pod("wc-new", mine),
        _pod("wc-deleting", repr(launch - 30), deleting=True),  # relaunched deleted it already
        _pod("wc-older-operator"),  # made before pods said their launch: not judged
        _pod("wc-garbage", "yesterday"),
        {"metadata": {"name": "wc-bare"}},
    ], launch)
    assert found == ["wc-a-old", "wc-b-old"]
    assert rolls.older_launch([_pod("wc-new", mine)], launch) == []


def _upgrade_to_new_launch(nimbus: Any, state: Any, api: Any, clock: Any) -> float:
    """The graph change of `wc`, drained and launched; returns the old launch."""
    launch = state.storms["ns~wc"].launch_time_secs
    nimbus.register("ns", "wc", "uid-1", 2, NEW_SPEC)
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    clock.now += 2
    _beat_all(state, clock, "ns~wc", pending=0)
    nimbus.round()
    assert state.storms["ns~wc"].launch_time_secs > launch
    return launch


def test_a_restarted_operator_replaces_the_pods_an_upgrade_left_on_the_old_launch() -> None:
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    clock.now += 1
    nimbus.round()
    old = set(api.pods)
    launch = state.storms["ns~wc"].launch_time_secs
    assert {p["metadata"]["annotations"][pods.ANNOTATION_LAUNCH] for p in api.pods.values()} == {repr(launch)}
    # the operator stops right after storing the new launch: its pods are never deleted
    nimbus.relaunched = lambda topo: None  # type: ignore[method-assign]
    nimbus.reconcile_pods = lambda res: None  # type: ignore[method-assign]
    _upgrade_to_new_launch(nimbus, state, api, clock)
    new_launch = state.storms["ns~wc"].launch_time_secs
    assert set(api.pods) == old and not api.deleted
    # the next operator finds two pods of the launch before and replaces them
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, NEW_SPEC)
    clock.now += 1
    nimbus.round()
    assert sorted(name for name, _ in api.deleted) == sorted(name for _, name in old)
    assert all(grace is None for _, grace in api.deleted)  # graceful: the hand-over serves the slot
    assert api.reasons("wc").count("UpgradeResumed") == 1
    message = next(m for _, r, m in api.events if r == "UpgradeResumed")
    assert "still ran the launch before the graph upgrade" in message
    assert len(api.pods) == 2 and not set(api.pods) & old
    assert {p["metadata"]["annotations"][pods.ANNOTATION_LAUNCH] for p in api.pods.values()} == {repr(new_launch)}
    # idempotent: the next rounds replace nothing more
    api.ready_all()
    for _ in range(2):
        clock.now += 1
        nimbus.round()
    assert len(api.deleted) == 2 and api.reasons("wc").count("UpgradeResumed") == 1


def test_an_upgrade_that_ran_through_leaves_nothing_for_the_next_operator() -> None:
    """relaunched deleted the old launch's pods and the round made the new ones: an operator
    restarted after it finds every pod on the stored launch."""
    nimbus, state, api, clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    api.ready_all()
    _upgrade_to_new_launch(nimbus, state, api, clock)
    deleted = len(api.deleted)
    assert deleted == 2 and "UpgradeResumed" not in api.reasons("wc")
    nimbus, _, _, _ = _make(state, api, clock)
    nimbus.register("ns", "wc", "uid-1", 2, NEW_SPEC)
    api.ready_all()
    clock.now += 1
    nimbus.round()
    assert len(api.deleted) == deleted and "UpgradeResumed" not in api.reasons("wc")
