"""A graph upgrade of a running topology on the local cluster: `squall update
FILE --zookeeper ...` with a bolt added to a running id pipeline, against real worker processes
on the session's ZooKeeper. The spouts are deactivated, drained until their heartbeats say
nothing is pending, the new graph is launched with a new launch time, the workers of the old
launch are replaced, and the spouts go on: every message id is acked in the end and the new bolt
receives tuples. A stateful word count (Redis) gets a bolt added the same way: the checkpoint
spout's final commit ends the drain, the new graph restores each counter's state by component
name and task index although its task ids moved, and the totals equal a recount of the input.
What cannot be carried (a stateful task count, state in the memory provider) is refused with its
reason and changes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import (  # the integration tests' helpers (same directory)
    COMPONENTS,
    id_pipeline,
    logs_tail,
    one_line_error,
    read_spout,
    squall,
    stop_topology,
    topology,
    totals,
    wait_for,
    wait_running,
    wait_spout_done,
    write_yaml,
)
from squall.models.cluster import TopologyStatus
from squall.models.v1alpha1 import Topology
from squall_operator.local import LocalCluster
from squall_operator.nimbus import NimbusError
from test_stateful import (
    Committed,
    example_module,
    started,
    stateful_wordcount,
    wait_exact_end,
)

pytestmark = pytest.mark.integration


def squall_update(cluster: LocalCluster, data: dict[str, Any], path: Path) -> tuple[list[str], float]:
    """`squall update` of `data` (written to `path`) on `cluster`, which must succeed: its output
    lines and the seconds it took (the drain's end is when it returns)."""
    t0 = time.monotonic()
    done = squall("update", str(write_yaml(data, path)), "--zookeeper", cluster.connect_string, timeout=120)
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines(), took


def test_squall_update_adds_a_bolt_to_a_running_pipeline_with_no_id_lost(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    topo = id_pipeline("grow", out, 10**9, workers=2, timeout=30, extra={"test.stoppable": True})
    cluster = make_cluster(nodes=1, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 500, 60, "the first acks", cluster)
    before = cluster.state.get_storm(topo.name)
    assert before is not None
    old_pids = set(cluster.worker_pids(topo.name).values())

    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"]["bolts"].append({"name": "tap", "class": f"{COMPONENTS}:PassBolt", "parallelism": 2,
                                  "inputs": [{"component": "pass", "grouping": "shuffle"}]})
    t0 = time.monotonic()
    lines, took = squall_update(cluster, data, tmp_path / "grow.yaml")
    assert lines[0] == ("topology grow: upgrading (added tap): spouts deactivated; the new graph is launched "
                        "once nothing is pending, after rebalanceWaitSecs at the most"), lines
    assert lines[1].startswith("topology grow: upgraded ") and "new graph is launched (ACTIVE)" in lines[1], lines
    assert len(lines) == 2, lines

    after = cluster.state.get_storm(topo.name)
    assert after is not None and after.launch_time_secs > before.launch_time_secs
    assert after.status is TopologyStatus.ACTIVE and after.upgrade_topology is None
    assert "tap" in after.component_executors and after.component_executors["tap"] == 2
    assert [b.name for b in Topology.model_validate(after.topology).spec.bolts] == ["pass", "sink", "tap"]
    # every worker of the old launch was replaced; the new ones run the new graph and ack again
    wait_running(cluster, topo)
    wait_for(lambda: not old_pids & set(cluster.worker_pids(topo.name).values()), 30,
             "the old launch's workers replaced", cluster)
    wait_for(lambda: totals(cluster, topo.name)["tap"]["executed"] >= 1, 60, "the new bolt's first tuple", cluster)
    resumed = time.monotonic() - t0
    wait_for(lambda: totals(cluster, topo.name)["tap"]["executed"] >= 500, 60, "the new bolt receiving tuples",
             cluster)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 500, 60, "acks on the new graph", cluster)
    events = [e for e in cluster.nimbus.events if "Upgrad" in e]

    (out / "stop").write_text("stop")
    wait_spout_done(out, cluster, 120)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    print(f"UPGRADE squall update took {took:.1f}s ({lines[1]}); the new bolt's first tuple {resumed:.1f}s after "
          f"the update began; events {events}; "
          f"ids {spout['limit']}, failed {spout['failed']}, opens {spout['opens']}")
    assert spout["acked"] == list(range(spout["limit"])), "an id was lost" + logs_tail(cluster)
    assert spout["opens"] == 2, "the spout opened once per launch"
    assert any("nothing pending" in e for e in events), events
    assert took < 25, "the drain waited for rebalanceWaitSecs although nothing was pending"
    assert not cluster.crashes, cluster.crashes


