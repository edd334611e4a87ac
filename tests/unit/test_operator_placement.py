"""The Topology's `spec.worker.affinity` honoured by the operator's nimbus: pod (anti-)affinity
against the other topologies' workers and preferred node affinity, read from the spec and the
nodes' labels (pure values; the k8s tier checks it on real nodes)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from test_operator_kube_nimbus import SPEC, FakeApi, _make

from squall.models.cluster import WorkerSlot
from squall.models.v1alpha1 import Topology, WorkerSpec
from squall_operator import placement, pods

pytestmark = pytest.mark.unit

HOST = "kubernetes.io/hostname"


def _api() -> FakeApi:
    api = FakeApi()
    for node in api.nodes:
        node["metadata"]["labels"] = {HOST: node["metadata"]["name"]}
    return api


def _anti(topology: str, required: bool = True) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {pods.LABEL_TOPOLOGY: topology}}, "topologyKey": HOST}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def _nodes(state: Any, topo: str) -> list[str]:
    return sorted(s.node for s in set(state.assignments[topo].slots().values()))


def test_required_anti_affinity_keeps_workers_off_another_topologys_node() -> None:
    api = _api()
    api.nodes[0]["metadata"]["labels"]["pool"] = "db"
    nimbus, state, api, clock = _make(api=api)
    nimbus.register("ns", "db", "uid-1", 1, {**SPEC, "numWorkers": 1, "worker": {"nodeSelector": {"pool": "db"}}})
    nimbus.register("ns", "wc", "uid-2", 1, {**SPEC, "numWorkers": 3, "worker": {"affinity": _anti("db")}})
    nimbus.round()
    assert _nodes(state, "ns~db") == ["n1"]
    # three workers on n2 and n3 (two slots each); the even spreading alone would take n1's
    # free slot too
    assert _nodes(state, "ns~wc") == ["n2", "n2", "n3"]
    assert not [p for p in api.pods.values()
                if p["spec"]["nodeName"] == "n1" and p["metadata"]["labels"][pods.LABEL_TOPOLOGY] == "wc"]


def test_required_anti_affinity_on_its_own_workers_puts_one_per_node() -> None:
    nimbus, state, api, clock = _make(api=_api())
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "numWorkers": 4, "worker": {"affinity": _anti("wc")}})
    nimbus.round()
    nimbus.round()
    assert _nodes(state, "ns~wc") == ["n1", "n2", "n3"]
    # three nodes for four workers: the status says why the fourth has no slot
    st = api.statuses[("ns", "wc")]
    assert st["state"] == "Unschedulable"
    assert "3/4 workers placed" in st["message"] and "ruled out by its pod (anti-)affinity" in st["message"]


def test_preferred_node_affinity_fills_the_preferred_node_first() -> None:
    api = _api()
    api.nodes[2]["metadata"]["labels"]["disk"] = "ssd"
    nimbus, state, api, clock = _make(api=api)
    prefer = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 80, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}
    nimbus.register("ns", "wc", "uid-1", 1, {**SPEC, "worker": {"affinity": prefer}})
    nimbus.round()
    assert _nodes(state, "ns~wc") == ["n3", "n3"]


def test_placement_from_the_spec() -> None:
    worker = WorkerSpec.model_validate({
        "labels": {"team": "a"},
        "affinity": {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
                {"weight": 5, "preference": {"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}}]},
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 7, "podAffinityTerm": {"labelSelector": {"matchExpressions": [
                    {"key": "app", "operator": "NotIn", "values": ["x"]}]}, "topologyKey": "zone",
                    "namespaces": ["other"]}}]},
            **_anti("wc"),
        },
    })
    config = pods.WorkerPodConfig(image="i", zookeeper="zk:2181")
    p = placement.topology_placement("wc", "ns", config, worker, {"n1": {"disk": "ssd"}, "n2": {}, "n3": {}})
    assert p.node_weights == {"n1": 30, "n2": 5}
    assert p.namespace == "ns" and p.labels[pods.LABEL_TOPOLOGY] == "wc" and p.labels["team"] == "a"
    assert pods.LABEL_NODE not in p.labels and pods.LABEL_PORT not in p.labels
    assert [t.topology_key for t in p.required_anti_affinity] == [HOST] and p.selects(p.required_anti_affinity[0], p)
    (pref,) = p.preferred_affinity
    assert pref.weight == 7 and pref.namespaces == {"other"} and pref.topology_key == "zone"
    # what the pods get is what the spec says
    pod = pods.worker_pod("wc", "u", "ns", WorkerSlot("n1", 6700), config, worker)
    assert pod["spec"]["affinity"]["podAntiAffinity"] == _anti("wc")["podAntiAffinity"]
    assert pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][1] == {
        "weight": 5, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}}


@pytest.mark.parametrize("field", ["namespaceSelector", "matchLabelKeys", "mismatchLabelKeys"])
def test_unsupported_pod_affinity_fields_are_refused_by_name(field: str) -> None:
    term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": HOST,
            field: {} if field == "namespaceSelector" else ["pod-template-hash"]}
    spec = {**SPEC, "worker": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}}
    with pytest.raises(ValidationError) as err:
        Topology.model_validate({"apiVersion": "squall.io/v1alpha1", "kind": "Topology",
                                 "metadata": {"name": "wc"}, "spec": spec})
    assert f"{field} is not supported" in str(err.value)
    assert "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0" in str(err.value)


def test_invalid_affinity_terms_are_refused() -> None:
    for affinity in (
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}},
        {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "podAffinityTerm": {"topologyKey": HOST}}]}},
        {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOST, "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}]}},
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "preference": {}}]}},
    ):
        with pytest.raises(ValidationError):
            WorkerSpec.model_validate({"affinity": affinity})
