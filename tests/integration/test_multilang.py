"""Components in other languages on real workers, with Storm's own published adapters
(storm.js, storm.py, storm.rb from org.apache.storm:multilang-*, fetched by scripts/setup): a
JavaScript bolt, a Python spout and bolt and a Ruby spout and bolt declared with `shell` in the
topology, with acking and replay.

One LocalCluster (one worker process per topology, the session's ZooKeeper) serves the module;
each test runs its topology and kills it."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.multilang import adapters
from squall_operator.local import LocalCluster
from helpers import (  # the integration tests' helpers (same directory)
    TOPOLOGIES,
    read_spout,
    stop_topology,
    topology,
    wait_for,
    wait_running,
    wait_spout_done,
)

pytestmark = pytest.mark.integration

E = "engine_components"


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    for name in ("storm.js", "storm.py"):
        adapters.require(name)  # else: what to run to fetch them
    workdir = tmp_path_factory.mktemp("multilang-cluster")
    c = LocalCluster(zookeeper=zookeeper.connect_string, workdir=str(workdir), nodes=1, slots=2,
                     search_paths=[str(TOPOLOGIES)])
    c.start()
    try:
        yield c
    finally:
        c.shutdown()



def assert_children_gone(markers: list[Path]) -> None:
    """No shell child named by its start marker (`<name>-<pid>`) is alive (a zombie is dead)."""
    time.sleep(0.5)
    for marker in markers:
        pid = int(marker.name.rsplit("-", 1)[1])
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), pid

def test_a_javascript_bolt_on_storm_js_forwards_and_acks_every_tuple(cluster: LocalCluster, tmp_path: Path) -> None:
    n = 400
    out = tmp_path / "out"
    spec = {
        "numWorkers": 1,
        "messageTimeoutSecs": 20,
        "maxSpoutPending": 100,
        "spouts": [{"name": "ids", "class": f"{E}:IdSpout"}],
        "bolts": [
            {"name": "tag", "parallelism": 2, "shell": {"command": ["node", "ml_tag.js"], "files": ["ml_tag.js"]},
             "outputs": [{"fields": ["id"]}], "inputs": [{"component": "ids"}]},
            {"name": "sink", "class": f"{E}:SinkBolt", "inputs": [{"component": "tag", "grouping": "fields",
                                                                   "fields": ["id"]}]},
        ],
    }
    topo = topology("ml-js", spec, {"test.count": n, "test.out": str(out)})
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_spout_done(out, cluster, 60)
    stop_topology(cluster, topo.name)
    spout = read_spout(out, cluster)
    assert spout["acked"] == list(range(n))
    logs = "\n".join(cluster.worker_logs().values())
    # storm.js's log command reached the worker's log, from both tasks
    assert logs.count("tag bolt ready, task") == 2, logs[-3000:]
    assert not cluster.crashes


def test_a_ruby_spout_and_bolt_on_storm_rb_replay_what_the_bolt_fails(cluster: LocalCluster, tmp_path: Path) -> None:
    """Storm's storm.rb on both ends: the Ruby spout emits with message ids, the Ruby bolt fails
    each id ending in 7 once and forwards and acks the rest anchored, and the spout's fail
    replays them, so every id is acked at the Ruby spout."""
    adapters.require("storm.rb")
    assert shutil.which("ruby"), "no ruby on PATH: scripts/setup installs Debian's ruby"
    n = 300
    out = tmp_path / "out"
    out.mkdir()
    spec = {
        "numWorkers": 1,
        "messageTimeoutSecs": 20,
        "maxSpoutPending": 50,
        "spouts": [{"name": "ids", "shell": {"command": ["ruby", "ml_ids.rb"], "files": ["ml_ids.rb"]},
                    "outputs": [{"fields": ["id"]}]}],
        "bolts": [
            {"name": "tag", "parallelism": 2, "shell": {"command": ["ruby", "ml_tag.rb"], "files": ["ml_tag.rb"]},
             "outputs": [{"fields": ["id"]}], "inputs": [{"component": "ids", "grouping": "fields",
                                                           "fields": ["id"]}]},
            {"name": "sink", "class": f"{E}:SinkBolt", "inputs": [{"component": "tag"}]},
        ],
    }
    topo = topology("ml-rb", spec, {"test.count": n, "test.out": str(out)})
    cluster.submit(topo)
    wait_running(cluster, topo)
    done = wait_for(lambda: list(out.glob("mlrbspout-*.json")), 90, "every id acked at the Ruby spout", cluster, 0.2)
    spout = json.loads(done[0].read_text())
    logs = "\n".join(cluster.worker_logs().values())
    stop_topology(cluster, topo.name)
    assert spout["acked"] == list(range(n))
    # each id ending in 7 was failed once by its bolt task and replayed
    assert spout["failed"] == n // 10
    # storm.rb's log command reached the worker's log, from the spout and both bolt tasks
    assert logs.count("ruby spout ready, task") == 1, logs[-3000:]
    assert logs.count("ruby bolt ready, task") == 2, logs[-3000:]
    assert not cluster.crashes


def test_a_python_spout_and_a_crashing_then_hanging_python_bolt_on_storm_py_lose_nothing(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    n, after = 300, 40
    out = tmp_path / "out"
    out.mkdir()
    spec = {
        "numWorkers": 1,
        "messageTimeoutSecs": 10,
        "maxSpoutPending": 50,
        "spouts": [{"name": "ids", "shell": {"command": ["python3", "ml_ids.py"], "files": ["ml_ids.py"]},
                    "outputs": [{"fields": ["id"]}]}],
        "bolts": [
            {"name": "flaky", "shell": {"command": ["python3", "ml_flaky.py"], "files": ["ml_flaky.py"]},
             "outputs": [{"fields": ["id"]}], "inputs": [{"component": "ids"}],
             # the hung process is given up on after 2 s (Storm's key)
             "config": {"topology.subprocess.timeout.secs": 2}},
            {"name": "sink", "class": f"{E}:SinkBolt", "inputs": [{"component": "flaky"}]},
        ],
    }
    topo = topology("ml-py", spec, {"test.count": n, "test.out": str(out), "test.after": after})
    cluster.submit(topo)
    wait_running(cluster, topo)
    done = wait_for(lambda: list(out.glob("mlspout-*.json")), 90, "every id acked at the Python spout", cluster, 0.2)
    spout = json.loads(done[0].read_text())
    starts = sorted(out.glob("mlflaky-*"))
    logs = "\n".join(cluster.worker_logs().values())
    # the child's death is the component's error (ZooKeeper: the UI's, the Topology's); the hang
    # soon after is in the log (the error throttle may keep it out of ZooKeeper)
    errors = [e.error for e in cluster.state.errors(topo.name, "flaky")]
    stop_topology(cluster, topo.name)
    assert any("ShellError: flaky task " in e and "exited with code 3" in e for e in errors), errors
    # every id acked, after the replays of what the dead and the hung process held
    assert spout["acked"] == list(range(n))
    assert spout["failed"] >= 1
    # the bolt's process was started three times: it died, then it hung
    assert len(starts) == 3, starts
    assert "exited with code 3" in logs, logs[-3000:]
    assert "sent nothing for 2 s (topology.subprocess.timeout.secs)" in logs, logs[-3000:]
    # the worker itself never restarted: the component restarted its process
    assert not cluster.crashes
    # no process of the component outlives its topology
    assert_children_gone(starts)


def test_an_idle_shell_bolt_is_heartbeated_and_its_hung_child_replaced(cluster: LocalCluster, tmp_path: Path) -> None:
    """Storm's ShellBolt heartbeat on a real worker: once the spout has no more ids the bolt is
    idle, its executor heartbeats the child every second, and the first child, which hangs on
    that heartbeat, is reported and killed after topology.subprocess.timeout.secs and a new one
    started; the worker never restarts."""
    n = 50
    out = tmp_path / "out"
    out.mkdir()
    spec = {
        "numWorkers": 1,
        "messageTimeoutSecs": 20,
        "spouts": [{"name": "ids", "class": f"{E}:IdSpout"}],
        "bolts": [
            {"name": "idle", "shell": {"command": ["python3", "ml_idle_hang.py"], "files": ["ml_idle_hang.py"]},
             "outputs": [{"fields": ["id"]}], "inputs": [{"component": "ids"}],
             "config": {"topology.subprocess.timeout.secs": 2}},
            {"name": "sink", "class": f"{E}:SinkBolt", "inputs": [{"component": "idle"}]},
        ],
    }
    topo = topology("ml-idle", spec, {"test.count": n, "test.out": str(out)})
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_spout_done(out, cluster, 60)
    # idle now: the hung child is given up on within about 1 s (the heartbeat) + 2 s
    starts = wait_for(lambda: len(s := sorted(out.glob("mlidle-*"))) >= 2 and s, 30,
                      "the hung child to be replaced", cluster, 0.2)
    logs = "\n".join(cluster.worker_logs().values())
    stop_topology(cluster, topo.name)
    assert read_spout(out, cluster)["acked"] == list(range(n))
    assert "sent nothing for 2 s (topology.subprocess.timeout.secs)" in logs, logs[-3000:]
    assert not cluster.crashes
    # the hung child was killed, and the later one ended with its topology
    assert_children_gone(starts)