def test_what_is_pending_at_the_drain_s_end_is_replayed_on_the_new_graph(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """A bolt slower than the spout keeps ~500 trees pending; `squall update -w 1` launches the
    new graph after 1 s with them still pending: the old launch's spout closes with them unacked,
    the new launch's spout emits them again, and every id is acked in the end."""
    out = tmp_path / "out"
    middle = {"name": "pass", "class": "liveupdate_components:TagPassBolt", "parallelism": 2,
              "config": {"test.tag": "one", "test.sleep_ms": 20},
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    topo = id_pipeline("late", out, 10**9, workers=2, timeout=30, middle=middle, extra={"test.stoppable": True})
    cluster = make_cluster(nodes=1, slots=2)
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["pending"] > 300, 60, "the spout's pending near 500", cluster)
    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    # a graph whose new bolt reads a stream that does not exist (the sink declares none) is
    # refused before anything changes: nimbus checks it with its classes
    data["spec"]["bolts"].append({"name": "tap", "class": f"{COMPONENTS}:PassBolt",
                                  "inputs": [{"component": "sink", "grouping": "shuffle"}]})
    bad = squall("update", str(write_yaml(data, tmp_path / "bad.yaml")), "--zookeeper", cluster.connect_string)
    one_line_error(bad, 1, "the new graph does not check", "'sink' declares no stream 'default'")
    base = cluster.state.get_storm(topo.name)
    assert base is not None and base.status is TopologyStatus.ACTIVE and base.upgrade_topology is None
    data["spec"]["bolts"][-1]["inputs"][0]["component"] = "pass"
    done = squall("update", str(write_yaml(data, tmp_path / "late.yaml")), "-w", "1", "--zookeeper",
                  cluster.connect_string, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "after 1s at the most" in done.stdout and "topology late: upgraded " in done.stdout, done.stdout
    (event,) = [e for e in cluster.nimbus.events if "Upgraded" in e]
    assert "the drain's wait (1s) passed with" in event and "(the spouts replay them)" in event, event
    wait_running(cluster, topo)
    (out / "stop").write_text("stop")
    wait_spout_done(out, cluster, 180)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    print(f"UPGRADE at the wait's end: {event}; ids {spout['limit']}, failed {spout['failed']}")
    assert spout["acked"] == list(range(spout["limit"])), "an id was lost" + logs_tail(cluster)
    assert not cluster.crashes, cluster.crashes


def test_a_stateful_word_count_gets_a_bolt_while_running_and_its_totals_stay_exact(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path, redis_server: Any
) -> None:
    """`squall update` adds `audit` (sorted before `count`, so every counter task's id moves by
    one) to the stateful word count mid-run. The drain ends once the spouts' trees completed,
    which for a stateful bolt means the checkpoint that holds their effects committed (the
    checkpoint spout stays active through the drain); the new launch finds each counter's state
    under `count#<index>` and the spout's position where it stopped, and the committed totals
    equal a recount of every sentence the spout read, across the upgrade."""
    limit = 4000
    topo = stateful_wordcount("swc-grow", redis_server, limit, rate=150)
    committed, cluster = started(topo, make_cluster, 2, 600)
    before = committed.totals()
    position_before = committed.position()
    assert before and position_before < limit - 1500, "the run ended before the upgrade; slow the spout down"

    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"]["bolts"].append({"name": "audit", "class": "stateful_wordcount:SplitSentence", "parallelism": 1,
                                  "inputs": [{"component": "sentences", "grouping": "shuffle"}]})
    new = Topology.model_validate(data)
    moved = Committed(new)
    assert moved.tasks["count"] != committed.tasks["count"], "the new bolt must move count's task ids"
    t0 = time.monotonic()
    lines, drained = squall_update(cluster, data, tmp_path / "grow.yaml")
    assert lines[0].startswith("topology swc-grow: upgrading (added audit)"), lines
    assert lines[1].startswith("topology swc-grow: upgraded "), lines
    events = [e for e in cluster.nimbus.events if "Upgrad" in e]
    assert any("nothing pending" in e for e in events), f"the drain waited for its end: {events}" + logs_tail(cluster)
    after = cluster.state.get_storm(topo.name)
    assert after is not None and after.state_tasks is not None  # where an older Squall's state would be
    assert after.state_tasks["count"] == list(committed.tasks["count"]), after.state_tasks
    at_launch = moved.position()
    launch_txid = max(moved.txids("sentences"))
    wait_for(lambda: totals(cluster, topo.name).get("audit", {}).get("executed", 0) >= 1, 60,
             "the new bolt's first tuple", cluster)
    first_tuple = time.monotonic() - t0
    # the new launch read on from the committed state by index: started afresh, its first commit
    # would hold position ~0 and empty counters (and the totals would come out the same in the end)
    wait_for(lambda: min(moved.txids("sentences") + moved.txids("count")) > launch_txid, 60,
             "a commit of the new launch", cluster, 0.2)
    assert moved.position() >= position_before
    assert sum(moved.totals().values()) >= sum(before.values())
    final = wait_exact_end(cluster, moved, limit, 180)
    expected = example_module().expected_counts(limit)
    print(f"STATEFUL UPGRADE drain ended (squall update returned) {drained:.1f}s after it began; the new graph's "
          f"first tuple {first_tuple:.1f}s after; committed position {at_launch} at the launch of {limit}; "
          f"totals exact: {final == expected}; events {events}")
    assert final == expected, f"differences: { {w: (final.get(w), expected.get(w)) for w in set(final) | set(expected) if final.get(w) != expected.get(w)} }" + logs_tail(cluster)
    assert totals(cluster, topo.name)["audit"]["executed"] >= (limit - at_launch) // 2
    assert not cluster.crashes, cluster.crashes
    stop_topology(cluster, topo.name)


