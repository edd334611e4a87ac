"""Values between real workers that msgpack cannot pack by itself.

ids (TrackingIdSpout) -> enrich (RichBolt: sets, datetimes, a Decimal, a big int and a `Money`
registered in `topology.serializers`; the first time it sees an id % 10 == 0, also an object
no serializer knows) -> check (CheckBolt, in the other worker: compares every value and its type).
The unencodable tuples must not stop the worker's transfer: each is reported to ZooKeeper as an
error of `enrich`, its tree fails at once, the spout replays the id, and everything else flows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from squall_operator.local import LocalCluster
from helpers import (  # the integration tests' helpers (same directory)
    component_slots,
    read_spout,
    stop_topology,
    topology,
    wait_for,
    wait_running,
    wait_spout_done,
)

pytestmark = pytest.mark.integration


C = "anchoring_components"


def test_rich_values_cross_workers_and_unencodable_ones_fail_their_tree(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    n, mod = 300, 10
    out = tmp_path / "out"
    spec = {
        "numWorkers": 2,
        "messageTimeoutSecs": 20,
        "maxSpoutPending": 100,
        "spouts": [{"name": "ids", "class": f"{C}:TrackingIdSpout", "parallelism": 1}],
        "bolts": [
            {"name": "enrich", "class": f"{C}:RichBolt", "parallelism": 1,
             "inputs": [{"component": "ids", "grouping": "shuffle"}]},
            {"name": "check", "class": f"{C}:CheckBolt", "parallelism": 1,
             "inputs": [{"component": "enrich", "grouping": "shuffle"}]},
        ],
    }
    config = {
        "test.count": n, "test.out": str(out), "test.mod": mod,
        "topology.serializers": {f"{C}.Money": f"{C}:MoneySerializer"},
    }
    topo = topology("wire-values", spec, config)
    cluster = make_cluster(nodes=2, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    slots = component_slots(cluster, topo)
    assert slots["enrich"].isdisjoint(slots["check"]), f"enrich and check share a worker: {slots}"
    pids = cluster.worker_pids(topo.name)
    wait_spout_done(out, cluster, 90)
    error = wait_for(lambda: cluster.state.last_error(topo.name, "enrich"), 30, "an error of enrich in ZooKeeper", cluster)
    assert cluster.worker_pids(topo.name) == pids, "a worker was restarted"
    stop_topology(cluster, topo.name)

    text = error.error
    assert "enrich (task" in text and "stream 'default'" in text, text
    assert "field 1 'set' is a builtins.set" in text and "anchoring_components.Opaque" in text, text
    assert "topology.serializers" in text, text
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    (failed_file,) = out.glob("failed-*.json")
    failed = set(json.loads(failed_file.read_text()))
    opaque = set(range(0, n, mod))
    assert opaque <= failed, f"ids whose tuple could not be sent but were not failed: {sorted(opaque - failed)}"
    (check_file,) = out.glob("check-*.json")
    check = json.loads(check_file.read_text())
    assert check["wrong"] == []
    assert sorted(set(check["intact"])) == list(range(n))
    assert not cluster.crashes
