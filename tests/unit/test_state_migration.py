"""Where a task's state lives across graph upgrades (squall.checkpoint.task_state): under
`<component>#<index>`, which a graph change does not move although it renumbers task ids; a state
an older Squall kept under `<component>-<task>` is copied there the first time the task opens it,
from its own task id (a roll to this version) or from the id the launch before the upgrade gave
its index (StormBase.state_tasks, conf squall.state.legacy.tasks). The memory provider, on plain
values."""

from __future__ import annotations

import pytest
from squall.checkpoint import LEGACY_TASKS_KEY, task_state
from squall.statebackend import (
    KeyValueState,
    MemoryProvider,
    legacy_namespace,
    namespace,
)

pytestmark = pytest.mark.unit


class Ctx:
    def __init__(self, component: str, task: int, tasks: list[int]) -> None:
        self.component_id, self.task_id, self.tasks = component, task, tasks

    def component_tasks(self, component: str) -> list[int]:
        return self.tasks if component == self.component_id else []


def committed(state: KeyValueState, txid: int, **values: int) -> None:
    for k, v in values.items():
        state.put(k, v)
    state.prepare_commit(txid)
    state.commit(txid)


def test_a_task_s_state_is_named_by_its_component_and_index_not_its_task_id() -> None:
    provider = MemoryProvider()
    committed(task_state(provider, {}, Ctx("count", 7, [6, 7])), 1, a=1)
    assert namespace("count", 1) == "count#1"
    assert dict(provider.state("count#1")) == {"a": 1}
    # the same index under other task ids (a bolt added before it in the graph) finds it again
    assert dict(task_state(provider, {}, Ctx("count", 10, [9, 10]))) == {"a": 1}
    assert task_state(provider, {}, Ctx("count", 10, [9, 10])).committed_txid() == 1


def test_an_older_squall_s_state_is_copied_from_the_task_s_own_id_when_no_upgrade_moved_it() -> None:
    provider = MemoryProvider()
    committed(provider.state(legacy_namespace("count", 7)), 5, a=3)
    assert legacy_namespace("count", 7) == "count-7"
    state = task_state(provider, {}, Ctx("count", 7, [6, 7]))
    assert dict(state) == {"a": 3} and state.committed_txid() == 5
    assert dict(provider.state("count#1")) == {"a": 3}
    # copied once: what the task commits next is not overwritten by the old copy
    committed(state, 6, a=4)
    assert dict(task_state(provider, {}, Ctx("count", 7, [6, 7]))) == {"a": 4}
    assert dict(provider.state("count-7")) == {"a": 3}  # left for an older Squall


def test_after_a_graph_upgrade_the_old_launch_s_task_ids_say_where_an_older_state_is() -> None:
    """count had tasks 5, 6; a bolt added before it moved them to 6, 7: index 1 (now task 7)
    takes count-6's state, not count-7's (which the old launch's index 2 would have been)."""
    provider = MemoryProvider()
    committed(provider.state("count-6"), 2, b=2)
    committed(provider.state("count-7"), 2, wrong=1)
    conf = {LEGACY_TASKS_KEY: {"count": [5, 6]}}
    assert dict(task_state(provider, conf, Ctx("count", 7, [6, 7]))) == {"b": 2}
    # a component the old launch did not have finds nothing there
    committed(provider.state("tap-3"), 1, stale=1)
    assert dict(task_state(provider, conf, Ctx("tap", 3, [3]))) == {}


def test_a_prepared_transaction_is_carried_so_that_a_commit_can_roll_it_forward() -> None:
    provider = MemoryProvider()
    old = provider.state("count-1")
    old.put("a", 1)
    old.prepare_commit(1)
    state = task_state(provider, {}, Ctx("count", 1, [1]))
    assert dict(state) == {}
    state.commit(1)  # a COMMIT rolled forward after the upgrade
    assert dict(provider.state("count#0")) == {"a": 1}


def test_a_window_state_moves_with_its_suffix() -> None:
    provider = MemoryProvider()
    committed(provider.state("win-4$window"), 1, w=[1, 2])
    assert dict(task_state(provider, {}, Ctx("win", 4, [4]), "$window")) == {"w": [1, 2]}
    assert dict(provider.state("win#0$window")) == {"w": [1, 2]}
