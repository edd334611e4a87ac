"""A spec change applied to a running topology on the local cluster: `squall
update FILE --zookeeper ...` as a user runs it, against real worker processes on the session's
ZooKeeper. maxSpoutPending changes live (the spouts' pending, read from the heartbeats, falls
under the new bound with no worker or executor restarted), a bolt's config restarts that bolt's
executors in place (each new executor is prepared with the new value, in the same worker
processes), and every message id is acked in the end; an update of a topology that is not running is
refused in one line and changes nothing (a graph change runs as an upgrade:
test_graph_upgrade.py). The message timeout and the tick period change live too: held trees fail after
the new timeout, ticks come at the new period."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import (  # the integration tests' helpers (same directory)
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

from squall.models.v1alpha1 import Topology
from squall_operator.local import LocalCluster

pytestmark = pytest.mark.integration


def spout_pending(cluster: LocalCluster, name: str) -> int:
    beats = cluster.state.get_worker_heartbeats(name)
    return sum(ex.pending for beat in beats.values() for ex in beat.executors.values() if ex.component == "ids")


def prepared(out: Path) -> list[tuple[int, int, str]]:
    path = out / "prepared.txt"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(int(t), int(pid), tag) for t, pid, tag in rows]


def test_squall_update_changes_max_spout_pending_live_and_restarts_a_bolt_with_no_id_lost(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    middle = {"name": "pass", "class": "liveupdate_components:TagPassBolt", "parallelism": 2,
              "config": {"test.tag": "one", "test.sleep_ms": 1},
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    topo = id_pipeline("live", out, 10**9, workers=2, timeout=30, middle=middle, extra={"test.stoppable": True})
    cluster = make_cluster(nodes=1, slots=2)
    zk = ["--zookeeper", cluster.connect_string]
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= 300, 60, "the first acks", cluster)
    # the bolt is slower than the spout: the spout's pending sits at its bound
    wait_for(lambda: spout_pending(cluster, topo.name) > 100, 30, "the spout's pending near 500", cluster)
    pids = cluster.worker_pids(topo.name)
    assert sorted(tag for _t, _p, tag in prepared(out)) == ["one", "one"]

    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"]["maxSpoutPending"] = 20
    data["spec"]["bolts"][0]["config"]["test.tag"] = "two"
    t0 = time.monotonic()
    done = squall("update", str(write_yaml(data, tmp_path / "live.yaml")), *zk)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("topology live: live: maxSpoutPending 500 -> 20; "
                                   "executors restarted: pass (test.tag)"), done.stdout

    # the bolt's executors restart in place, prepared with the new value
    wait_for(lambda: sorted(tag for _t, _p, tag in prepared(out)) == ["one", "one", "two", "two"], 30,
             "both pass executors prepared with test.tag two", cluster)
    restarted = time.monotonic() - t0
    assert {p for _t, p, tag in prepared(out) if tag == "two"} <= set(pids.values()), "a worker was replaced"
    # the spout's bound is live: its pending falls under 20 (three heartbeats in a row)
    lows: list[int] = []

    def under_bound() -> bool:
        lows.append(spout_pending(cluster, topo.name))
        return len(lows) >= 3 and all(p <= 20 for p in lows[-3:])
    wait_for(under_bound, 30, "the spout's pending under the new bound", cluster, 1.0)
    bounded = time.monotonic() - t0
    start = totals(cluster, topo.name)["ids"]["acked"]
    wait_for(lambda: totals(cluster, topo.name)["ids"]["acked"] >= start + 300, 60, "acks after the update", cluster)

    # a file of another topology is refused, in one line, and changes nothing (a graph change
    # runs as an upgrade: tests/integration/test_graph_upgrade.py)
    other = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    refused = squall("update", str(write_yaml(other, tmp_path / "other.yaml")), "--name", "nosuch", *zk)
    one_line_error(refused, 1, "no topology named 'nosuch'")
    assert refused.stdout == ""
    base = cluster.state.get_storm(topo.name)
    assert base is not None and Topology.model_validate(base.topology).spec.max_spout_pending == 20

    (out / "stop").write_text("stop")
    wait_spout_done(out, cluster, 120)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    print(f"UPDATE restarted in {restarted:.1f}s, bounded in {bounded:.1f}s, pending samples {lows}, "
          f"ids {spout['limit']}, failed {spout['failed']}")
    assert spout["acked"] == list(range(spout["limit"])), "an id was lost" + logs_tail(cluster)
    assert spout["opens"] == 1, "the spout was restarted"
    logs = "\n".join(cluster.worker_logs().values())
    assert "spec change applied" in logs and "did not finish in time" not in logs
    assert cluster.worker_pids(topo.name) == {} and not cluster.crashes


def test_the_message_timeout_and_the_tick_change_live(make_cluster: Callable[..., LocalCluster],
                                                       tmp_path: Path) -> None:
    """messageTimeoutSecs 30 -> 1 and tickTupleFreqSecs 2 -> 0.25 on a running topology whose
    bolt acks nothing: its trees, which waited for the 30 s timeout, now fail after about a
    second, and the bolt's ticks come 8 times as often, with no executor restarted."""
    out = tmp_path / "out"
    spec = {
        "numWorkers": 1, "messageTimeoutSecs": 30, "tickTupleFreqSecs": 2, "maxSpoutPending": 100,
        "spouts": [{"name": "ids", "class": "engine_components:IdSpout"}],
        "bolts": [{"name": "hold", "class": "liveupdate_components:TickHoldBolt",
                   "inputs": [{"component": "ids", "grouping": "shuffle"}]}],
    }
    topo = topology("timers", spec, {"test.rate": 50, "test.out": str(out)})
    cluster = make_cluster(nodes=1, slots=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    ticks = out / "ticks.txt"

    def tick_times() -> list[float]:
        return [float(x) for x in ticks.read_text().split()] if ticks.exists() else []
    wait_for(lambda: len(tick_times()) >= 2, 30, "two ticks", cluster)
    assert totals(cluster, topo.name)["ids"]["failed"] == 0
    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"].update(messageTimeoutSecs=1, tickTupleFreqSecs=0.25)
    done = squall("update", str(write_yaml(data, tmp_path / "timers.yaml")), "--zookeeper", cluster.connect_string)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("topology timers: live: messageTimeoutSecs 30 -> 1, "
                                   "tickTupleFreqSecs 2 -> 0.25"), done.stdout
    t0 = time.monotonic()
    wait_for(lambda: totals(cluster, topo.name)["ids"]["failed"] > 0, 15, "held trees timing out", cluster)
    failed_after = time.monotonic() - t0
    before = len(tick_times())
    time.sleep(2.0)
    gaps = [b - a for a, b in zip(tick_times()[before:], tick_times()[before + 1:])]
    print(f"TIMERS first failure {failed_after:.1f}s after the update, tick gaps {gaps}")
    assert failed_after < 10, "the trees waited for the old timeout"
    assert len(gaps) >= 4 and max(gaps) < 1.0, gaps
    logs = "\n".join(cluster.worker_logs().values())
    assert "executors restarted" not in logs and not cluster.crashes
    stop_topology(cluster, topo.name)
