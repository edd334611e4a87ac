"""squall.plan: the acker count follows the worker count when numAckers is unset, so no
worker is left without an acker: a rebalance to more workers adds acker tasks after every
other task, so no existing task id changes; an explicit numAckers stays fixed."""

from __future__ import annotations

import pytest
from test_plan import streams_of, wordcount

from squall.plan import ACK_ACK_STREAM, ACK_INIT_STREAM, ACKER, build_plan

pytestmark = pytest.mark.unit


def test_default_ackers_grow_with_a_rebalance_to_more_workers() -> None:
    topo = wordcount(num_workers=2)
    before = build_plan(topo, streams_of(topo))
    after = build_plan(topo, streams_of(topo), executors={ACKER: 4})
    # 15 tasks before (acker 1-2, count 3-6, sentences 7-8, split 9-15): the new ackers are 16, 17
    assert after.acker_tasks == (1, 2, 16, 17)
    assert after.component_tasks[ACKER] == (1, 2, 16, 17)
    assert after.component_executors[ACKER] == ((1, 1), (2, 2), (16, 16), (17, 17))
    for comp in ("count", "sentences", "split"):
        assert after.component_tasks[comp] == before.component_tasks[comp]
        assert after.component_executors[comp] == before.component_executors[comp]
    assert after.task_component[16] == after.task_component[17] == ACKER
    # every component's acker streams reach the new acker tasks
    assert after.subscriptions[("split", ACK_INIT_STREAM)][0].tasks == (1, 2, 16, 17)
    assert after.subscriptions[(ACKER, ACK_ACK_STREAM)][0].component == "sentences"


def test_default_ackers_back_to_the_submitted_count_drop_the_added_tasks() -> None:
    topo = wordcount(num_workers=2)
    before = build_plan(topo, streams_of(topo))
    back = build_plan(topo, streams_of(topo), executors={ACKER: 2})
    assert back.component_tasks == before.component_tasks
    assert back.component_executors == before.component_executors
    fewer = build_plan(topo, streams_of(topo), executors={ACKER: 1})
    assert fewer.acker_tasks == (1, 2) and fewer.component_executors[ACKER] == ((1, 2),)


def test_explicit_num_ackers_never_adds_tasks() -> None:
    topo = wordcount(num_workers=2, num_ackers=2)
    plan = build_plan(topo, streams_of(topo), executors={ACKER: 4})
    assert plan.acker_tasks == (1, 2)
    assert plan.component_executors[ACKER] == ((1, 1), (2, 2))


def test_no_ackers_stays_no_ackers() -> None:
    topo = wordcount(num_workers=2, num_ackers=0)
    plan = build_plan(topo, streams_of(topo), executors={ACKER: 4})
    assert plan.acker_tasks == () and ACKER not in plan.component_tasks
