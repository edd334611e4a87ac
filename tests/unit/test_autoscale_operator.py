"""spec.autoscale carried out by KubeNimbus's rounds, on fake time with an in-memory cluster state
and a fake Kubernetes API: the decision written into the spec with a JSON patch and an Event, the
rebalance that follows, status.autoscale, the way back in, and a numWorkers outside the bounds
written back clamped."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_operator_kube_nimbus import SPEC, Clock, FakeApi, FakeState, _make, _status

from squall.models.cluster import ExecutorStats, TopologyStatus, WorkerHeartbeat, WorkerSlot
from squall_operator.kube_api import ApiRejected
from squall_operator.kube_nimbus import KubeNimbus

pytestmark = pytest.mark.unit

AUTOSCALE = {"minWorkers": 1, "maxWorkers": 3, "target": 0.5, "scaleOutAfterSecs": 10,
             "scaleInAfterSecs": 20, "cooldownSecs": 15}


class PatchingApi(FakeApi):
    """FakeApi plus the Topology's spec, patched as the API server would (test, replace, add)."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: dict[str, dict[str, Any]] = {}
        self.patches: list[list[dict[str, Any]]] = []

    def patch_topology(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        doc = {"spec": copy.deepcopy(self.specs[name])}
        for op in ops:
            *parents, last = [int(p) if p.isdigit() else p for p in op["path"].strip("/").split("/")]
            node: Any = doc
            for p in parents:
                node = node[p]
            if op["op"] == "test":
                current = node.get(last) if isinstance(node, dict) else node[last]
                if current != op["value"]:
                    raise ApiRejected(f"the test of {op['path']} failed")
            else:
                node[last] = op["value"]
        self.specs[name] = doc["spec"]
        self.patches.append(ops)


class Load:
    """Heartbeats whose bolt executors ran `rate` tuples/s at `ms` each since the last call."""

    def __init__(self, state: FakeState, clock: Clock) -> None:
        self.state, self.clock = state, clock
        self.counts: dict[str, tuple[int, float, int]] = {}

    def beat(self, topo: str, rate: float, ms: float, secs: float = 5.0) -> None:
        a = self.state.assignments[topo]
        beats: dict[WorkerSlot, WorkerHeartbeat] = {}
        for ex, slot in a.executor_slots.items():
            s = WorkerSlot.from_key(slot)
            beat = beats.setdefault(s, WorkerHeartbeat(time_secs=self.clock.now, uptime_secs=1))
            comp = "b" if ex.split("-")[0] in {"2", "3", "4", "5"} else "s"
            executed, lat_sum, lat_n = self.counts.get(ex, (0, 0.0, 0))
            if comp == "b":
                executed, lat_sum, lat_n = executed + int(rate * secs), lat_sum + ms * rate * secs / 16, lat_n + int(rate * secs / 16)
            self.counts[ex] = (executed, lat_sum, lat_n)
            beat.executors[ex] = ExecutorStats(component=comp, executed=executed, latency_ms_mean=lat_sum / lat_n if lat_n else 0.0,
                                               latency_samples=lat_n)
        self.state.beats[topo] = beats


def _setup() -> tuple[KubeNimbus, FakeState, PatchingApi, Clock, Load]:
    api = PatchingApi()
    nimbus, state, api_, clock = _make(api=api)
    assert api_ is api
    spec = {**copy.deepcopy(SPEC), "autoscale": AUTOSCALE}
    api.specs["wc"] = spec
    nimbus.register("ns", "wc", "uid-1", 1, spec)
    nimbus.round()
    api.ready_all()
    return nimbus, state, api, clock, Load(state, clock)


def _watch(nimbus: KubeNimbus, api: PatchingApi, generation: int) -> None:
    """What the watch does after a patch: the handlers register the new spec."""
    nimbus.register("ns", "wc", "uid-1", generation, copy.deepcopy(api.specs["wc"]), status=_status(api))


def test_scale_out_through_the_spec_then_back_in() -> None:
    nimbus, state, api, clock, load = _setup()
    # bolt b (2 executors, 4 tasks) busy 0.8: 160 tuples/s at 5 ms; a first figure 5 s
    # after the first heartbeats, then 10 s above target
    for _ in range(4):
        load.beat("ns~wc", 160, 5.0)
        nimbus.round()
        clock.now += 5
    assert api.patches == [] and _status(api)["autoscale"]["value"] == 0.8
    load.beat("ns~wc", 160, 5.0)
    nimbus.round()
    assert api.patches == [[
        {"op": "test", "path": "/spec/numWorkers", "value": 2},
        {"op": "replace", "path": "/spec/numWorkers", "value": 3},
        {"op": "test", "path": "/spec/bolts/0/name", "value": "b"},
        {"op": "add", "path": "/spec/bolts/0/parallelism", "value": 3}]]
    event = next(m for n, r, m in api.events if r == "ScaledOut")
    assert event == "numWorkers 2 -> 3, b parallelism 2 -> 3: busy 0.80 (b) above target 0.5 for 10s"
    auto = _status(api)["autoscale"]
    assert auto["lastDecision"] == f"ScaledOut: {event}" and auto["signal"] == "busy" and auto["target"] == 0.5
    # the watch brings the patched spec; the next round rebalances to it (rebalanceWaitSecs 5)
    _watch(nimbus, api, 2)
    nimbus.round()
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    assert _status(api)["autoscale"]["message"].startswith("not judged")
    clock.now += 6
    nimbus.round()
    base = state.storms["ns~wc"]
    assert base.status is TopologyStatus.ACTIVE and base.num_workers == 3 and base.component_executors["b"] == 3
    api.ready_all()
    # the load is gone: in after 20 s below 0.25 (0.0 x 3/2 stays under target), once cooled down
    load.counts.clear()
    for _ in range(12):
        load.beat("ns~wc", 0, 8.0)
        nimbus.round()
        clock.now += 5
        if len(api.patches) > 1:
            break
    assert api.patches[1][:2] == [{"op": "test", "path": "/spec/numWorkers", "value": 3},
                                  {"op": "replace", "path": "/spec/numWorkers", "value": 2}]
    assert api.specs["wc"]["bolts"][0]["parallelism"] == 2
    assert [r for _, r, _ in api.events if r in ("ScaledOut", "ScaledIn")] == ["ScaledOut", "ScaledIn"]


def test_a_user_edit_between_decision_and_patch_wins() -> None:
    nimbus, _state, api, clock, load = _setup()
    api.specs["wc"]["numWorkers"] = 1  # someone changed it; the operator has not seen it yet
    for _ in range(7):
        load.beat("ns~wc", 160, 5.0)
        nimbus.round()
        clock.now += 5
    assert api.patches == [] and "ScaledOut" not in api.reasons("wc")
    assert api.specs["wc"]["numWorkers"] == 1


def test_num_workers_outside_the_bounds_is_clamped_with_a_warning() -> None:
    nimbus, state, api, clock, load = _setup()
    load.beat("ns~wc", 0, 1.0)
    nimbus.round()
    api.specs["wc"]["numWorkers"] = 7  # kubectl scale --replicas=7
    _watch(nimbus, api, 2)
    nimbus.round()
    assert api.specs["wc"]["numWorkers"] == 3
    assert ("wc", "AutoscaleClamped", ("numWorkers 7 -> 3: spec.autoscale keeps it within [1, 3] "
            "(minWorkers, maxWorkers)")) in api.events
    # the rebalance goes to the clamped count, not to 7
    assert state.storms["ns~wc"].status is TopologyStatus.REBALANCING
    clock.now += 6
    nimbus.round()
    assert state.storms["ns~wc"].num_workers == 3
    nimbus.round()
    assert api.reasons("wc").count("AutoscaleClamped") == 1


def test_without_autoscale_no_status_block_and_no_patch() -> None:
    api = PatchingApi()
    nimbus, _state, _, _clock = _make(api=api)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    assert "autoscale" not in _status(api) and api.patches == []


def test_the_lag_signal_reads_the_spouts_lag_from_the_heartbeats() -> None:
    """signal lag: each spout executor's lag in the heartbeats, summed per spout, against a
    target in records; the bolt that gets executors is the busy one."""
    api = PatchingApi()
    nimbus, state, _, clock = _make(api=api)
    spec = {**copy.deepcopy(SPEC), "autoscale": {**AUTOSCALE, "signal": "lag", "target": 1000}}
    api.specs["wc"] = spec
    nimbus.register("ns", "wc", "uid-1", 1, spec)
    nimbus.round()
    api.ready_all()
    load = Load(state, clock)
    spouts = 0

    def beat(lag: int | None) -> None:
        nonlocal spouts
        load.beat("ns~wc", 160, 5.0)
        spouts = 0
        for b in state.beats["ns~wc"].values():
            for key, s in list(b.executors.items()):
                if s.component == "s":
                    b.executors[key] = s.model_copy(update={"lag": lag})
                    spouts += 1

    beat(None)  # watermarks not fetched yet: no figure
    nimbus.round()
    assert _status(api)["autoscale"]["message"] == "not judged yet: no lag figure from the heartbeats"
    for _ in range(3):
        clock.now += 5
        beat(200)
        nimbus.round()
    assert spouts == 2 and api.patches == [] and _status(api)["autoscale"]["value"] == 400
    assert _status(api)["autoscale"]["message"].startswith("lag 400 (s) within the band")
    event = None
    for i in range(4):
        clock.now += 5
        beat(1500 + 100 * i)  # a backlog that grows: the sum of the two spout executors'
        nimbus.round()
        event = next((m for n, r, m in api.events if r == "ScaledOut"), None)
        if event:
            break
    assert event == "numWorkers 2 -> 3, b parallelism 2 -> 3: lag 3400 (s) above target 1000 for 10s", event
    assert api.specs["wc"]["numWorkers"] == 3
