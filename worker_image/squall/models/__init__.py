"""Data that crosses a boundary: the Topology resource and the cluster-state payloads."""

from squall.models.v1alpha1 import (
    BoltSpec,
    ComponentSpec,
    Grouping,
    InputSpec,
    ObjectMeta,
    SpoutSpec,
    StreamSpec,
    Topology,
    TopologySpec,
)

__all__ = [
    "BoltSpec",
    "ComponentSpec",
    "Grouping",
    "InputSpec",
    "ObjectMeta",
    "SpoutSpec",
    "StreamSpec",
    "Topology",
    "TopologySpec",
]
