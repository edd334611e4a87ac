"""Topology keys (squall.topology_keys): the local cluster's bare names, the operator's
NAMESPACE~NAME, and back."""

from __future__ import annotations

import pytest

from squall.models.v1alpha1 import DNS_LABEL
from squall.topology_keys import (
    KEY_CONF,
    KEY_SEPARATOR,
    conf_scope,
    not_found,
    split_topology_key,
    topic_safe,
    topology_key,
)

pytestmark = pytest.mark.unit


def test_a_namespaced_key_and_its_parts() -> None:
    assert topology_key("wordcount", "team-a") == "team-a~wordcount"
    assert split_topology_key("team-a~wordcount") == ("team-a", "wordcount")


def test_the_local_cluster_keeps_bare_names() -> None:
    assert topology_key("wordcount") == "wordcount"
    assert split_topology_key("wordcount") == (None, "wordcount")


def test_the_separator_is_in_no_name_so_keys_never_collide() -> None:
    import re

    # names and namespaces are DNS labels: no "~", so "a~b-c" and "a-b~c" stay apart
    assert re.fullmatch(DNS_LABEL, KEY_SEPARATOR) is None and KEY_SEPARATOR not in "abcxyz0123456789-."
    assert topology_key("b-c", "a") != topology_key("c", "a-b")


@pytest.mark.parametrize(("name", "namespace"), [("", "ns"), ("wc", ""), ("w~c", "ns"), ("wc", "n~s")])
def test_a_part_that_cannot_make_a_key_is_refused_naming_it(name: str, namespace: str) -> None:
    with pytest.raises(ValueError, match="invalid namespace/name for a topology key"):
        topology_key(name, namespace)


def test_a_bare_name_where_keys_are_namespaced_is_refused_naming_the_namespaces() -> None:
    keys = ["team-b~wordcount", "team-a~wordcount", "team-a~other", "wc"]
    assert not_found("wordcount", keys) == (
        "no topology is keyed 'wordcount'; one named so runs in namespaces team-a, team-b: name it "
        "NAMESPACE~wordcount (here: team-a~wordcount, team-b~wordcount)")
    assert not_found("other", keys).startswith("no topology is keyed 'other'; one named so runs in namespace team-a:")
    # nothing of that name anywhere, or a bare key (the local cluster): the plain answer
    assert not_found("nosuch", keys) == "no topology named 'nosuch'"


def test_state_and_kafka_clients_are_named_by_the_key_not_the_name() -> None:
    # what the worker's config carries (squall.worker.hotupdate.topology_conf) decides it
    assert conf_scope({KEY_CONF: "team-a~wc", "topology.name": "wc"}, "id") == "team-a~wc"
    assert conf_scope({"topology.name": "wc"}, "id") == "wc"  # a component opened outside a worker
    assert conf_scope({}, "id") == "id"
    # a Kafka topic name takes [A-Za-z0-9._-]: '_' is in no DNS label, so keys stay apart
    assert topic_safe("team-a~wc") == "team-a_wc" and topic_safe("wc") == "wc"
    assert topic_safe(topology_key("b-c", "a")) != topic_safe(topology_key("c", "a-b"))


def test_the_worker_config_carries_the_key_and_a_user_cannot_override_it() -> None:
    from squall.models.v1alpha1 import Topology
    from squall.worker.hotupdate import topology_conf

    topo = Topology.model_validate({
        "apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": "wc"},
        "spec": {"config": {KEY_CONF: "elsewhere"},
                 "spouts": [{"name": "s", "class": "m:S"}], "bolts": []}})
    assert topology_conf(topo, 0.0, key="team-a~wc")[KEY_CONF] == "team-a~wc"
    assert topology_conf(topo, 0.0)[KEY_CONF] == "wc"  # the local cluster: the name
