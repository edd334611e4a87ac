"""squall.validation with a ClassLoader of plain objects: the graph and class checks decide from
what the loader hands them and import nothing; squall.classload does the importing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from squall import classload
from squall.errors import TopologyError
from squall.validation import check_topology, parse_topology

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent


class Sentences:
    outputs = ["sentence"]

    def next_tuple(self) -> None: ...


class Split:
    outputs = ["word"]

    def execute(self, tup: object) -> None: ...


class Choose:
    def choose_tasks(self, task: int, values: list[object]) -> list[int]:
        return []


class Dict:
    """A ClassLoader over a dict: class path -> object; a missing one is an ImportError."""

    def __init__(self, objects: dict[str, object]) -> None:
        self.objects = objects
        self.asked: list[str] = []

    def load(self, class_path: str) -> object:
        self.asked.append(class_path)
        if class_path not in self.objects:
            raise ImportError(f"no '{class_path}' here")
        return self.objects[class_path]


def topology(split_class: str = "nowhere.app:Split", grouping: dict[str, Any] | None = None) -> Any:
    return parse_topology({
        "apiVersion": "squall.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "words"},
        "spec": {
            "spouts": [{"name": "sentences", "class": "nowhere.app:Sentences"}],
            "bolts": [{"name": "split", "class": split_class,
                       "inputs": [{"component": "sentences", **(grouping or {})}]}],
        },
    })


def problems(err: TopologyError) -> dict[str, str]:
    return {p.path: p.message for p in err.problems}


def test_the_classes_come_from_the_loader_and_nothing_is_imported() -> None:
    loader = Dict({"nowhere.app:Sentences": Sentences, "nowhere.app:Split": Split})
    path_before = list(sys.path)
    resolved = check_topology(topology(), loader=loader)
    assert resolved.classes == {"sentences": Sentences, "split": Split}
    assert [s.fields for s in resolved.streams["split"].values()] == [["word"]]
    assert loader.asked == ["nowhere.app:Sentences", "nowhere.app:Split"]
    assert "nowhere" not in sys.modules and sys.path == path_before


def test_a_loader_error_is_the_class_fields_problem() -> None:
    with pytest.raises(TopologyError) as info:
        check_topology(topology("nowhere.app:Missing"),
                       loader=Dict({"nowhere.app:Sentences": Sentences}))
    assert problems(info.value) == {"spec.bolts[0].class": "no 'nowhere.app:Missing' here"}


@pytest.mark.parametrize(("obj", "message"), [
    (Sentences, "not a bolt: Sentences has no execute() method; it looks like a spout"),
    (Choose, "not a bolt: Choose has no execute() method; it looks like a custom grouping"),
    (len, "'nowhere.app:Split' is not a class (it is a builtin_function_or_method)"),
])
def test_the_role_is_checked_on_what_the_loader_hands(obj: object, message: str) -> None:
    loader = Dict({"nowhere.app:Sentences": Sentences, "nowhere.app:Split": obj})
    with pytest.raises(TopologyError) as info:
        check_topology(topology(), loader=loader)
    assert problems(info.value) == {"spec.bolts[0].class": message}


def test_a_custom_grouping_class_comes_from_the_loader_too() -> None:
    grouping = {"grouping": "custom", "customClass": "nowhere.app:Choose"}
    loader = Dict({"nowhere.app:Sentences": Sentences, "nowhere.app:Split": Split,
                   "nowhere.app:Choose": Choose})
    check_topology(topology(grouping=grouping), loader=loader)
    assert loader.asked[-1] == "nowhere.app:Choose"
    loader.objects["nowhere.app:Choose"] = Split
    with pytest.raises(TopologyError) as info:
        check_topology(topology(grouping=grouping), loader=loader)
    assert problems(info.value) == {
        "spec.bolts[0].inputs[0].customClass":
            "not a custom grouping: Split has no choose_tasks() method; it looks like a bolt"}


def test_without_resolve_classes_the_loader_is_not_asked() -> None:
    loader = Dict({})
    resolved = check_topology(topology(), resolve_classes=False, loader=loader)
    assert loader.asked == [] and resolved.classes == {}


def test_classload_puts_the_search_paths_first_for_the_duration_only(tmp_path: Path) -> None:
    # a directory of its own: one already on sys.path (pytest puts the test directories there, in
    # an order that depends on which tiers run together) is left where it is
    (tmp_path / "loader_probe_mod.py").write_text("class Probe:\n    pass\n")
    before = list(sys.path)
    with classload.importing([tmp_path]) as loader:
        assert sys.path[0] == str(tmp_path.resolve())
        assert getattr(loader.load("loader_probe_mod:Probe"), "__name__", None) == "Probe"
    assert sys.path == before
    with classload.importing([HERE]):
        assert sys.path == before, "a path already there was added again"
    with pytest.raises(ImportError, match="must be a class path 'module:Class'"):
        classload.ModuleLoader().load("no_colon")
