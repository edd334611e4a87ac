"""The operator's reconcile decisions (squall_operator.reconcile.decide) driven with plain values:
a resource and a snapshot in, intents out; nothing is called, read or written."""

from __future__ import annotations

import copy
from typing import Any

from squall.models.cluster import StormBase, TopologyStatus
from squall.validation import parse_topology
from squall_operator import roll as rolls
from squall_operator.reconcile import (
    Activate,
    Deactivate,
    Event,
    Kill,
    Rebalance,
    Record,
    Snapshot,
    Submit,
    Teardown,
    Update,
    decide,
    decide_kill,
    needs_pods,
    storm_key,
)
from squall_operator.resources import Resource, topology_resource

SPEC: dict[str, Any] = {
    "numWorkers": 2,
    "rebalanceWaitSecs": 5,
    "killWaitSecs": 7,
    "spouts": [{"name": "s", "class": "m:S"}],
    "bolts": [{"name": "b", "class": "m:B", "parallelism": 2, "numTasks": 4, "inputs": [{"component": "s"}]}],
}


def resource(spec: dict[str, Any] | None = None, generation: int = 1, **kw: Any) -> Resource:
    """A resource as the shell hands it to decide: validated, its topology parsed."""
    res = Resource("ns", "wc", "uid-1", generation, copy.deepcopy(spec or SPEC), **kw)
    res.topology = parse_topology(topology_resource(res))
    return res


def stored(res: Resource, status: TopologyStatus = TopologyStatus.ACTIVE, spec: dict[str, Any] | None = None,
           uid: str | None = None, namespace: str = "ns") -> StormBase:
    """The topology stored under res's name, as submitted from `spec` (res's own by default)."""
    body = topology_resource(Resource(namespace, res.name, uid or res.uid, 1, copy.deepcopy(spec or SPEC)))
    topology = parse_topology(body).spec
    return StormBase(name=res.name, status=status, launch_time_secs=0.0, num_workers=topology.num_workers,
                     component_executors={c.name: c.parallelism for c in topology.components}, topology=body)


def kinds(intents: list[Any]) -> list[type]:
    return [type(i) for i in intents if not isinstance(i, Record)]


def test_nothing_stored_submits_the_spec_then_records_it_observed_and_says_so() -> None:
    res = resource(generation=3)
    intents = decide(res, Snapshot(None))
    assert intents == [
        Record({"conflict": None, "owned": False}),
        Submit(res.topology),  # type: ignore[arg-type]
        Record({"owned": True, "observed_generation": 3}),
        Event("Normal", "Submitted", "submitted: 2 components, 2 workers"),
    ]


def test_an_inactive_spec_is_submitted_with_its_spouts_inactive() -> None:
    res = resource({**SPEC, "active": False})
    assert decide(res, Snapshot(None))[-1] == Event("Normal", "Submitted",
                                                    "submitted: 2 components, 2 workers, spouts inactive")


def test_an_invalid_spec_is_observed_and_nothing_is_done() -> None:
    res = resource(generation=2)
    res.problem, res.topology = "bolts[0].inputs: no component 'x'", None
    assert decide(res, Snapshot(None)) == [Record({"conflict": None, "owned": False}),
                                           Record({"observed_generation": 2})]


def test_a_key_stored_for_another_resource_is_a_conflict_and_nothing_else() -> None:
    res = resource()
    other = stored(res, uid="uid-other")
    assert decide(res, Snapshot(other)) == [Record({
        "conflict": "a topology named 'wc' of another resource (uid uid-other) still runs in namespace 'ns': "
                    "it is killed once the operator sees it has no resource",
        "owned": False})]
    killed = stored(res, TopologyStatus.KILLED, uid="uid-other")
    (record,) = decide(res, Snapshot(killed))
    assert isinstance(record, Record) and "waiting for the previous topology" in record.fields["conflict"]


def test_the_key_is_namespaced_unless_an_older_operator_stored_the_topology_for_this_resource() -> None:
    res = resource()
    assert storm_key(res, None) == "ns~wc"
    # stored under the bare name by an operator older than namespaced keys: kept
    assert storm_key(res, stored(res)) == "wc"
    assert storm_key(res, stored(res, TopologyStatus.KILLED)) == "wc"  # its kill goes on under it
    # stored for another resource: another namespace's, or this name's before it was re-created
    assert storm_key(res, stored(res, uid="uid-other", namespace="team-b")) == "ns~wc"
    assert storm_key(res, stored(res, uid="uid-other")) == "ns~wc"
    # a stored topology that recorded no uid (older still) goes by its namespace
    legacy = stored(res)
    del legacy.topology["metadata"]["uid"]
    assert storm_key(res, legacy) == "wc"
    legacy.topology["metadata"]["namespace"] = "team-b"
    assert storm_key(res, legacy) == "ns~wc"


