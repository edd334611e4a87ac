"""The operator's /metrics (squall_operator.metrics): reconcile rounds and their duration,
assignment changes, dead executors, topologies per phase, from KubeNimbus's rounds on fake time
with the in-memory state and fake API of test_operator_kube_nimbus, parsed with
prometheus_client's own parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_operator_kube_nimbus import SPEC, _beat_all, _make

from squall_operator.metrics import NimbusMetrics, exposition

pytestmark = pytest.mark.unit


def scrape(metrics: NimbusMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    status, ctype, body = exposition(metrics.registry, "text/plain")
    assert status == 200 and ctype.startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_rounds_assignments_dead_executors_and_phases() -> None:
    nimbus, state, api, clock = _make()
    m = scrape(nimbus.metrics)
    assert m["squall_operator_topologies"][(("phase", "Running"),)] == 0
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.run_once()
    api.ready_all()
    _beat_all(state, clock, "ns~wc")
    clock.now += 1
    nimbus.run_once()
    m = scrape(nimbus.metrics)
    assert m["squall_operator_reconcile_rounds_total"] == {(("outcome", "ok"),): 2}
    assert m["squall_operator_reconcile_round_seconds_count"] == {(): 2}
    assert m["squall_nimbus_assignment_changes_total"] == {(("topology", "ns~wc"),): 1}
    assert m.get("squall_nimbus_dead_executors_total", {}) == {}
    phases = {dict(k)["phase"]: v for k, v in m["squall_operator_topologies"].items()}
    assert phases["Running"] == 1 and sum(phases.values()) == 1

    # one worker stops heartbeating past the task timeout: its executors are dead and move
    lost = next(iter(state.assignments["ns~wc"].slots().values()))
    moved = [e for e, s in state.assignments["ns~wc"].slots().items() if s == lost]
    stale = state.beats["ns~wc"][lost]
    for _ in range(4):
        clock.now += 2
        _beat_all(state, clock, "ns~wc")
        state.beats["ns~wc"][lost] = stale  # unchanged since: nimbus sees it age
        nimbus.run_once()
    m = scrape(nimbus.metrics)
    assert m["squall_nimbus_assignment_changes_total"] == {(("topology", "ns~wc"),): 2}
    assert m["squall_nimbus_dead_executors_total"] == {(("topology", "ns~wc"),): len(moved)}

    # ZooKeeper away: the round is counted as such, nothing else changes
    state.ready = False
    nimbus.run_once()
    m = scrape(nimbus.metrics)
    assert m["squall_operator_reconcile_rounds_total"] == {(("outcome", "ok"),): 6,
                                                           (("outcome", "zookeeper_unreachable"),): 1}
    assert m["squall_operator_reconcile_round_seconds_count"] == {(): 7}
