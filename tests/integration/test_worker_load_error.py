"""A worker that cannot load its topology's classes says so in ZooKeeper.

The operator imports no user code; the worker checks the classes in its own image, and what
does not load is written as an error under the `__load` component, which the operator shows on
the Topology (`ComponentLoadFailed`). Real ZooKeeper, a real `Worker` object.
"""

from __future__ import annotations

import pytest

from squall.errors import TopologyError
from squall.models.cluster import LOAD_ERROR_COMPONENT, WorkerSlot
from squall.models.v1alpha1 import Topology
from squall.state import ClusterState
from squall.worker.runtime import Worker
from squall_operator.nimbus import initial_storm_base

pytestmark = pytest.mark.integration


def test_missing_module_is_reported_under_load_component(cluster_state: ClusterState) -> None:
    topology = Topology.model_validate({"metadata": {"name": "nomod"}, "spec": {
        "spouts": [{"name": "s", "class": "no_such_module_here:Spout"}]}})
    cluster_state.set_storm("nomod", initial_storm_base(topology, 100.0))
    worker = Worker(cluster_state, "nomod", WorkerSlot("node-a", 6799), host="127.0.0.1")
    try:
        with pytest.raises(TopologyError):
            worker.start()
    finally:
        worker.shutdown()
    error = cluster_state.last_error("nomod", LOAD_ERROR_COMPONENT)
    assert error is not None
    assert "no_such_module_here" in error.error and "spec.spouts[0].class" in error.error
    assert (error.host, error.port) == ("127.0.0.1", 6799)
    # a worker whose start failed never heartbeats, not even on its way out: a heartbeat newer
    # than the error would tell the operator that a later worker loaded the classes
    assert cluster_state.get_worker_heartbeats("nomod") == {}