def test_an_unchanged_running_spec_only_records_it_observed() -> None:
    res = resource(generation=4)
    assert decide(res, Snapshot(stored(res))) == [Record({"conflict": None, "owned": True}),
                                                  Record({"observed_generation": 4})]


def test_a_parallelism_change_rebalances_with_the_topologys_wait() -> None:
    spec = copy.deepcopy(SPEC)
    spec["bolts"][0]["parallelism"] = 3
    res = resource(spec, generation=2)
    intents = decide(res, Snapshot(stored(res)))
    assert Rebalance(None, {"b": 3}, 5.0) in intents
    event = next(i for i in intents if isinstance(i, Event))
    assert event.reason == "RebalanceRequested" and "b parallelism 2 -> 3" in event.message
    assert "(rebalanceWaitSecs)" in event.message
    assert intents[-1] == Record({"observed_generation": 2})


def test_a_rebalance_wait_asked_for_this_generation_wins_and_one_for_another_does_not() -> None:
    spec = {**SPEC, "numWorkers": 4}
    res = resource(spec, generation=2, rebalance_wait=(2, 1.5))
    intents = decide(res, Snapshot(stored(res)))
    assert Rebalance(4, None, 1.5) in intents
    assert any(isinstance(i, Event) and "squall.io/rebalance-wait-secs" in i.message for i in intents)
    res.rebalance_wait = (1, 1.5)
    assert Rebalance(4, None, 5.0) in decide(res, Snapshot(stored(res)))


def test_a_rejected_rebalance_is_not_asked_again_for_the_same_generation() -> None:
    res = resource({**SPEC, "numWorkers": 4}, generation=2, rejected_generation=2)
    assert kinds(decide(res, Snapshot(stored(res)))) == []


def test_nothing_is_decided_while_the_topology_is_killed_or_rebalancing() -> None:
    res = resource({**SPEC, "numWorkers": 4})
    for status in (TopologyStatus.KILLED, TopologyStatus.REBALANCING):
        assert decide(res, Snapshot(stored(res, status))) == [Record({"conflict": None, "owned": True})]


def test_active_follows_the_spec_but_activation_waits_for_a_roll() -> None:
    res = resource({**SPEC, "active": False})
    assert kinds(decide(res, Snapshot(stored(res, TopologyStatus.ACTIVE)))) == [Deactivate, Event]
    res = resource()
    assert kinds(decide(res, Snapshot(stored(res, TopologyStatus.INACTIVE)))) == [Activate, Event]
    res.roll = rolls.Roll(rolls.DRAINING, 10.0, "img:2", ("img:1",))
    assert kinds(decide(res, Snapshot(stored(res, TopologyStatus.INACTIVE)))) == []


def test_a_config_change_is_applied_in_place_and_said_so() -> None:
    res = resource({**SPEC, "messageTimeoutSecs": 99}, generation=5)
    base = stored(res, spec=SPEC)
    intents = decide(res, Snapshot(base))
    assert Update(res.topology) in intents  # type: ignore[arg-type]
    assert [i for i in intents if isinstance(i, Event)] == [
        Event("Normal", "ConfigUpdated", "live: messageTimeoutSecs 30 -> 99")]
    # once stored, nothing more to do
    assert kinds(decide(res, Snapshot(stored(res, spec=res.spec)))) == []
    # a config change and a rebalance in one generation: the update first
    bolts = [{**SPEC["bolts"][0], "parallelism": 3, "config": {"k": 1}}]
    res = resource({**SPEC, "bolts": bolts}, generation=6)
    assert kinds(decide(res, Snapshot(base))) == [Update, Event, Rebalance, Event]


