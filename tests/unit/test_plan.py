"""squall.plan: executor ranges, task numbering, the system topology (__acker and its streams)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from squall.builder import TopologyBuilder
from squall.models import Grouping, StreamSpec, Topology
from squall.plan import (
    ACK_ACK_STREAM,
    ACK_FAIL_STREAM,
    ACK_INIT_STREAM,
    ACKER,
    SYSTEM,
    TICK_STREAM,
    Subscription,
    build_plan,
    executor_ranges,
)
from squall.validation import declared_streams, parse_topology

pytestmark = pytest.mark.unit

FX = "fixtures_components"
ACK_STREAMS = (ACK_INIT_STREAM, ACK_ACK_STREAM, ACK_FAIL_STREAM)


def streams_of(topo: Topology) -> dict[str, dict[str, StreamSpec]]:
    return {c.name: declared_streams(c) for c in topo.spec.components}


def wordcount(**build: object) -> Topology:
    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", f"{FX}:SentenceSpout", 2, outputs=["sentence"])
    b.set_bolt("split", f"{FX}:SplitBolt", 3, num_tasks=7, outputs=["word"]).shuffle_grouping(
        "sentences"
    )
    b.set_bolt("count", f"{FX}:CountBolt", 2, num_tasks=4, outputs=["word", "count"]).fields_grouping(
        "split", ["word"]
    )
    return b.build(**build)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# executor_ranges
# --------------------------------------------------------------------------------------------


def test_executor_ranges_seed_001_example() -> None:
    assert executor_ranges(range(1, 11), 5) == ((1, 2), (3, 4), (5, 6), (7, 8), (9, 10))


def test_executor_ranges_uneven_split_puts_larger_ranges_first() -> None:
    assert executor_ranges(range(1, 8), 3) == ((1, 3), (4, 5), (6, 7))
    assert executor_ranges((5, 6, 7, 8, 9, 10, 11), 3) == ((5, 7), (8, 9), (10, 11))
    assert executor_ranges(range(1, 11), 4) == ((1, 3), (4, 6), (7, 8), (9, 10))


@pytest.mark.parametrize("n_tasks", range(1, 13))
@pytest.mark.parametrize("n_exec", range(1, 14))
def test_executor_ranges_cover_tasks_contiguously(n_tasks: int, n_exec: int) -> None:
    tasks = tuple(range(20, 20 + n_tasks))
    ranges = executor_ranges(tasks, n_exec)
    assert len(ranges) == min(n_exec, n_tasks)
    covered = [t for lo, hi in ranges for t in range(lo, hi + 1)]
    assert tuple(covered) == tasks
    sizes = [hi - lo + 1 for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


def test_executor_ranges_edge_cases() -> None:
    assert executor_ranges((), 3) == ()
    assert executor_ranges((1, 2, 3), 0) == ((1, 3),)
    assert executor_ranges((1, 2), 10) == ((1, 1), (2, 2))


# --------------------------------------------------------------------------------------------
# task numbering
# --------------------------------------------------------------------------------------------


def test_tasks_numbered_in_sorted_component_order_with_acker_first() -> None:
    topo = wordcount(num_workers=2)
    plan = build_plan(topo, streams_of(topo))
    # sorted: __acker, count, sentences, split
    assert plan.component_tasks == {
        ACKER: (1, 2),
        "count": (3, 4, 5, 6),
        "sentences": (7, 8),
        "split": (9, 10, 11, 12, 13, 14, 15),
    }
    assert list(plan.component_tasks) == [ACKER, "count", "sentences", "split"]
    assert plan.task_component == {t: c for c, ts in plan.component_tasks.items() for t in ts}
    assert plan.acker_tasks == (1, 2)
    assert plan.spouts == frozenset({"sentences"})
    assert plan.component_executors == {
        ACKER: ((1, 1), (2, 2)),
        "count": ((3, 4), (5, 6)),
        "sentences": ((7, 7), (8, 8)),
        "split": ((9, 11), (12, 13), (14, 15)),
    }
    assert plan.executors == tuple(
        sorted(e for es in plan.component_executors.values() for e in es)
    )
    assert plan.executor_component((12, 13)) == "split"
    assert plan.executor_component((1, 1)) == ACKER
    assert plan.topology_id == "wordcount"


def test_numbering_does_not_depend_on_declaration_order() -> None:
    a = TopologyBuilder("t")
    a.set_spout("zeta", f"{FX}:SentenceSpout", 2)
    a.set_bolt("alpha", f"{FX}:SplitBolt", 3).shuffle_grouping("zeta")
    a.set_bolt("mid", f"{FX}:CountBolt", 1).shuffle_grouping("alpha")
    b = TopologyBuilder("t")
    b.set_spout("zeta", f"{FX}:SentenceSpout", 2)
    b.set_bolt("mid", f"{FX}:CountBolt", 1).shuffle_grouping("alpha")
    b.set_bolt("alpha", f"{FX}:SplitBolt", 3).shuffle_grouping("zeta")
    pa = build_plan(a.build(num_ackers=1), {})
    pb = build_plan(b.build(num_ackers=1), {})
    assert pa.component_tasks == pb.component_tasks == {
        ACKER: (1,),
        "alpha": (2, 3, 4),
        "mid": (5,),
        "zeta": (6, 7),
    }


def test_numbering_is_plain_sorted_order_even_for_digit_names() -> None:
    # DNS labels may start with a digit, which sorts before "_": the rule is sorted order
    b = TopologyBuilder("t")
    b.set_spout("spout", f"{FX}:SentenceSpout")
    b.set_bolt("9lives", f"{FX}:SplitBolt").shuffle_grouping("spout")
    plan = build_plan(b.build(num_ackers=1), {})
    assert list(plan.component_tasks) == sorted(["9lives", ACKER, "spout"])
    assert plan.component_tasks == {"9lives": (1,), ACKER: (2,), "spout": (3,)}


def test_default_ackers_is_num_workers() -> None:
    topo = wordcount(num_workers=3)
    assert topo.spec.num_ackers is None
    plan = build_plan(topo, streams_of(topo))
    assert plan.component_tasks[ACKER] == (1, 2, 3)
    assert plan.acker_tasks == (1, 2, 3)
    assert plan.component_executors[ACKER] == ((1, 1), (2, 2), (3, 3))
    one = wordcount()
    assert build_plan(one, streams_of(one)).acker_tasks == (1,)


def test_num_ackers_overrides_the_default() -> None:
    topo = wordcount(num_workers=3, num_ackers=5)
    plan = build_plan(topo, streams_of(topo))
    assert plan.acker_tasks == (1, 2, 3, 4, 5)
    assert plan.component_tasks["count"] == (6, 7, 8, 9)


def test_no_ackers_means_no_acker_and_no_ack_streams() -> None:
    topo = wordcount(num_workers=2, num_ackers=0)
    plan = build_plan(topo, streams_of(topo))
    assert ACKER not in plan.component_tasks
    assert ACKER not in plan.component_executors
    assert ACKER not in plan.streams
    assert plan.acker_tasks == ()
    assert plan.component_tasks == {
        "count": (1, 2, 3, 4),
        "sentences": (5, 6),
        "split": (7, 8, 9, 10, 11, 12, 13),
    }
    for comp, streams in plan.streams.items():
        assert not set(streams) & set(ACK_STREAMS), comp
    for comp, stream in plan.subscriptions:
        assert stream not in ACK_STREAMS and comp != ACKER
    assert set(plan.subscriptions) == {("sentences", "default"), ("split", "default")}


# --------------------------------------------------------------------------------------------
# rebalance
# --------------------------------------------------------------------------------------------


def test_rebalance_changes_executors_never_tasks() -> None:
    topo = wordcount(num_workers=2)
    before = build_plan(topo, streams_of(topo))
    after = build_plan(topo, streams_of(topo), executors={"split": 7, "count": 1, ACKER: 1})
    assert after.component_tasks == before.component_tasks
    assert after.task_component == before.task_component
    assert after.acker_tasks == before.acker_tasks
    assert after.component_executors["split"] == tuple((t, t) for t in range(9, 16))
    assert after.component_executors["count"] == ((3, 6),)
    assert after.component_executors[ACKER] == ((1, 2),)
    assert after.component_executors["sentences"] == before.component_executors["sentences"]
    assert after.subscriptions == before.subscriptions


def test_rebalance_beyond_tasks_is_capped_and_unknown_names_are_ignored() -> None:
    topo = wordcount(num_workers=2)
    plan = build_plan(topo, streams_of(topo), executors={"count": 99, "ghost": 3})
    assert plan.component_executors["count"] == ((3, 3), (4, 4), (5, 5), (6, 6))
    assert "ghost" not in plan.component_tasks


def test_plan_is_a_pure_function_of_its_inputs() -> None:
    topo = wordcount(num_workers=2)
    assert build_plan(topo, streams_of(topo)) == build_plan(topo, streams_of(topo))


# --------------------------------------------------------------------------------------------
# streams and subscriptions
# --------------------------------------------------------------------------------------------

GROUPINGS_YAML = f"""\
apiVersion: squall.io/v1alpha1
kind: Topology
metadata:
  name: groupings
