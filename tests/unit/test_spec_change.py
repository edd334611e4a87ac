"""What kind of change a new spec is for a running topology (squall.specchange.classify), on
plain specs: live, restart a component's executors, a graph upgrade, or refused, and why."""

from __future__ import annotations

import copy
from typing import Any

from squall.models.v1alpha1 import Topology, TopologySpec
from squall.specchange import Kind, SpecChange, classify, stored_after

SPEC: dict[str, Any] = {
    "numWorkers": 2,
    "maxSpoutPending": 500,
    "spouts": [{"name": "s", "class": "m:S"}],
    "bolts": [
        {"name": "a", "class": "m:A", "parallelism": 2, "inputs": [{"component": "s"}]},
        {"name": "b", "class": "m:B", "inputs": [{"component": "a", "grouping": "fields", "fields": ["w"]}],
         "config": {"topology.tick.tuple.freq.secs": 1}},
    ],
}


def spec(**changes: Any) -> TopologySpec:
    data = copy.deepcopy(SPEC)
    data.update(changes)
    return TopologySpec.model_validate(data)


def edited(fn: Any) -> TopologySpec:
    data = copy.deepcopy(SPEC)
    fn(data)
    return TopologySpec.model_validate(data)


def test_the_same_spec_and_changes_other_paths_carry_are_no_change() -> None:
    assert classify(spec(), spec()) == SpecChange()
    assert classify(spec(), spec()).kind is Kind.NONE
    # rebalance, activation and the roll's settings have their own paths
    other = edited(lambda d: (d.update(numWorkers=4, active=False, worker={"image": "img:2"}),
                              d["bolts"][0].update(parallelism=1)))
    assert classify(spec(), other).kind is Kind.NONE


def test_the_engines_own_settings_change_live() -> None:
    change = classify(spec(), spec(maxSpoutPending=20, messageTimeoutSecs=10, tickTupleFreqSecs=2))
    assert change.kind is Kind.LIVE and change.applies_in_place
    assert change.live == ("maxSpoutPending 500 -> 20", "messageTimeoutSecs 30 -> 10", "tickTupleFreqSecs unset -> 2")
    assert classify(spec(), spec(maxSpoutPending=None)).live == ("maxSpoutPending 500 -> unset",)
    # a bolt's own tick is read by the engine too
    tick = edited(lambda d: d["bolts"][1]["config"].update({"topology.tick.tuple.freq.secs": 0.5}))
    assert classify(spec(), tick) == SpecChange(live=("b topology.tick.tuple.freq.secs 1 -> 0.5",))


def test_a_components_config_restarts_that_components_executors_only() -> None:
    new = edited(lambda d: d["bolts"][0].update(config={"threshold": 3}))
    change = classify(spec(), new)
    assert change.kind is Kind.RESTART and change.applies_in_place
    assert change.restart == (("a", ("threshold",)),) and change.restarted == {"a"}
    assert change.describe() == "executors restarted: a (threshold)"


def test_topology_config_restarts_every_component_that_sees_the_key_change() -> None:
    change = classify(spec(), spec(config={"db.url": "x"}))
    assert change.restarted == {"s", "a", "b"}
    # a component whose own config sets the key sees no change
    change = classify(spec(), spec(config={"topology.tick.tuple.freq.secs": 5}))
    assert change.restarted == {"s", "a"}


def test_a_graph_change_needs_an_upgrade_and_says_what_changed() -> None:
    added = edited(lambda d: d["bolts"].append({"name": "c", "class": "m:C", "inputs": [{"component": "b"}]}))
    assert classify(spec(), added).upgrade == ("added c",)
    assert classify(added, spec()).upgrade == ("removed c",)
    grouping = edited(lambda d: d["bolts"][0]["inputs"][0].update(grouping="all"))
    change = classify(spec(), grouping)
    assert change.kind is Kind.UPGRADE and not change.applies_in_place
    assert change.upgrade == ("a: inputs changed",)
    cls = edited(lambda d: d["bolts"][0].update({"class": "m:A2"}))
    assert classify(spec(), cls).upgrade == ("a: class changed",)
    tasks = edited(lambda d: d["bolts"][0].update(numTasks=8))
    assert classify(spec(), tasks).upgrade == ("a: numTasks changed",)
    assert classify(spec(), spec(numAckers=3)).upgrade == ("numAckers unset -> 3",)
    # a class change with a config change is one upgrade, not also a restart
    both = edited(lambda d: d["bolts"][0].update({"class": "m:A2", "config": {"k": 1}}))
    assert classify(spec(), both).restart == ()


