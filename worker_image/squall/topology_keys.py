"""Topology keys: what a topology is stored under in ZooKeeper (the <topo> of squall.state's
layout) and named by in its workers' arguments, metrics and state.

On the local cluster a topology's key is its name; on Kubernetes its namespace and name,
NAMESPACE~NAME, so two namespaces may each run a topology of one name. "~" is in no DNS label
(what metadata.name and namespaces are), so no two (namespace, name) pairs share a key, and it
needs no escaping in a ZooKeeper node, a URL path, a file name or a Prometheus label. An operator
older than namespaced keys stored its topologies under the bare name; the operator keeps those
keys (squall_operator.reconcile.storm_key; docs/design.md, "Topology keys").

A key is a `TopologyKey` (a NewType of str): the cluster state's methods take one, so mypy
catches a topology looked up under its bare name where keys are namespaced (the mix-up that
once made seven Kubernetes tests read nothing). A key is made by `topology_key`, or cast from
text (`TopologyKey(text)`) only where one arrives: a ZooKeeper node's name (squall.state), a
worker's `--topology` argument, a CLI argument or a URL path.

Pure: the operator's reconcile decisions use it without a ZooKeeper client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NewType

# NAMESPACE~NAME, or a bare name (the local cluster, and topologies an older operator stored)
TopologyKey = NewType("TopologyKey", str)

KEY_SEPARATOR = "~"
# the topology's key in the config every component gets (squall.worker.hotupdate.topology_conf)
KEY_CONF = "squall.topology.key"


def topology_key(name: str, namespace: str | None = None) -> TopologyKey:
    """The key of topology `name` of `namespace` (None: the local cluster, the bare name)."""
    if namespace is None:
        return TopologyKey(name)
    if not namespace or not name or KEY_SEPARATOR in namespace or KEY_SEPARATOR in name:
        raise ValueError(f"invalid namespace/name for a topology key: {namespace!r}/{name!r}")
    return TopologyKey(f"{namespace}{KEY_SEPARATOR}{name}")


def split_topology_key(key: TopologyKey) -> tuple[str | None, str]:
    """(namespace, name) of a topology key; the namespace is None for a bare name."""
    namespace, sep, name = key.partition(KEY_SEPARATOR)
    return (namespace, name) if sep else (None, key)


def conf_scope(conf: Mapping[str, Any], fallback: str) -> str:
    """What a topology's own resources outside ZooKeeper are named by (its Redis state's key
    prefix, its Kafka consumer group, producer and transactional ids): its key (`KEY_CONF`), so
    that two namespaces' topologies of one name never share a state or a consumer group and never
    fence each other's transactions; else `topology.name`, else `fallback`. A bare key is the name,
    so the local cluster's, and topologies an older operator stored, keep the names they had."""
    return str(conf.get(KEY_CONF) or conf.get("topology.name") or fallback)


def topic_safe(scope: str) -> str:
    """`scope` in a Kafka topic name, which allows only ASCII letters, digits, '.', '_' and '-':
    the separator becomes '_', which no DNS label (a namespace or a Topology's name) has, so no
    two keys give one topic name."""
    return scope.replace(KEY_SEPARATOR, "_")


def not_found(name: str, keys: Iterable[TopologyKey]) -> str:
    """Why `name` names no stored topology, for one asking by a bare name where topologies are
    keyed by namespace (the operator's ZooKeeper): the namespaces that run one of that name."""
    namespaces = sorted(ns for ns, n in map(split_topology_key, keys) if ns is not None and n == name)
    if not namespaces:
        return f"no topology named {name!r}"
    return (f"no topology is keyed {name!r}; one named so runs in namespace{'s' if len(namespaces) > 1 else ''} "
            f"{', '.join(namespaces)}: name it NAMESPACE{KEY_SEPARATOR}{name} (here: "
            f"{', '.join(topology_key(name, ns) for ns in namespaces)})")


__all__ = ["KEY_CONF", "KEY_SEPARATOR", "TopologyKey", "conf_scope", "not_found", "split_topology_key",
           "topic_safe", "topology_key"]
