"""Supervisors from Nodes: on Kubernetes, nimbus's supervisors are the Nodes that offer slots
(`pods.node_slots`), not ephemeral ZooKeeper nodes; the rest of the cluster state is ZooKeeper's.
"""

from __future__ import annotations

from squall.models.cluster import SupervisorInfo
from squall.state import ClusterState, StateError, Watch
from squall_operator import pods


class KubeClusterState(ClusterState):
    """ClusterState whose supervisors are the Nodes that offer slots (set by `set_nodes`).

    Until the first node list arrives, reading supervisors raises `StateError`, so nimbus never
    schedules against an empty cluster by mistake (which would unassign every worker)."""

    _nodes: pods.NodeSlots | None = None

    def set_nodes(self, nodes: pods.NodeSlots) -> None:
        self._nodes = nodes

    @property
    def nodes(self) -> pods.NodeSlots | None:
        return self._nodes

    def supervisors(self, watch: Watch | None = None) -> dict[str, SupervisorInfo]:
        nodes = self._nodes
        if nodes is None:
            raise StateError("the Nodes have not been listed yet; not scheduling")
        return {
            name: SupervisorInfo(host=host, ports=list(ports), time_secs=0.0)
            for name, (host, ports) in nodes.slots.items()
        }


__all__ = ["KubeClusterState"]
