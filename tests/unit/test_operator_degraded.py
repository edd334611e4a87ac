"""Health you can see: the Degraded verdict on plain figures and an injected
time, its Events, the workers' PodDisruptionBudget and the operator's liveness."""

from __future__ import annotations

import http.client
from typing import Any

import pytest
from pydantic import ValidationError

from squall.models.v1alpha1 import HealthSpec, Topology
from squall import specchange
from squall_operator import degraded, pods
from squall_operator.degraded import Figures, Settings, assess, transition_event
from squall_operator.health import Health, liveness

pytestmark = pytest.mark.unit

S = Settings(stalled_secs=60, failed_fraction=0.5, window_secs=60)


def _run(steps: list[tuple[float, Figures]], settings: Settings = S) -> list[degraded.Verdict]:
    """Each step's verdict, each judged on the sample the previous one kept."""
    out: list[degraded.Verdict] = []
    sample: dict[str, Any] | None = None
    for at, figures in steps:
        verdict = assess(sample, figures, at, settings)
        out.append(verdict)
        sample = verdict.sample
    return out


def busy(acked: int, failed: int = 0, pending: int = 100) -> Figures:
    return Figures(active=True, acked=acked, failed=failed, pending=pending)


def test_acks_moving_is_healthy() -> None:
    verdicts = _run([(t, busy(acked=1000 * t)) for t in range(0, 300, 2)])
    assert not any(v.degraded for v in verdicts)
    assert verdicts[-1].reason == "Healthy"


def test_pending_without_acks_for_stalled_secs_is_degraded_and_clears_when_acks_move() -> None:
    steps = [(0.0, busy(500)), (2.0, busy(600)), *((2.0 + t, busy(600)) for t in range(2, 80, 2))]
    verdicts = _run(steps)
    # since 2.0 nothing acked: at 61.0 (59 s) not yet, at 62.0 (60 s) Degraded
    at = {s[0]: v for s, v in zip(steps, verdicts, strict=True)}
    assert not at[60.0].degraded
    assert at[62.0].degraded and at[62.0].reason == "AcksStalled"
    assert at[62.0].message == ("100 tuples pending at the spouts and nothing acked for 60s "
                                "(spec.health.stalledSecs: 60)")
    sample = verdicts[-1].sample
    back = assess(sample, busy(601), 90.0, S)
    assert not back.degraded and back.reason == "Healthy"


def test_nothing_pending_is_not_stalled_and_leaves_the_sample_unchanged() -> None:
    idle = Figures(active=True, acked=42, failed=0, pending=0)
    first = assess(None, idle, 0.0, S)
    later = assess(first.sample, idle, 500.0, S)
    assert not later.degraded
    # idle: the stall part of the sample stays put (no status write for it)
    assert "stalledSince" not in later.sample and later.sample["acked"] == 42


def test_a_restart_that_resets_the_counts_restarts_the_stall_clock_and_the_window() -> None:
    first = assess(None, busy(5000, 10), 0.0, S)
    mid = assess(first.sample, busy(5000, 10), 50.0, S)
    # a worker restarted: its counts start again at 0
    reset = assess(mid.sample, busy(0, 0), 55.0, S)
    assert reset.sample["stalledSince"] == 55.0 and reset.sample["windowStart"] == 55.0
    assert not assess(reset.sample, busy(0, 0), 110.0, S).degraded
    assert assess(reset.sample, busy(0, 0), 115.0, S).degraded


def test_failed_fraction_over_a_window() -> None:
    # 100 trees a second, 40% failing: healthy; 60% failing: degraded once the window ends
    steps = [(float(t), busy(acked=60 * t, failed=40 * t)) for t in range(0, 61, 5)]
    assert not any(v.degraded for v in _run(steps))
    steps = [(float(t), busy(acked=40 * t, failed=60 * t)) for t in range(0, 61, 5)]
    verdicts = _run(steps)
    assert not any(v.degraded for v in verdicts[:-1])
    last = verdicts[-1]
    assert last.degraded and last.reason == "TuplesFailing"
    assert last.message == ("60% of the tuple trees failed or timed out in the last 60s window "
                            "(3600 of 6000; spec.health.failedFraction: 0.5)")
    # the verdict holds through the next window, which then decides again
    held = assess(last.sample, busy(40 * 70, 60 * 70), 70.0, S)
    assert held.degraded
    better = assess(held.sample, busy(40 * 70 + 5000, 60 * 70 + 10), 120.0, S)
    assert not better.degraded


def test_exactly_the_fraction_is_degraded_and_too_few_trees_are_not_judged() -> None:
    half = _run([(0.0, busy(0, 0)), (60.0, busy(50, 50))])
    assert half[-1].degraded
    # nothing pending (not stalled): only the fraction judges
    few = _run([(0.0, busy(0, 0, 0)), (60.0, busy(0, degraded.MIN_TREES - 1, 0))])
    assert not few[-1].degraded
    enough = _run([(0.0, busy(0, 0, 0)), (60.0, busy(0, degraded.MIN_TREES, 0))])
    assert enough[-1].degraded and enough[-1].reason == "TuplesFailing"


def test_stalled_and_failing_say_both() -> None:
    verdicts = _run([(0.0, busy(0, 0)), (60.0, busy(0, 500))])
    assert verdicts[-1].reason == "AcksStalled"
    assert "nothing acked for 60s" in verdicts[-1].message and "100% of the tuple trees" in verdicts[-1].message


