"""A shell component in the topology file (squall.multilang): the `shell` block, what the
model fills in (the class, the block in the component's config), and the checks with the
field paths."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from squall.errors import TopologyError
from squall.validation import check_topology, parse_topology

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent

TOPOLOGY: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "ml"},
    "spec": {
        "spouts": [{"name": "lines", "shell": {"command": ["python3", "fixtures_multilang_spout.py"],
                                               "files": ["fixtures_multilang_spout.py"]},
                    "outputs": [{"fields": ["line"]}]}],
        "bolts": [{"name": "split", "shell": {"command": ["node", "split.js"]},
                   "outputs": [{"fields": ["word"]}], "inputs": [{"component": "lines"}],
                   "config": {"topology.multilang.serializer": "msgpack"}}],
    },
}


def topo(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(TOPOLOGY)
    for where, value in changes.items():
        kind, field = where.split("__")
        d["spec"][kind][0][field] = value
    return d


def problems(d: dict[str, Any], resolve: bool = False) -> dict[str, str]:
    with pytest.raises(TopologyError) as info:
        check_topology(parse_topology(d), resolve_classes=resolve, search_paths=(HERE,))
    return {p.path: p.message for p in info.value.problems}


def test_a_shell_component_runs_storms_shell_classes_with_its_block_in_its_config() -> None:
    t = parse_topology(TOPOLOGY)
    spout, bolt = t.spec.spouts[0], t.spec.bolts[0]
    assert spout.class_name == "squall.multilang:ShellSpout"
    assert bolt.class_name == "squall.multilang:ShellBolt"
    assert bolt.config["squall.multilang.shell"] == {"command": ["node", "split.js"], "files": []}
    assert bolt.config["topology.multilang.serializer"] == "msgpack"
    # stored as JSON and read back (ZooKeeper, the resource): the same topology
    again = parse_topology(t.model_dump(by_alias=True, exclude_none=True))
    assert again == t


def test_the_shell_block_is_checked_with_its_paths() -> None:
    for shell, path, words in [
        ({"command": []}, "spec.bolts[0].shell.command", "at least 1"),
        ({"command": ["node", ""]}, "spec.bolts[0].shell.command[1]", "at least 1"),
        ({"command": "node split.js"}, "spec.bolts[0].shell.command", "list"),
        ({"command": ["node"], "files": ["../secret.js"]}, "spec.bolts[0].shell.files[0]", "leaves the code directory"),
        ({"command": ["node"], "files": ["/etc/passwd"]}, "spec.bolts[0].shell.files[0]", ""),
        ({"command": ["node"], "cwd": "/"}, "spec.bolts[0].shell.cwd", ""),
    ]:
        with pytest.raises(TopologyError) as info:
            parse_topology(topo(bolts__shell=shell))
        found = {p.path: p.message for p in info.value.problems}
        assert path in found, (shell, found)
        assert words in found[path], (shell, found[path])


def test_the_multilang_settings_are_checked() -> None:
    d = topo(bolts__config={"topology.multilang.serializer": "yaml", "topology.subprocess.timeout.secs": 0})
    d["spec"]["config"] = {"topology.subprocess.timeout.secs": "30s"}
    found = problems(d)
    assert "expected one of json, msgpack" in found["spec.bolts[0].config['topology.multilang.serializer']"]
    assert "positive number of seconds" in found["spec.bolts[0].config['topology.subprocess.timeout.secs']"]
    assert "positive number of seconds" in found["spec.config['topology.subprocess.timeout.secs']"]


def test_with_the_classes_resolved_the_files_must_exist_and_a_class_must_be_a_shell_one() -> None:
    d = topo(bolts__shell={"command": ["node", "split.js"], "files": ["no-such-file.js"]})
    d["spec"]["bolts"][0]["class"] = "fixtures_components:SplitBolt"
    found = problems(d, resolve=True)
    assert "not found" in found["spec.bolts[0].shell.files[0]"]
    assert "squall.multilang:ShellBolt or a subclass" in found["spec.bolts[0].class"]
    assert "spec.spouts[0].shell.files[0]" not in found  # that one is in tests/unit


def test_the_crd_lets_a_shell_component_leave_out_its_class() -> None:
    from squall_operator.crd import spec_schema

    spout = spec_schema()["properties"]["spouts"]["items"]
    assert "class" not in spout.get("required", [])
    assert spout["properties"]["shell"]["properties"]["files"]["items"]["pattern"] == "^[^/]"
