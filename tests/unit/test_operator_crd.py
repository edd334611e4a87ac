"""The Topology CRD: generated from the models, structural, and committed without drift."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall_operator import crd

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def _schema() -> dict[str, Any]:
    version = crd.build_crd()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_files_match_the_models() -> None:
    bad = crd.drifted(REPO)
    assert not bad, f"{bad} drifted from the models: run `python -m squall_operator.crd`"


def test_check_mode_reports_drift(tmp_path: Path) -> None:
    assert crd.main(["--root", str(tmp_path), "--check"]) == 1
    assert crd.main(["--root", str(tmp_path)]) == 0
    assert crd.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / crd.CRD_FILES[1]).write_text("# edited by hand\n" + crd.crd_yaml())
    assert crd.main(["--root", str(tmp_path), "--check"]) == 1


def test_names_scope_and_subresources() -> None:
    doc = crd.build_crd()
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["metadata"]["name"] == "topologies.squall.io"
    spec = doc["spec"]
    assert spec["group"] == "squall.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "Topology"
    assert spec["names"]["plural"] == "topologies"
    assert spec["names"]["shortNames"] == ["topo"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    # kubectl scale / the HPA / KEDA: replicas are spec.numWorkers, the selector a status field
    assert version["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.numWorkers", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}
    status = _schema()["properties"]["status"]["properties"]
    assert status["replicas"]["type"] == "integer" and status["selector"]["type"] == "string"
    assert _schema()["properties"]["spec"]["properties"]["numWorkers"]["minimum"] == 1


def test_printer_columns() -> None:
    columns = crd.build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"].upper(), c["jsonPath"], c["type"], c.get("priority", 0)) for c in columns] == [
        ("STATUS", ".status.state", "string", 0),
        ("WORKERS", ".status.workers", "string", 0),
        ("EXECUTORS", ".status.executors", "integer", 0),
        ("ACKED/S", ".status.ackedPerSec", "number", 0),
        ("FAILED/S", ".status.failedPerSec", "number", 0),
        ("UPTIME", ".status.launchTime", "date", 0),
        ("AGE", ".metadata.creationTimestamp", "date", 0),
        # -o wide
        ("STORM", ".status.stormStatus", "string", 1),
        ("TASKS", ".status.tasks", "integer", 1),
        ("IMAGE", ".status.image", "string", 1),
    ]
    status = _schema()["properties"]["status"]["properties"]
    for column in columns:
        if column["jsonPath"].startswith(".status."):
            assert column["jsonPath"].split(".")[-1] in status, column


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        assert "$ref" not in node, path
        assert "anyOf" not in node and "oneOf" not in node and "allOf" not in node, path
        assert "title" not in node and "const" not in node, path
        if "properties" in node or "items" in node or "enum" in node:
            assert "type" in node, f"{path} has no type"
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict), path
            assert "properties" not in node, path
        if isinstance(node.get("exclusiveMinimum"), (int, float)) and not isinstance(
            node["exclusiveMinimum"], bool
        ):
            pytest.fail(f"{path}: numeric exclusiveMinimum is JSON Schema, not OpenAPI v3.0")


def test_spec_schema_carries_the_models_rules() -> None:
    spec = _schema()["properties"]["spec"]
    props = spec["properties"]
    assert spec["required"] == ["spouts"]
    assert props["spouts"]["minItems"] == 1
    # the limits of squall.limits travel with the fields: the API server refuses past them too
    assert props["numWorkers"] == {"default": 1, "minimum": 1, "maximum": 1000, "type": "integer"}
    assert props["spouts"]["maxItems"] == props["bolts"]["maxItems"] == 500
    assert props["numAckers"]["maximum"] == 1000 and props["maxSpoutPending"]["maximum"] == 1_000_000
    assert props["numAckers"]["nullable"] is True and props["numAckers"]["minimum"] == 0
    assert props["messageTimeoutSecs"]["minimum"] == 0
    assert props["messageTimeoutSecs"]["exclusiveMinimum"] is True
    assert props["config"] == {"x-kubernetes-preserve-unknown-fields": True, "type": "object"}
    bolt = props["bolts"]["items"]
    # a component names its class, or a shell command (squall.multilang) and the model fills
    # in the class: the API server requires one of the two
    assert bolt["required"] == ["name"]
    assert bolt["x-kubernetes-validations"][0]["rule"] == "has(self.class) || has(self.shell)"
    assert bolt["properties"]["shell"]["properties"]["command"]["minItems"] == 1
    assert bolt["properties"]["name"]["pattern"].startswith("^[a-z0-9]")
    assert bolt["properties"]["name"]["maxLength"] == 63
    grouping = bolt["properties"]["inputs"]["items"]["properties"]["grouping"]
    assert grouping["type"] == "string" and "localOrShuffle" in grouping["enum"]
    assert grouping["default"] == "shuffle"
    assert bolt["properties"]["numTasks"] == {"minimum": 1, "maximum": 10_000, "type": "integer",
                                              "nullable": True}
    assert bolt["properties"]["parallelism"]["maximum"] == 1000
    assert bolt["properties"]["outputs"]["maxItems"] == 100
    assert bolt["properties"]["outputs"]["items"]["properties"]["fields"]["maxItems"] == 1000
    assert bolt["properties"]["inputs"]["items"]["properties"]["fields"]["maxItems"] == 1000
    for timeout in ("messageTimeoutSecs", "tickTupleFreqSecs", "killWaitSecs", "rebalanceWaitSecs"):
        assert props[timeout]["maximum"] == 86_400, timeout
    assert "default" not in bolt["properties"]["outputs"]


def test_name_rule_and_status_kept() -> None:
    schema = _schema()
    (rule,) = schema["x-kubernetes-validations"]
    assert "self.metadata.name" in rule["rule"] and "DNS label" in rule["message"]
    assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
    assert schema["properties"]["metadata"] == {"type": "object"}


def test_structural_conversions() -> None:
    schema = {
        "$defs": {"Color": {"enum": ["red", "blue"], "title": "Color", "type": "string"}},
        "properties": {
            "c": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}], "default": None},
            "k": {"const": "x", "type": "string"},
            "n": {"exclusiveMaximum": 5, "type": "number"},
            "free": {"additionalProperties": True, "type": "object"},
            "m": {"additionalProperties": {"type": "integer"}, "type": "object"},
        },
        "additionalProperties": False,
        "type": "object",
        "title": "T",
    }
    out = crd.structural(schema)
    assert out == {
        "properties": {
            "c": {"enum": ["red", "blue"], "type": "string", "nullable": True},
            "k": {"enum": ["x"], "type": "string"},
            "n": {"maximum": 5, "exclusiveMaximum": True, "type": "number"},
            "free": {"x-kubernetes-preserve-unknown-fields": True, "type": "object"},
            "m": {"additionalProperties": {"type": "integer"}, "type": "object"},
        },
        "type": "object",
    }
    with pytest.raises(ValueError, match="non-null options"):
        crd.structural({"anyOf": [{"type": "string"}, {"type": "integer"}]})


def test_example_topology_fits_the_schema_shape() -> None:
    """Every field the example sets is declared in the schema (no pruning would happen)."""
    doc = yaml.safe_load((REPO / "examples/wordcount/topology.yaml").read_text())
    props = _schema()["properties"]["spec"]["properties"]
    assert set(doc["spec"]) <= set(props)
    for bolt in doc["spec"]["bolts"]:
        assert set(bolt) <= set(props["bolts"]["items"]["properties"])