def test_inactive_spouts_are_not_judged_and_start_afresh() -> None:
    stalled = _run([(0.0, busy(7)), (100.0, busy(7))])[-1]
    assert stalled.degraded
    off = assess(stalled.sample, Figures(active=False, acked=7, failed=0, pending=100), 101.0, S)
    assert not off.degraded and off.reason == "SpoutsInactive" and off.sample == {}
    again = assess(off.sample, busy(7), 102.0, S)
    assert not again.degraded and again.sample["stalledSince"] == 102.0


def test_garbage_in_the_kept_sample_starts_afresh() -> None:
    for junk in ({"stalledSince": "soon", "acked": "x"}, {"windowStart": None, "windowAcked": -3},
                 {"windowAcked": True, "windowFailed": 1.5, "lastTrees": "many"}):
        verdict = assess(junk, busy(10, 0), 1000.0, S)
        assert not verdict.degraded and verdict.sample["windowStart"] == 1000.0


def test_settings_from_the_spec() -> None:
    assert Settings.of(None) == Settings(60.0, 0.5, 60.0)
    spec = HealthSpec.model_validate({"stalledSecs": 5, "failedFraction": 0.2, "windowSecs": 10})
    assert Settings.of(spec) == Settings(5.0, 0.2, 10.0)
    for bad in ({"stalledSecs": 0}, {"failedFraction": 1.5}, {"failedFraction": 0}, {"windowSecs": -1},
                {"stalledSecs": "60"}, {"other": 1}):
        with pytest.raises(ValidationError):
            HealthSpec.model_validate(bad)


def test_transition_events_once_per_change() -> None:
    def conds(status: str | None, message: str = "m") -> list[dict[str, Any]]:
        return [] if status is None else [{"type": "Degraded", "status": status, "message": message}]

    assert transition_event(conds(None), conds("True", "why")) == ("Warning", "Degraded", "why")
    assert transition_event(conds("False"), conds("True", "why")) == ("Warning", "Degraded", "why")
    assert transition_event(conds("True"), conds("True", "other")) is None
    assert transition_event(conds("True"), conds("False", "ok")) == ("Normal", "Recovered", "ok")
    assert transition_event(conds("False"), conds("False")) is None
    assert transition_event(conds(None), conds("False")) is None


def test_health_is_live_not_a_spec_change() -> None:
    doc = {"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
           "spec": {"spouts": [{"name": "s", "class": "m:S"}]}}
    plain = Topology.model_validate(doc)
    tuned = Topology.model_validate({**doc, "spec": {**doc["spec"], "health": {"stalledSecs": 5}}})
    assert specchange.classify(plain.spec, tuned.spec).kind is specchange.Kind.NONE


# --- the PodDisruptionBudget --------------------------------------------------------------------


def test_disruption_budget_manifest() -> None:
    body = pods.disruption_budget("wordcount", "uid-9", "team-a", 1)
    selector = {"app.kubernetes.io/name": "squall-worker", "squall.io/topology": "wordcount"}
    assert body == {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "wordcount-workers",
            "namespace": "team-a",
            "labels": {**selector, "app.kubernetes.io/managed-by": "squall-operator"},
            "ownerReferences": [{"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "name": "wordcount",
                                 "uid": "uid-9", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }
    # the selector is the worker pods' own (and the scale subresource's)
    assert body["spec"]["selector"]["matchLabels"] == pods.worker_selector("wordcount")
    assert pods.disruption_budget("w", "u", "n", 3)["spec"]["maxUnavailable"] == 3
    # a name at the limit still makes a DNS label
    long = pods.disruption_budget_name("t" * 63)
    assert len(long) <= 63 and long != pods.disruption_budget_name("t" * 62)


# --- the operator's liveness ----------------------------------------------------------------------


def test_liveness_verdict() -> None:
    assert liveness(1000.0, None, 120) == (True, "ok (no reconcile loop: not the leader yet)")
    assert liveness(1000.0, 900.0, 120) == (True, "ok")
    assert liveness(1000.0, 880.0, 120) == (True, "ok")
    ok, why = liveness(1000.0, 879.0, 120)
    assert not ok and why == "the reconcile loop has not begun a round for 121s (limit 120s): a round hangs"


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_healthz_fails_when_the_loop_stops_turning() -> None:
    from squall_operator.operator_main import serve_health

    ticks = [0.0]
    h = Health("127.0.0.1:1", clock=lambda: ticks[0], loop_limit=30)
    server = serve_health("127.0.0.1:0", h)
    try:
        port = server.server_address[1]
        assert _get(port, "/healthz")[0] == 200  # no loop yet
        h.loop_turned()
        ticks[0] = 30.0
        assert _get(port, "/healthz") == (200, "ok\n")
        ticks[0] = 45.0
        code, body = _get(port, "/healthz")
        assert code == 503 and "has not begun a round for 45s" in body
        h.loop_turned()
        assert _get(port, "/healthz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_operator_arguments_refuse_bad_budget_and_liveness() -> None:
    from squall_operator.operator_main import config_from_args, parser

    assert config_from_args(parser().parse_args(["--zookeeper=zk:1"])).disruption_budget == 1
    with pytest.raises(SystemExit, match="--worker-disruption-budget must be 0 or more, got -1"):
        config_from_args(parser().parse_args(["--zookeeper=zk:1", "--worker-disruption-budget=-1"]))
    with pytest.raises(SystemExit, match=r"--liveness-timeout-secs \(0\) must be more than --monitor-freq-secs \(2\)"):
        config_from_args(parser().parse_args(["--zookeeper=zk:1", "--liveness-timeout-secs=0"]))
    with pytest.raises(SystemExit, match=r"--liveness-timeout-secs \(30\) must be more than --monitor-freq-secs \(60\)"):
        config_from_args(parser().parse_args(["--zookeeper=zk:1", "--liveness-timeout-secs=30",
                                              "--monitor-freq-secs=60"]))
