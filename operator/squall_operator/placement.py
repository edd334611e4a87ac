"""A topology's Kubernetes placement rules, as the scheduler's `Placement` (pure values).

Worker pods are pinned to their slot's node with `nodeName`, so no Kubernetes scheduler reads
their affinity: nimbus honours it itself. `pods.allowed_slots` keeps what one node decides alone
(taints, node selector, required node affinity, resources); this module turns what needs the
other workers or a ranking of the nodes into a `scheduler.Placement`: the preferred
node-affinity weights per node, and the pod affinity and anti-affinity terms with the labels
and namespace the topology's workers carry, which other topologies' terms match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from squall.models.cluster import WorkerSlot
from squall.models.v1alpha1 import NodeSelectorTerm, PodAffinity, WorkerSpec
from squall.models.v1alpha1 import PodAffinityTerm as TermSpec
from squall_operator import pods
from squall_operator.scheduler import LabelRequirement, LabelSelector, Placement, PodAffinityTerm

__all__ = ["node_labels", "node_weights", "topology_placement", "worker_labels"]

# labels that differ from one worker pod of a topology to the next: not the topology's
_PER_SLOT = (pods.LABEL_NODE, pods.LABEL_PORT)


def worker_labels(topology: str, namespace: str, config: pods.WorkerPodConfig,
                  worker: WorkerSpec | None) -> dict[str, str]:
    """The labels every worker pod of `topology` carries (as `pods.worker_pod` sets them)."""
    pod = pods.worker_pod(topology, "", namespace, WorkerSlot("node", 1), config, worker)
    labels: dict[str, str] = pod["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k not in _PER_SLOT}


def node_labels(nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Node name -> its labels."""
    out: dict[str, dict[str, str]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        out[str(meta.get("name", ""))] = dict(meta.get("labels") or {})
    return out


def _requirements(exprs: Iterable[Any] | None) -> tuple[LabelRequirement, ...]:
    return tuple(LabelRequirement(r.key, r.operator.value, tuple(r.values or ())) for r in exprs or ())


def _node_term_matches(term: NodeSelectorTerm, name: str, labels: Mapping[str, str]) -> bool:
    exprs, fields = _requirements(term.match_expressions), _requirements(term.match_fields)
    if not exprs and not fields:
        return False  # an empty term matches nothing (Kubernetes' rule)
    return all(r.matches(labels.get(r.key)) for r in exprs) and all(
        r.matches(name if r.key == "metadata.name" else None) for r in fields)


def node_weights(nodes: Mapping[str, Mapping[str, str]], worker: WorkerSpec | None) -> dict[str, int]:
    """Node -> the summed weights of the preferred node-affinity terms it matches (nodes
    matching none left out)."""
    affinity = worker.affinity if worker is not None else None
    preferred = affinity.node_affinity.preferred if affinity and affinity.node_affinity else None
    weights: dict[str, int] = {}
    for name, labels in sorted(nodes.items()):
        total = sum(t.weight for t in preferred or () if _node_term_matches(t.preference, name, labels))
        if total:
            weights[name] = total
    return weights


def _term(spec: TermSpec, weight: int = 0) -> PodAffinityTerm:
    sel = spec.label_selector
    selector = None if sel is None else LabelSelector(
        match_labels=dict(sel.match_labels or {}), match_expressions=_requirements(sel.match_expressions))
    return PodAffinityTerm(topology_key=spec.topology_key, selector=selector,
                           namespaces=frozenset(spec.namespaces or ()), weight=weight)


def _terms(affinity: PodAffinity | None) -> tuple[tuple[PodAffinityTerm, ...], tuple[PodAffinityTerm, ...]]:
    if affinity is None:
        return (), ()
    required = tuple(_term(t) for t in affinity.required or ())
    preferred = tuple(_term(t.pod_affinity_term, t.weight) for t in affinity.preferred or ())
    return required, preferred


def topology_placement(topology: str, namespace: str, config: pods.WorkerPodConfig,
                       worker: WorkerSpec | None, nodes: Mapping[str, Mapping[str, str]]) -> Placement:
    """The scheduler's `Placement` of `topology`'s workers; `nodes`: node -> labels."""
    affinity = worker.affinity if worker is not None else None
    required_affinity, preferred_affinity = _terms(affinity.pod_affinity if affinity else None)
    required_anti, preferred_anti = _terms(affinity.pod_anti_affinity if affinity else None)
    return Placement(
        namespace=namespace,
        labels=worker_labels(topology, namespace, config, worker),
        node_weights=node_weights(nodes, worker),
        required_affinity=required_affinity,
        required_anti_affinity=required_anti,
        preferred_affinity=preferred_affinity,
        preferred_anti_affinity=preferred_anti,
    )
