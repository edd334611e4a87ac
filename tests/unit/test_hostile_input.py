"""Hostile input: every way of reading a topology refuses bad input in bounded time and memory,
with a message naming the place and no traceback (docs/reliability.md, "Hostile input")."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.errors import TopologyError
from squall.validation import parse_topology

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FX = "fixtures_components"

# A topology that sets every field of the resource, so that each can be given a wrong type.
FULL: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "full", "namespace": "default", "labels": {"a": "b"},
                 "annotations": {"c": "d"}},
    "spec": {
        "numWorkers": 2,
        "numAckers": 1,
        "messageTimeoutSecs": 30,
        "maxSpoutPending": 100,
        "tickTupleFreqSecs": 1.5,
        "killWaitSecs": 3,
        "rebalanceWaitSecs": 3,
        "active": True,
        "config": {"k": "v"},
        "spouts": [{"name": "s", "class": f"{FX}:SentenceSpout", "parallelism": 1, "numTasks": 2,
                    "config": {}, "outputs": [{"stream": "default", "fields": ["x"],
                                               "direct": False}]}],
        "bolts": [{"name": "b", "class": f"{FX}:SplitBolt", "parallelism": 1, "numTasks": 1,
                   "config": {}, "outputs": [{"stream": "default", "fields": ["y"],
                                              "direct": False}],
                   "inputs": [{"component": "s", "stream": "default", "grouping": "custom",
                               "fields": ["x"], "customClass": f"{FX}:SplitBolt"}]}],
    },
}


def _scalar_fields(schema: dict[str, Any], path: tuple[str | int, ...] = ()
                   ) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, type) of every scalar field the CRD's schema declares; arrays at index 0."""
    kind = schema.get("type")
    if kind in ("integer", "number", "boolean", "string") and "enum" not in schema:
        yield path, kind
    for name, sub in (schema.get("properties") or {}).items():
        yield from _scalar_fields(sub, (*path, name))
    if kind == "array" and "items" in schema:
        yield from _scalar_fields(schema["items"], (*path, 0))


def _put(doc: dict[str, Any], path: tuple[str | int, ...], value: object) -> None:
    node: Any = doc
    for here, nxt in zip(path, path[1:]):
        if isinstance(node, list):
            node = node[here]  # type: ignore[index]
            continue
        if here not in node or node[here] is None:
            node[here] = [{}] if isinstance(nxt, int) else {}
        node = node[here]
    node[path[-1]] = value


# A value of the wrong type for each CRD type: the API server refuses each of these.
_WRONG = {"integer": ["2", 2.5, True], "number": ["2", True], "boolean": ["true", 1],
          "string": [1, True]}


def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "topology.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_full_document_is_valid() -> None:
    parse_topology(copy.deepcopy(FULL))


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for item in path:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else item)
    return out


@pytest.mark.parametrize(("path", "kind"), [
    pytest.param(p, k, id=_dotted(p)) for p, k in _scalar_fields(_crd_spec_schema())
    if p and p[0] == "spec"
])
def test_what_the_crd_refuses_validation_refuses(path: tuple[str | int, ...], kind: str) -> None:
    """One file, one meaning: a value of the wrong type for the CRD (a quoted number, a
    number for a boolean...) is refused by `squall validate` too, naming the field."""
    for wrong in _WRONG[kind]:
        doc = copy.deepcopy(FULL)
        _put(doc, path, wrong)
        with pytest.raises(TopologyError) as info:
            parse_topology(doc)
        paths = [p.path for p in info.value.problems]
        assert _dotted(path) in paths, (wrong, str(info.value))


def test_quoted_number_names_the_field() -> None:
    doc = copy.deepcopy(FULL)
    doc["spec"]["bolts"][0]["parallelism"] = "2"
    with pytest.raises(TopologyError) as info:
        parse_topology(doc)
    assert str(info.value) == "spec.bolts[0].parallelism: '2' — must be an integer"
