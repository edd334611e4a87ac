"""Per-topology worker pod settings on the real API server (issue 10, items 4, 5, 8, 9).

The CRD's schema, generated from the models, makes the API server refuse invalid worker settings
(a pull policy that does not exist, a quantity that is not one, an unknown field) with a message
naming the field; valid settings are stored as given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import Cluster

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "examples" / "wordcount" / "topology.yaml"


def _doc(name: str, worker: dict[str, Any]) -> dict[str, Any]:
    doc = yaml.safe_load(WORDCOUNT.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["worker"] = worker
    return doc


def _apply(c: Cluster, ns: str, doc: dict[str, Any]) -> Any:
    return c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=yaml.safe_dump(doc), check=False)


def test_crd_refuses_invalid_worker_settings_and_keeps_valid_ones(k8s_cluster: Cluster, ns: str) -> None:
    c = k8s_cluster
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds" / "topology.yaml"))
    c.kubectl("wait", "--for=condition=Established", "crd/topologies.squall.io", "--timeout=30s")
    good = _doc("good", {
        "image": "team-a/wordcount:2", "imagePullPolicy": "Never",
        "resources": {"requests": {"cpu": "250m", "memory": 268435456}, "limits": {"cpu": 1}},
        "env": [{"name": "MODE", "value": "fast"}],
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"disk": "ssd"},
        "volumes": [{"name": "models", "configMap": {"name": "models"}}],
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
    })
    r = c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(good))
    stored = json.loads(c.kubectl("get", "topology", "good", "-n", ns, "-o", "json").stdout)
    assert stored["spec"]["worker"] == good["spec"]["worker"], r.stdout
    cases = [
        ({"imagePullPolicy": "Sometimes"}, "spec.worker.imagePullPolicy", "Unsupported value"),
        ({"resources": {"requests": {"cpu": "lots"}}}, "spec.worker.resources.requests.cpu", "should match"),
        ({"tolerations": [{"operator": "Maybe"}]}, "spec.worker.tolerations[0].operator", "Unsupported value"),
        ({"serviceAccountName": "Not_Valid"}, "spec.worker.serviceAccountName", "should match"),
        ({"hostNetwork": True}, "hostNetwork", "unknown field"),
    ]
    for worker, field, words in cases:
        r = _apply(c, ns, _doc("bad", worker))
        assert r.returncode != 0, worker
        assert field in r.stderr and words in r.stderr, r.stderr
