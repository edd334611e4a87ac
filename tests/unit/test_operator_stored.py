"""The stored topology read once (squall_operator.stored): parsed once per submission, its plan
built once per executor count, though every round reads a fresh copy from ZooKeeper."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from squall.models.cluster import StormBase, TopologyStatus
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall_operator import stored
from squall_operator.nimbus import needed_executors

SPEC: dict[str, Any] = {
    "numWorkers": 2,
    "spouts": [{"name": "s", "class": "m:S"}],
    "bolts": [{"name": "b", "class": "m:B", "parallelism": 2, "numTasks": 4, "inputs": [{"component": "s"}]}],
}


def base(name: str, spec: dict[str, Any] | None = None, launched: float = 1000.0,
         executors: dict[str, int] | None = None) -> StormBase:
    """A StormBase as a ZooKeeper read returns it: a fresh object and dict every time."""
    body = {"apiVersion": "squall.io/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": copy.deepcopy(spec or SPEC)}
    return StormBase(name=name, status=TopologyStatus.ACTIVE, launch_time_secs=launched, num_workers=2,
                     component_executors=executors or {"s": 1, "b": 2, "__acker": 2}, topology=body)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Topology.model_validate calls."""
    calls: list[int] = []
    original = Topology.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Topology], *args: Any, **kw: Any) -> Topology:
        calls.append(1)
        return original(cls, *args, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(Topology, "model_validate", classmethod(counting))
    return calls


def test_every_round_reads_a_fresh_copy_but_the_topology_is_parsed_once(validations: list[int]) -> None:
    first = stored.topology(base("once"))
    for _ in range(10):
        assert stored.topology(base("once")) is first
    assert len(validations) == 1


def test_needed_executors_each_round_validates_and_plans_once(validations: list[int]) -> None:
    executors = {needed_executors(base("rounds")) for _ in range(10)}
    assert len(executors) == 1 and len(validations) == 1


def test_a_resubmission_or_another_topology_under_the_name_is_parsed_anew() -> None:
    one = stored.topology(base("again"))
    other_spec = {**SPEC, "numWorkers": 3}
    # another cluster in the same process, same name, same (fake) launch time: its own spec
    assert stored.topology(base("again", other_spec)).spec.num_workers == 3
    assert stored.topology(base("again", launched=2000.0)) is not one


def test_the_plan_is_built_once_per_executor_count() -> None:
    plan = stored.plan(base("plans"))
    assert stored.plan(base("plans")) is plan
    assert plan == build_plan(Topology.model_validate(base("plans").topology), {}, base("plans").component_executors)
    rebalanced = stored.plan(base("plans", executors={"s": 1, "b": 4, "__acker": 2}))
    assert rebalanced is not plan and len(rebalanced.component_executors["b"]) == 4


def test_the_cache_is_bounded_least_recently_used_out_first() -> None:
    cache: stored._Cache[int] = stored._Cache(2)
    a, b, c = {"a": 1}, {"b": 1}, {"c": 1}
    cache.put(("a",), a, 1)
    cache.put(("b",), b, 2)
    assert cache.get(("a",), dict(a)) == 1  # a used last: b goes first
    cache.put(("c",), c, 3)
    assert cache.get(("b",), b) is None and cache.get(("a",), a) == 1 and cache.get(("c",), c) == 3
    assert cache.get(("a",), {"a": 2}) is None  # a different stored dict under the key
