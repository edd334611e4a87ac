"""Stateful components on the real API server: the stateful word count example's topology.yaml
(with `stateful: true` and the state provider settings) is accepted by the committed CRD
(`kubectl apply --dry-run=server`), and a `stateful` of the wrong type is refused by the API
server and by `squall validate`'s parser at the same field (docs/topology.md, "Stateful bolts")."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from squall.validation import parse_topology

from .cluster import Cluster
from .conftest import assert_refused_alike, wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "topology.yaml"
EXAMPLE = REPO / "examples" / "stateful-wordcount" / "topology.yaml"


def test_the_api_server_and_validate_agree_on_stateful(k8s_cluster: Cluster, ns: str) -> None:
    c = k8s_cluster
    text = EXAMPLE.read_text()
    parse_topology(text)
    created = c.kubectl("create", "-f", str(CRD), check=False)
    try:
        wait_for(lambda: c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(EXAMPLE),
                                   check=False).returncode == 0,
                 60, what="the API server to accept examples/stateful-wordcount/topology.yaml")
        base = yaml.safe_load(text)
        for kind, index in (("spouts", 0), ("bolts", 1)):
            doc = copy.deepcopy(base)
            doc["spec"][kind][index]["stateful"] = "yes"
            assert_refused_alike(c, ns, doc, f"spec.{kind}[{index}].stateful", f"{kind}[{index}].stateful: 'yes'")
    finally:
        if created.returncode == 0:
            c.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)
