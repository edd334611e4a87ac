"""Condition SpecChangeRefused on the Topology's status, beside the Event of the same name: True
with the reason while the spec asks for what the running topology cannot take (a stateful
component's task count), False once a later spec is applied. KubeNimbus on a fake API server
and a fake ZooKeeper state (the doubles of test_operator_kube_nimbus)."""

from __future__ import annotations

from typing import Any

import pytest
from test_operator_kube_nimbus import SPEC, _cond, _make, _status

pytestmark = pytest.mark.unit

STATEFUL: dict[str, Any] = {**SPEC, "bolts": [{**SPEC["bolts"][0], "stateful": True}]}  # type: ignore[index, dict-item]


def test_a_refused_spec_change_sets_the_condition_until_a_later_spec_is_applied() -> None:
    nimbus, state, api, _clock = _make()
    nimbus.register("ns", "wc", "uid-1", 1, STATEFUL)
    nimbus.round()
    assert not any(c["type"] == "SpecChangeRefused" for c in _status(api)["conditions"])
    more = {**STATEFUL, "bolts": [{**STATEFUL["bolts"][0], "numTasks": 8}]}
    nimbus.register("ns", "wc", "uid-1", 2, more)
    nimbus.round()
    cond = _cond(_status(api), "SpecChangeRefused")
    assert cond["status"] == "True" and cond["reason"] == "CannotBeCarried" and cond["observedGeneration"] == 2
    assert "b is stateful and its task count changed (4 -> 8)" in cond["message"], cond
    assert api.reasons("wc").count("SpecChangeRefused") == 1
    nimbus.round()  # still refused: the condition stays, no second Event
    assert _cond(_status(api), "SpecChangeRefused")["status"] == "True"
    assert api.reasons("wc").count("SpecChangeRefused") == 1
    assert state.storms["ns~wc"].topology["spec"]["bolts"][0].get("numTasks") == 4
    # the task count put back, and a live change beside it: applied, the condition turns False
    nimbus.register("ns", "wc", "uid-1", 3, {**STATEFUL, "maxSpoutPending": 7})
    nimbus.round()
    cond = _cond(_status(api), "SpecChangeRefused")
    assert cond["status"] == "False" and cond["reason"] == "SpecApplied" and cond["observedGeneration"] == 3
    assert state.storms["ns~wc"].topology["spec"]["maxSpoutPending"] == 7
