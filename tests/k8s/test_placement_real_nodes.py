"""Pod (anti-)affinity of `spec.worker.affinity`, honoured by nimbus on real nodes.

Worker pods are pinned with `nodeName`, so kube-scheduler never reads their affinity; nimbus
does (docs/operator.md, "Placement"). The chart is installed with its defaults except the
word count's image for the workers, ZooKeeper on an emptyDir and the operator pinned to node-1;
then, in real containers on the two real nodes:

- `pinned` runs its one worker on node-1 (nodeSelector);
- `away` (2 workers) has a required pod anti-affinity to `pinned`'s workers by hostname: both of
  its workers run on node-2, where the even spreading alone would put one on each node;
- `apart` (3 workers) has a required pod anti-affinity to its own workers by hostname: one
  worker per node, two in all, and its STATUS says `Unschedulable` (2/3 workers placed).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import chart_release, wait_for
from .conftest import pod_ready as _ready
from .realnode import RealNodeCluster
from .test_chart_real_nodes import EXAMPLE, Release

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

HOST = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def placement_release(real_cluster: RealNodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    r = Release(real_cluster, "squall-placement", tmp_path_factory.mktemp("placement"))
    with chart_release(real_cluster, r.ns, "zookeeper.persistence.enabled=false",
                       "worker.image.repository=squall-wordcount",
                       "operator.nodeSelector.kubernetes\\.io/hostname=node-1"):
        yield r


def _wordcount(name: str, workers: int, worker: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(Path(EXAMPLE).read_text()))
    doc["metadata"]["name"] = name
    doc["spec"]["numWorkers"] = workers
    doc["spec"]["worker"] = worker
    return doc


def _anti(topology: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"squall.io/topology": topology}}, "topologyKey": HOST}]}}


def _nodes(r: Release, name: str) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in r.workers(name, live=True))


def test_required_pod_anti_affinity_places_workers_on_real_nodes(placement_release: Release) -> None:
    r = placement_release
    r.apply(_wordcount("pinned", 1, {"nodeSelector": {HOST: "node-1"}}))
    wait_for(lambda: r.running("pinned", 1), 240, interval=2, what="pinned Running 1/1")
    assert _nodes(r, "pinned") == ["node-1"]

    t0 = time.monotonic()
    r.apply(_wordcount("away", 2, {"affinity": _anti("pinned")}))
    r.apply(_wordcount("apart", 3, {"affinity": _anti("apart")}))
    wait_for(lambda: r.running("away", 2), 240, interval=2, what="away Running 2/2")
    assert _nodes(r, "away") == ["node-2", "node-2"]

    def apart_placed() -> dict[str, Any] | None:
        st = r.status("apart")
        ready = [p for p in r.workers("apart", live=True) if _ready(p)]
        return st if len(ready) == 2 and st.get("state") == "Unschedulable" else None

    st = wait_for(apart_placed, 240, interval=2, what="apart's two workers Ready, Unschedulable for the third")
    print(f"placed and Ready in {time.monotonic() - t0:.1f}s; apart: {st.get('message')}")
    assert _nodes(r, "apart") == ["node-1", "node-2"]
    assert "2/3 workers placed" in st["message"] and "pod (anti-)affinity" in st["message"], st["message"]
    assert r.running("pinned", 1), r.status("pinned")
    # removed together: each kill waits the word count's 30 s message timeout
    names = ("away", "apart", "pinned")
    for name in names:
        r.kubectl("delete", "topology", name, "--wait=false")
    wait_for(lambda: not r.get("topologies").get("items"), 180, interval=1, what="the topologies removed")