spec:
  numWorkers: 1
  spouts:
    - name: src
      class: {FX}:SentenceSpout
      parallelism: 2
      outputs:
        - stream: default
          fields: [word, n]
        - stream: side
          fields: [x]
          direct: true
  bolts:
    - name: fan
      class: {FX}:CountBolt
      parallelism: 3
      inputs:
        - component: src
          grouping: fields
          fields: [word]
        - component: src
          stream: side
          grouping: direct
    - name: sink
      class: {FX}:CountBolt
      numTasks: 2
      inputs:
        - component: src
          grouping: all
        - component: fan
          grouping: custom
          customClass: fixtures_groupings:FirstFieldModulo
        - component: fan
          grouping: partialKey
          fields: [word]
"""


def groupings_plan() -> tuple[Topology, Mapping[str, Mapping[str, StreamSpec]]]:
    topo = parse_topology(GROUPINGS_YAML)
    streams = streams_of(topo)
    streams["fan"] = {"default": StreamSpec(stream="default", fields=["word", "count"])}
    return topo, streams


def test_subscriptions_list_groupings_and_target_tasks() -> None:
    topo, streams = groupings_plan()
    plan = build_plan(topo, streams)
    assert plan.component_tasks == {ACKER: (1,), "fan": (2, 3, 4), "sink": (5, 6), "src": (7, 8)}
    assert plan.subscriptions[("src", "default")] == (
        Subscription("fan", Grouping.FIELDS, ("word",), None, (2, 3, 4)),
        Subscription("sink", Grouping.ALL, None, None, (5, 6)),
    )
    assert plan.subscriptions[("src", "side")] == (
        Subscription("fan", Grouping.DIRECT, None, None, (2, 3, 4)),
    )
    assert plan.subscriptions[("fan", "default")] == (
        Subscription("sink", Grouping.CUSTOM, None, "fixtures_groupings:FirstFieldModulo", (5, 6)),
        Subscription("sink", Grouping.PARTIAL_KEY, ("word",), None, (5, 6)),
    )
    # nobody subscribes to sink
    assert not [k for k in plan.subscriptions if k[0] == "sink" and k[1] not in ACK_STREAMS]


def test_streams_keep_user_declarations_and_add_system_ones() -> None:
    topo, streams = groupings_plan()
    plan = build_plan(topo, streams)
    assert plan.streams["src"]["default"].fields == ["word", "n"]
    assert plan.streams["src"]["side"].direct is True
    assert plan.fields_index("src", "default") == {"word": 0, "n": 1}
    assert plan.fields_index("fan", "default") == {"word": 0, "count": 1}
    assert plan.fields_index("src", "nope") == {}
    assert plan.fields_index("nobody", "default") == {}
    assert plan.streams[SYSTEM] == {TICK_STREAM: StreamSpec(stream=TICK_STREAM, fields=["rate_secs"])}
    # the caller's mapping is not modified
    assert set(streams["src"]) == {"default", "side"}


def test_every_component_streams_to_the_ackers() -> None:
    topo, streams = groupings_plan()
    plan = build_plan(topo, streams)
    for comp in ("src", "fan", "sink"):
        for s in ACK_STREAMS:
            assert plan.streams[comp][s] == StreamSpec(stream=s, fields=["id", "ack-val"])
            assert plan.subscriptions[(comp, s)] == (
                Subscription(ACKER, Grouping.FIELDS, ("id",), None, (1,)),
            )
    assert set(plan.streams[ACKER]) == {ACK_ACK_STREAM, ACK_FAIL_STREAM}
    # the ackers do not ack to themselves
    assert (ACKER, ACK_INIT_STREAM) not in plan.subscriptions


def test_ackers_answer_spouts_with_direct_grouping() -> None:
    topo, streams = groupings_plan()
    plan = build_plan(topo, streams)
    for s in (ACK_ACK_STREAM, ACK_FAIL_STREAM):
        assert plan.streams[ACKER][s] == StreamSpec(stream=s, fields=["id"], direct=True)
        assert plan.subscriptions[(ACKER, s)] == (
            Subscription("src", Grouping.DIRECT, None, None, (7, 8)),
        )


def test_acker_answer_subscriptions_are_in_a_deterministic_order() -> None:
    # nimbus and every worker compute the plan separately: its content, order included, must
    # not depend on the process (a frozenset's iteration order follows the str hash seed)
    b = TopologyBuilder("many-spouts")
    names = ["s-delta", "s-alpha", "s-echo", "s-charlie", "s-bravo", "s-golf", "s-foxtrot"]
    for n in names:
        b.set_spout(n, f"{FX}:SentenceSpout")
    b.set_bolt("sink", f"{FX}:CountBolt").shuffle_grouping("s-alpha")
    plan = build_plan(b.build(num_ackers=2), {})
    for s in (ACK_ACK_STREAM, ACK_FAIL_STREAM):
        subs = plan.subscriptions[(ACKER, s)]
        assert [sub.component for sub in subs] == sorted(names)
        for sub in subs:
            assert sub.grouping is Grouping.DIRECT
            assert sub.tasks == plan.component_tasks[sub.component]


def test_multiple_ackers_fields_grouped_by_root_id() -> None:
    topo = wordcount(num_workers=2, num_ackers=3)
    plan = build_plan(topo, streams_of(topo))
    for comp in ("sentences", "split", "count"):
        for s in ACK_STREAMS:
            (sub,) = plan.subscriptions[(comp, s)]
            assert sub.component == ACKER
            assert sub.grouping is Grouping.FIELDS and sub.fields == ("id",)
            assert sub.tasks == (1, 2, 3)