def test_keys_a_worker_reads_at_its_start_need_an_upgrade() -> None:
    change = classify(spec(), spec(config={"worker.heartbeat.frequency.secs": 2}))
    assert change.kind is Kind.UPGRADE
    assert change.upgrade == ("spec.config worker.heartbeat.frequency.secs (read by each worker at its start)",)
    assert change.restart == ()


def test_a_stateful_topology_restarts_nothing_in_place_and_a_stateful_task_count_is_refused() -> None:
    stateful = edited(lambda d: d["bolts"][0].update(stateful=True))
    conf = edited(lambda d: d["bolts"][0].update(stateful=True, config={"k": 1}))
    change = classify(stateful, conf)
    assert change.kind is Kind.UPGRADE and "restart only with a checkpoint" in change.upgrade[0]
    # live settings stay live
    live = edited(lambda d: d.update(maxSpoutPending=9) or d["bolts"][0].update(stateful=True))
    assert classify(stateful, live).kind is Kind.LIVE
    more = edited(lambda d: d["bolts"][0].update(stateful=True, numTasks=4))
    change = classify(stateful, more)
    assert change.kind is Kind.REFUSED
    assert change.refused == (("a is stateful and its task count changed (2 -> 4): its state is kept per task "
                               "and cannot be carried to another count"),)
    assert change.describe().startswith("refused: a is stateful")
    # a stateful component's parallelism is a rebalance (its tasks stay), not a refusal
    rebalanced = edited(lambda d: d["bolts"][0].update(stateful=True, parallelism=1))
    assert classify(stateful, rebalanced).kind is Kind.NONE


def test_a_stateful_graph_change_is_an_upgrade_unless_it_would_drop_a_state() -> None:
    """State is carried by component name and task index: a bolt added beside a stateful one, a
    class or a grouping changed, is an upgrade; a stateful component removed or made stateless
    would drop its committed state: refused, saying which and how to start without it."""
    stateful = edited(lambda d: d["bolts"][0].update(stateful=True))
    added = edited(lambda d: d["bolts"][0].update(stateful=True) or d["bolts"].append(
        {"name": "c", "class": "m:C", "inputs": [{"component": "a"}]}))
    assert classify(stateful, added).kind is Kind.UPGRADE and classify(stateful, added).upgrade == ("added c",)
    recast = edited(lambda d: d["bolts"][0].update(stateful=True, **{"class": "m:A2"}))
    assert classify(stateful, recast).kind is Kind.UPGRADE
    removed = edited(lambda d: d.update(bolts=[d["bolts"][1] | {"inputs": [{"component": "s"}]}]))
    change = classify(stateful, removed)
    assert change.kind is Kind.REFUSED
    assert change.refused == (("a is stateful and removed: its committed state would be dropped (kill the "
                               "topology and submit the new graph to start without it)"),)
    assert change.describe().startswith("refused: a is stateful and removed"), change.describe()
    stateless = classify(stateful, spec())
    assert stateless.refused == (("a is no longer stateful: its committed state would be dropped (kill the "
                                  "topology and submit the new graph to start without it)"),)
    # a stateless component removed from a stateful topology drops nothing
    both = edited(lambda d: d["bolts"][1].update(stateful=True))
    assert classify(both, edited(lambda d: d["bolts"][1].update(stateful=True, inputs=[{"component": "s"}])
                                 or d["bolts"].pop(0))).kind is Kind.UPGRADE


def test_the_stored_topology_keeps_what_other_paths_change() -> None:
    running = Topology.model_validate({"apiVersion": "squall.io/v1alpha1", "kind": "Topology",
                                       "metadata": {"name": "wc", "namespace": "ns"}, "spec": SPEC})
    asked = running.model_dump(mode="json", by_alias=True, exclude_none=True)
    asked["metadata"]["namespace"] = "other"
    asked["spec"].update(maxSpoutPending=9, numWorkers=5, active=False)
    asked["spec"]["bolts"][0].update(parallelism=1, config={"k": 1})
    got = stored_after(running, Topology.model_validate(asked))
    assert got["metadata"]["namespace"] == "ns"
    assert got["spec"]["maxSpoutPending"] == 9 and got["spec"]["numWorkers"] == 2 and got["spec"]["active"] is True
    assert got["spec"]["bolts"][0]["parallelism"] == 2 and got["spec"]["bolts"][0]["config"] == {"k": 1}


def test_a_spout_turned_bolt_is_an_upgrade() -> None:
    def swap(d: dict[str, Any]) -> None:
        d["bolts"].append({"name": "x", "class": "m:X", "inputs": [{"component": "s"}]})
    before = edited(swap)

    def to_spout(d: dict[str, Any]) -> None:
        d["spouts"].append({"name": "x", "class": "m:X"})
    after = edited(to_spout)
    assert classify(before, after).upgrade == ("x changed from a bolt to a spout",)