def test_a_stateful_task_count_change_or_state_in_memory_is_refused_with_its_reason(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    spec = {
        "numWorkers": 1, "messageTimeoutSecs": 10,
        "spouts": [{"name": "ids", "class": "stateful_components:IdSpout", "stateful": True}],
        "bolts": [{"name": "win", "class": "stateful_components:WindowSums", "stateful": True,
                   "window": {"windowLength": 10}, "inputs": [{"component": "ids", "grouping": "global"}]}],
    }
    topo = topology("frozen", spec, {"test.count": 10**6, "test.rate": 50})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    before = cluster.state.get_storm(topo.name)
    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"]["bolts"][0]["numTasks"] = 3
    refused = squall("update", str(write_yaml(data, tmp_path / "tasks.yaml")), "--zookeeper", cluster.connect_string)
    one_line_error(refused, 1, "refused: win is stateful and its task count changed (1 -> 3)",
                   "cannot be carried to another count")
    with pytest.raises(NimbusError, match=r"win is stateful and its task count changed \(1 -> 3\)"):
        cluster.nimbus.update(topo.name, Topology.model_validate(data))
    # the state of this topology lives in its workers (the memory provider): an upgrade would lose it
    data["spec"]["bolts"][0].pop("numTasks")
    data["spec"]["bolts"].append({"name": "tap", "class": f"{COMPONENTS}:PassBolt",
                                  "inputs": [{"component": "ids", "grouping": "shuffle"}]})
    refused = squall("update", str(write_yaml(data, tmp_path / "frozen.yaml")), "--zookeeper", cluster.connect_string)
    one_line_error(refused, 1, "added tap", "refused: ids, win keep their state in the memory state provider")
    # nimbus refuses it too (the operator's path and a request that skipped the CLI's check)
    with pytest.raises(NimbusError, match="ids, win keep their state in the memory state provider"):
        cluster.nimbus.update(topo.name, Topology.model_validate(data))
    assert cluster.state.get_storm(topo.name) == before
    stop_topology(cluster, topo.name)