def test_a_graph_change_is_an_upgrade_and_the_rest_of_the_spec_waits_for_it() -> None:
    # a class changed and a parallelism too: the upgrade first (nimbus says Upgrading, Upgraded),
    # the rebalance once it is done
    bolts = [{**SPEC["bolts"][0], "class": "m:B2", "parallelism": 3}]
    res = resource({**SPEC, "bolts": bolts}, generation=5)
    intents = decide(res, Snapshot(stored(res, spec=SPEC)))
    assert intents == [Record({"conflict": None, "owned": True}), Update(res.topology),  # type: ignore[arg-type]
                       Record({"observed_generation": 5})]
    # while it drains (REBALANCING) nothing more is decided
    assert decide(res, Snapshot(stored(res, TopologyStatus.REBALANCING, spec=SPEC))) == [
        Record({"conflict": None, "owned": True})]


def test_a_graph_change_of_state_in_memory_is_refused_once_per_generation_and_says_why() -> None:
    """A stateful topology's graph upgrade carries its state in Redis (tests/unit/test_upgrade.py);
    the memory provider's state dies with the workers the upgrade replaces: refused."""
    stateful = {**SPEC, "bolts": [{**SPEC["bolts"][0], "stateful": True}]}
    bolts = [{**stateful["bolts"][0], "class": "m:B2"}]
    res = resource({**stateful, "bolts": bolts}, generation=5)
    base = stored(res, spec=stateful)
    intents = decide(res, Snapshot(base))
    assert Record({"ignored_generation": 5}) in intents and not any(isinstance(i, Update) for i in intents)
    events = [i for i in intents if isinstance(i, Event)]
    assert [e.reason for e in events] == ["SpecChangeRefused"]
    assert events[0].message.startswith("needs an upgrade (drain and resubmit): b: class changed; refused: b keeps "
                                        "its state in the memory state provider"), events[0].message
    res.ignored_generation = 5
    assert not any(isinstance(i, Event) for i in decide(res, Snapshot(base)))


def test_a_refused_graph_change_still_rebalances_and_the_event_says_what_applies() -> None:
    """What a rebalance carries (parallelism, numWorkers) is not part of the refused graph: it
    applies, and the refusal's message says so instead of 'keeps running its stored spec'."""
    stateful = {**SPEC, "bolts": [{**SPEC["bolts"][0], "stateful": True}]}
    bolts = [{**stateful["bolts"][0], "class": "m:B2", "parallelism": 3}]
    res = resource({**stateful, "bolts": bolts}, generation=6)
    intents = decide(res, Snapshot(stored(res, spec=stateful)))
    assert not any(isinstance(i, Update) for i in intents)
    (refusal,) = [i for i in intents if isinstance(i, Event) and i.reason == "SpecChangeRefused"]
    assert "keeps running its stored graph and config, while numWorkers, parallelism and active still apply" \
        in refusal.message, refusal.message
    (rebalance,) = [i for i in intents if isinstance(i, Rebalance)]
    assert rebalance.executors == {"b": 3} and rebalance.workers is None


def test_a_deleted_resource_kills_its_topology_with_the_asked_or_the_topologys_wait() -> None:
    res = resource(deleting=True)
    intents = decide(res, Snapshot(stored(res)))
    assert intents[:3] == [Record({"conflict": None}), Record({"owned": True}), Kill(7.0)]
    assert isinstance(intents[3], Event) and "(killWaitSecs)" in intents[3].message
    res.kill_wait = 0.5
    assert Kill(0.5) in decide_kill(res, Snapshot(stored(res)))
    # already being killed: wait for nimbus to remove it
    assert decide_kill(res, Snapshot(stored(res, TopologyStatus.KILLED))) == [Record({"owned": True})]


def test_a_deleted_resource_is_removed_once_its_topology_and_its_pods_are_gone() -> None:
    res = resource(deleting=True)
    assert not needs_pods(res, stored(res)) and needs_pods(res, None)
    assert decide_kill(res, Snapshot(None, pods_left=True)) == [Record({"owned": False})]
    assert decide_kill(res, Snapshot(None)) == [
        Record({"owned": False}), Teardown(),
        Event("Normal", "Killed", "worker pods and ZooKeeper state removed"), Record({"removed": True})]
    # another resource's topology under the name is left alone
    other = stored(res, uid="uid-other")
    assert decide_kill(res, Snapshot(other))[1:] == [
        Event("Normal", "Killed", "worker pods and ZooKeeper state removed"), Record({"removed": True})]
    res.removed = True
    assert decide_kill(res, Snapshot(None)) == [Record({"owned": False})]
