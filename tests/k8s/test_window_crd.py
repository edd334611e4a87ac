"""Windowed bolts on the real API server: the trending example's topology.yaml is accepted by the
committed CRD (`kubectl apply --dry-run=server`), and a `window` field of the wrong type is
refused by the API server and by `squall validate`'s parser alike (docs/topology.md, "Windowed
bolts")."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.validation import parse_topology

from .cluster import Cluster
from .conftest import assert_refused_alike, wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "topology.yaml"
TRENDING = REPO / "examples" / "trending" / "topology.yaml"

# window field -> a value of the wrong type (or a string that is not a duration)
WRONG: dict[str, Any] = {
    "windowLength": 2.5, "slidingInterval": True, "timestampField": 5, "lag": 2,
    "watermarkInterval": "1 s", "lateStream": "late stream",
}


def test_the_api_server_and_validate_agree_on_windows(k8s_cluster: Cluster, ns: str) -> None:
    c = k8s_cluster
    text = TRENDING.read_text()
    parse_topology(text)
    created = c.kubectl("create", "-f", str(CRD), check=False)
    try:
        wait_for(lambda: c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(TRENDING),
                                   check=False).returncode == 0,
                 60, what="the API server to accept examples/trending/topology.yaml")
        base = yaml.safe_load(text)
        top = next(i for i, b in enumerate(base["spec"]["bolts"]) if "window" in b)
        for field, value in WRONG.items():
            doc = copy.deepcopy(base)
            doc["spec"]["bolts"][top]["window"][field] = value
            assert_refused_alike(c, ns, doc, f"spec.bolts[{top}].window.{field}", f"window.{field}: {value!r}")
    finally:
        if created.returncode == 0:
            c.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)
