"""A graph upgrade of a running topology on the local cluster (issue 30, item 3): `squall update
FILE --zookeeper ...` with a bolt added to a running id pipeline, against real worker processes
on the session's ZooKeeper. The spouts are deactivated, drained until their heartbeats say
nothing is pending, the new graph is launched with a new launch time, the workers of the old
launch are replaced, and the spouts go on: every message id is acked in the end and the new bolt
receives tuples. A stateful topology's graph change is refused with its reason and changes
nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

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

pytestmark = pytest.mark.integration


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
    done = squall("update", str(write_yaml(data, tmp_path / "grow.yaml")), "--zookeeper", cluster.connect_string,
                  timeout=120)
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == ("topology grow: upgrading (added tap): spouts deactivated; the new graph is launched "
                        "once nothing is pending, after rebalanceWaitSecs at the most"), done.stdout
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


def test_a_stateful_topology_s_graph_change_is_refused_with_its_reason(
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
    data["spec"]["bolts"].append({"name": "tap", "class": f"{COMPONENTS}:PassBolt",
                                  "inputs": [{"component": "ids", "grouping": "shuffle"}]})
    refused = squall("update", str(write_yaml(data, tmp_path / "frozen.yaml")), "--zookeeper", cluster.connect_string)
    one_line_error(refused, 1, "added tap", "refused: ids, win are stateful", "final checkpoint")
    # nimbus refuses it too (the operator's path and a request that skipped the CLI's check)
    with pytest.raises(NimbusError, match="ids, win are stateful"):
        cluster.nimbus.update(topo.name, Topology.model_validate(data))
    assert cluster.state.get_storm(topo.name) == before
    stop_topology(cluster, topo.name)
