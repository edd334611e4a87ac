"""One file, one meaning: for each way of giving a field of the Topology resource a value of
the wrong type, the real API server (with the committed CRD) and `squall validate`'s parser both
refuse the same file, and both accept the well-typed one (docs/reliability.md, "Hostile input")."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.errors import TopologyError
from squall.validation import parse_topology

from .cluster import Cluster
from .conftest import wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "topology.yaml"

BASE: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "typed"},
    "spec": {
        "numWorkers": 2, "numAckers": 1, "messageTimeoutSecs": 30, "maxSpoutPending": 10,
        "tickTupleFreqSecs": 1.5, "killWaitSecs": 3, "rebalanceWaitSecs": 3, "active": True,
        "spouts": [{"name": "s", "class": "m:S", "parallelism": 1, "numTasks": 1,
                    "outputs": [{"stream": "default", "fields": ["x"], "direct": False}]}],
        "bolts": [{"name": "b", "class": "m:B", "parallelism": 1, "numTasks": 1,
                   "inputs": [{"component": "s", "grouping": "shuffle"}]}],
        "upgrade": {"mode": "handover", "canary": {"slots": 1, "analysisSecs": 60, "maxFailedFraction": 0.05,
                                                   "maxRestarts": 0}},
        "autoscale": {"minWorkers": 1, "maxWorkers": 3, "target": 0.7, "cooldownSecs": 60, "step": 1},
    },
}

# field path -> a value of the wrong type; each round gives every field one.
ROUNDS: list[dict[tuple[Any, ...], Any]] = [
    {  # quoted scalars
        ("spec", "numWorkers"): "2", ("spec", "numAckers"): "1",
        ("spec", "messageTimeoutSecs"): "30", ("spec", "maxSpoutPending"): "10",
        ("spec", "tickTupleFreqSecs"): "1.5", ("spec", "killWaitSecs"): "3",
        ("spec", "rebalanceWaitSecs"): "3", ("spec", "active"): "true",
        ("spec", "spouts", 0, "parallelism"): "1", ("spec", "spouts", 0, "numTasks"): "1",
        ("spec", "spouts", 0, "outputs", 0, "direct"): "false",
        ("spec", "bolts", 0, "parallelism"): "1",
        ("spec", "upgrade", "canary", "slots"): "1", ("spec", "upgrade", "canary", "analysisSecs"): "60",
        ("spec", "autoscale", "minWorkers"): "1", ("spec", "autoscale", "target"): "0.7",
    },
    {  # booleans for numbers, numbers for booleans and strings
        ("spec", "numWorkers"): True, ("spec", "messageTimeoutSecs"): True,
        ("spec", "active"): 1, ("spec", "bolts", 0, "name"): 7,
        ("spec", "spouts", 0, "outputs", 0, "fields"): [1],
        ("spec", "upgrade", "mode"): 1, ("spec", "upgrade", "canary", "maxFailedFraction"): True,
        ("spec", "autoscale", "maxWorkers"): True,
    },
    {  # fractions for integers
        ("spec", "numWorkers"): 2.5, ("spec", "spouts", 0, "parallelism"): 1.5,
        ("spec", "bolts", 0, "numTasks"): 1.25,
        ("spec", "upgrade", "canary", "maxRestarts"): 0.5, ("spec", "autoscale", "step"): 1.5,
    },
]


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for item in path:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else item)
    return out


def _with(values: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for path, value in values.items():
        node: Any = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return doc


def test_the_api_server_and_validate_refuse_the_same_types(k8s_cluster: Cluster, ns: str) -> None:
    c = k8s_cluster
    created = c.kubectl("create", "-f", str(CRD), check=False)
    try:
        wait_for(lambda: c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-",
                                   input=yaml.safe_dump(BASE), check=False).returncode == 0,
                 60, what="the Topology CRD to serve, accepting the well-typed file")
        parse_topology(yaml.safe_dump(BASE))
        for values in ROUNDS:
            text = yaml.safe_dump(_with(values))
            r = c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=text,
                          check=False)
            assert r.returncode != 0, f"the API server accepted {values}"
            with pytest.raises(TopologyError) as info:
                parse_topology(text)
            ours = {p.path for p in info.value.problems}
            for path in values:
                name = _dotted(path)
                if path[-1] == "fields":
                    name += "[0]"
                assert name in r.stderr, (name, r.stderr)  # kubectl names the field
                assert name in ours, (name, str(info.value))
        # a component is a Python class or a shell command (the CRD's CEL rule): neither is
        # refused by both, a shell command alone accepted by both
        neither = copy.deepcopy(BASE)
        del neither["spec"]["bolts"][0]["class"]
        text = yaml.safe_dump(neither)
        r = c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=text, check=False)
        assert r.returncode != 0 and "a component needs class" in r.stderr, r.stderr
        with pytest.raises(TopologyError):
            parse_topology(text)
        shell = copy.deepcopy(neither)
        shell["spec"]["bolts"][0]["shell"] = {"command": ["node", "bolt.js"]}
        text = yaml.safe_dump(shell)
        r = c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=text, check=False)
        assert r.returncode == 0, r.stderr
        parse_topology(text)
    finally:
        if created.returncode == 0:  # ours to remove (another test may install it by helm)
            c.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)
