"""`squall list|activate|deactivate|rebalance|kill --zookeeper` as a user runs them: a
subprocess per verb against a LocalCluster (real ZooKeeper, real workers, zmq), checking what the
workers do (spouts stop and resume, workers added, topology removed) and that bad input is one
line, a non-zero exit and no change."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from childproc import die_with_this_process
from helpers import (  # the integration tests' helpers (same directory)
    SquallRun,
    assigned_slots,
    id_pipeline,
    latest_beat_time,
    logs_tail,
    one_line_error,
    squall,
    totals,
    wait_for,
    wait_running,
)

from squall.models.cluster import TopologyStatus
from squall.zkserver import four_letter_word
from squall_operator.local import LocalCluster
from squall_operator.nimbus import NimbusError

pytestmark = pytest.mark.integration


def zookeeper_connections(pid: int, zk_port: int) -> list[int]:
    """The local ports of process `pid`'s established TCP connections to `zk_port` on loopback,
    read from /proc (its socket inodes, matched in its network namespace's tcp table)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = []
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, st, inode = fields[1], fields[2], fields[3], fields[9]
        if inode in inodes and st == "01" and int(remote.rpartition(":")[2], 16) == zk_port:
            ports.append(int(local.rpartition(":")[2], 16))
    return sorted(ports)


def test_verbs_steer_a_local_cluster(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    topo = id_pipeline("steered", tmp_path / "out", 0, rate=200, workers=1)
    cluster = make_cluster(nodes=2, slots=2)
    zk = ["--zookeeper", cluster.connect_string]
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["ids"]["emitted"] > 0, 60, "the spout to emit", cluster)

    listed = squall("list", *zk)
    assert listed.returncode == 0, listed.stderr
    header, rule, row = listed.stdout.splitlines()
    assert header.split() == ["Topology_name", "Status", "Num_tasks", "Num_workers", "Uptime_secs"]
    # ids 1 + pass 2 + sink 2 + one acker per worker
    assert row.split()[:4] == ["steered", "ACTIVE", "6", "1"], listed.stdout

    def emitted_after(t: float) -> int | None:
        if latest_beat_time(cluster, topo.name) <= t:
            return None
        return totals(cluster, topo.name)["ids"]["emitted"]

    done = squall("deactivate", "steered", *zk)
    assert done.returncode == 0 and "deactivated topology steered" in done.stdout, done.stderr
    assert cluster.nimbus.status(topo.name) is TopologyStatus.INACTIVE
    settled = time.time() + 1.0
    e1 = wait_for(lambda: emitted_after(settled), 30, "a heartbeat after deactivate", cluster)
    later = time.time() + 2.0
    e2 = wait_for(lambda: emitted_after(later), 30, "a later heartbeat", cluster)
    assert e2 == e1, f"the spout kept emitting while inactive: {e1} -> {e2}"

    # bad input: one line, non-zero, nothing changed
    one_line_error(squall("activate", "nosuch", *zk), 1, "no topology named 'nosuch'")
    one_line_error(squall("rebalance", "steered", "-e", "pass=3", *zk), 1, "pass has 2 tasks")
    one_line_error(squall("rebalance", "steered", "-e", "nosuch=1", *zk), 1, "no component 'nosuch'")
    one_line_error(squall("rebalance", "steered", "-e", "pass:2", *zk), 2, "malformed -e 'pass:2'")
    # 1000 workers bring 1000 ackers beside the components: past the executors a file may ask for,
    # refused by the verb and by nimbus itself (a request written to ZooKeeper by hand)
    one_line_error(squall("rebalance", "steered", "-n", "1000", *zk), 1, "over the limit of 1000")
    with pytest.raises(NimbusError, match="over the limit of 1000"):
        cluster.nimbus.rebalance(topo.name, 1000)
    one_line_error(squall("list", "--zookeeper", "127.0.0.1:1/x"), 1, "cannot reach ZooKeeper at 127.0.0.1:1")
    assert cluster.nimbus.status(topo.name) is TopologyStatus.INACTIVE
    base = cluster.state.get_storm(topo.name)
    assert base is not None and base.component_executors["pass"] == 2 and base.num_workers == 1

    done = squall("activate", "steered", *zk)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: totals(cluster, topo.name)["ids"]["emitted"] > e2 + 100, 30, "the spout to emit again", cluster)

    done = squall("rebalance", "steered", "-n", "2", "-w", "0", *zk)
    assert done.returncode == 0 and "rebalancing" in done.stdout, done.stderr
    wait_for(lambda: len(assigned_slots(cluster, topo.name)) == 2, 30, "an assignment on 2 slots", cluster)
    wait_for(lambda: cluster.nimbus.status(topo.name) is TopologyStatus.ACTIVE, 30, "ACTIVE again", cluster)
    wait_running(cluster, topo)

    done = squall("kill", "steered", "-w", "1", *zk)
    assert done.returncode == 0 and "killed topology steered" in done.stdout, done.stderr
    assert cluster.nimbus.status(topo.name) is TopologyStatus.KILLED
    assert cluster.wait_removed(topo.name, 60), "not removed" + logs_tail(cluster)
    wait_for(lambda: not cluster.worker_pids(topo.name), 60, "the workers to exit", cluster)
    listed = squall("list", *zk)
    assert listed.returncode == 0 and listed.stdout.strip() == "No topologies running.", listed
    assert not cluster.crashes
    assert cluster.state.request_ids() == [], "every answered request was removed"


def test_set_log_level_reaches_every_worker_and_lapses(make_cluster: Callable[..., LocalCluster],
                                                      tmp_path: Path) -> None:
    """Storm's `set_log_level`: a logger set to DEBUG for a few seconds in a running topology's
    workers logs its debug lines, then goes back to its own level by itself; bad settings are
    one line and exit 2."""
    middle = {"name": "pass", "class": "engine_components:ChattyPassBolt", "parallelism": 2,
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    # a uniform shuffle: both `pass` executors (one per worker) get tuples
    topo = id_pipeline("chatty", tmp_path / "out", 0, rate=100, workers=2, middle=middle,
                       extra={"topology.disable.loadaware.messaging": True})
    cluster = make_cluster(nodes=2, slots=1)
    zk = ["--zookeeper", cluster.connect_string]
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["pass"]["executed"] > 50, 60, "the bolt to run", cluster)

    def debug_lines() -> int:
        return sum(text.count("passing id") for text in cluster.worker_logs().values())

    assert debug_lines() == 0
    done = squall("set-log-level", "chatty", "-l", "engine_components.chatty=DEBUG:4", *zk)
    assert done.returncode == 0, done.stderr
    assert "engine_components.chatty=DEBUG for 4s" in done.stdout, done.stdout
    # both workers run a `pass` executor: both hear it
    wait_for(lambda: all("passing id" in t for t in cluster.worker_logs().values()) or None, 30,
             "debug lines from every worker", cluster)
    wait_for(lambda: all("engine_components.chatty back to" in t for t in cluster.worker_logs().values()) or None,
             30, "the level to lapse in every worker", cluster)
    settled = debug_lines()
    time.sleep(1.5)
    assert debug_lines() == settled, "debug lines after the level lapsed"

    one_line_error(squall("set-log-level", "chatty", "-l", "ROOT=LOUD", *zk), 2, "unknown log level 'LOUD'")
    one_line_error(squall("set-log-level", "chatty", *zk), 2, "give -l LOGGER=LEVEL")
    one_line_error(squall("set-log-level", "nosuch", "-l", "ROOT=INFO", *zk), 1, "no topology named 'nosuch'")
    removed = squall("set-log-level", "chatty", "-r", "ROOT", *zk)
    assert removed.returncode == 0 and "no dynamic log levels" in removed.stdout, removed.stdout + removed.stderr


def test_squall_kill_ends_squall_run(tmp_path: Path) -> None:
    """`squall run` prints where its cluster is; a `squall kill` from another shell ends the run
    cleanly (final table, exit 0), as a Ctrl-C would."""
    import re

    run = SquallRun("examples/wordcount/topology.yaml", "--duration", "240", "--no-progress")
    try:
        m = run.wait_line(r"--zookeeper (\S+)", 120)
        assert m, "squall run did not print its --zookeeper:\n" + run.text()
        where = m.group(1)
        # its ZooKeeper nodes carry a digest ACL: the line names the credentials file too
        auth = re.search(r"SQUALL_ZK_AUTH_FILE=(\S+)", m.string)
        assert auth, "squall run did not print its SQUALL_ZK_AUTH_FILE:\n" + run.text()
        env = {**os.environ, "SQUALL_ZK_AUTH_FILE": auth.group(1)}

        def running() -> bool:
            listed = squall("list", "--zookeeper", where, env=env)
            return listed.returncode == 0 and " ACTIVE " in listed.stdout
        wait_for(running, 120, "wordcount to be listed ACTIVE")
        killed = squall("kill", "wordcount", "-w", "1", "--zookeeper", where, env=env)
        assert killed.returncode == 0, killed.stderr
        code = run.proc.wait(90)
    finally:
        run.stop()
    text = run.text()
    assert code == 0, text
    assert "Traceback" not in text and "KILLED" in text, text


def test_squall_kill_w_waits_the_time_asked_under_squall_run() -> None:
    """`squall kill NAME -w 5` on a topology `squall run` runs once removed it 1.7-2.2 s after the
    verb (the run ended its own wait once no spout had a pending tuple and killed again
    with wait 0, which shortened the first kill's wait). Storm's kill waits the time given, so
    bolts can flush: the topology stays (KILLED, spouts deactivated, workers up and heartbeating)
    for the 5 s, and is removed after them."""
    import re

    from squall.state import ClusterState, ZkCredentials
    from squall_operator.verbs import parse_zookeeper

    run = SquallRun("examples/wordcount/topology.yaml", "--duration", "240", "--no-progress")
    state: ClusterState | None = None
    try:
        m = run.wait_line(r"--zookeeper (\S+)", 120)
        assert m, "squall run did not print its --zookeeper:\n" + run.text()
        where = m.group(1)
        auth = re.search(r"SQUALL_ZK_AUTH_FILE=(\S+)", m.string)
        assert auth, run.text()
        env = {**os.environ, "SQUALL_ZK_AUTH_FILE": auth.group(1)}
        hosts, root = parse_zookeeper(where)
        state = ClusterState.connect(hosts, root=root, credentials=ZkCredentials.from_file(Path(auth.group(1))))

        def running() -> bool:
            listed = squall("list", "--zookeeper", where, env=env)
            return listed.returncode == 0 and " ACTIVE " in listed.stdout
        wait_for(running, 120, "wordcount to be listed ACTIVE")

        asked = time.time()
        killed = squall("kill", "wordcount", "-w", "5", "--zookeeper", where, env=env)
        answered = time.time()
        assert killed.returncode == 0 and "killed topology wordcount" in killed.stdout, killed.stderr
        base = state.get_storm("wordcount")
        assert base is not None and base.status is TopologyStatus.KILLED, base
        # nimbus took the kill between `asked` and `answered`; the removal is due 5 s after it
        due = base.delayed_due_secs
        assert due is not None and asked + 5 - 0.5 <= due <= answered + 5 + 0.5, (asked, due, answered)

        last_fresh_beat = 0.0
        gone_at = None
        while time.time() < answered + 5 + 15:
            base = state.get_storm("wordcount")
            now = time.time()
            if base is None:
                gone_at = now
                break
            assert base.status is TopologyStatus.KILLED, base
            beats = state.get_worker_heartbeats("wordcount")
            if beats and min(b.time_secs for b in beats.values()) > now - 3:
                last_fresh_beat = now  # every worker still up during the wait
            time.sleep(0.1)
        assert gone_at is not None, "not removed within 15 s of the kill's wait\n" + run.text()
        assert gone_at - asked >= 5.0, f"removed {gone_at - asked:.1f}s after `kill -w 5`\n" + run.text()
        assert last_fresh_beat - asked >= 4.0, f"workers stopped heartbeating {last_fresh_beat - asked:.1f}s into the wait"
        code = run.proc.wait(90)
    finally:
        if state is not None:
            state.close()
        run.stop()
    text = run.text()
    assert code == 0, text
    assert "Traceback" not in text and "KILLED" in text, text
    assert "waiting for nimbus to remove it" in text, text


def test_logs_and_dump_stacks_find_the_workers_of_a_component_or_task(
        make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    """Storm UI's log viewer and jstack as verbs: `squall logs` shows the log file of the worker
    that runs a component or a task (every worker's, prefixed, without one; new lines with -f),
    `squall dump-stacks` prints every thread's stack of those workers (or a short profile), asked
    through ZooKeeper; unknown topologies, components and tasks are one line and exit 1."""
    import re
    import threading

    from squall.plan import build_plan
    from squall.worker.debugging import holders

    topo = id_pipeline("inspected", tmp_path / "out", 0, rate=50, workers=2)
    cluster = make_cluster(nodes=2, slots=1)
    zk = ["--zookeeper", cluster.connect_string]
    cluster.submit(topo)
    wait_running(cluster, topo)
    wait_for(lambda: totals(cluster, topo.name)["pass"]["executed"] > 0, 60, "the bolt to run", cluster)
    assignment = cluster.state.get_assignment(topo.name)
    assert assignment is not None
    plan = build_plan(topo, {}, None)
    both = sorted(s.key() for s in assigned_slots(cluster, topo.name))
    assert len(both) == 2
    spout_slot = assignment.executor_slots["1-1"]  # task 1: the spout `ids`
    assert holders(plan.component_tasks, assignment.executor_slots, "ids") == {spout_slot: ["ids"]}

    # dump-stacks of a component spread over both workers: both answer, with every thread
    dump = squall("dump-stacks", "inspected", "pass", *zk)
    assert dump.returncode == 0, dump.stdout + dump.stderr
    headers = re.findall(r"^==== worker (\S+) on \S+ \(pid \d+\), running pass ====$", dump.stdout, re.M)
    assert sorted(headers) == both, dump.stdout
    assert dump.stdout.count('"MainThread" ident=') == 2 and '"squall-debug" ident=' in dump.stdout
    assert "squall/worker/" in dump.stdout, dump.stdout[:3000]
    # the squall-debug thread answered on its worker's own ZooKeeper session: each worker that
    # answered holds one connection to ZooKeeper (/proc), and the server shows one session for it
    zk_port = int(cluster.connect_string.partition("/")[0].rpartition(":")[2])
    pids = [int(p) for p in re.findall(r"^==== worker \S+ on \S+ \(pid (\d+)\)", dump.stdout, re.M)]
    assert len(pids) == 2, dump.stdout[:500]
    sessions = four_letter_word(zk_port, "cons")
    for pid in pids:
        ports = zookeeper_connections(pid, zk_port)
        assert len(ports) == 1, f"worker pid {pid} has {len(ports)} ZooKeeper connections (ports {ports})"
        assert re.search(rf"/127\.0\.0\.1:{ports[0]}\[\d+\]\(.*sid=0x[0-9a-f]+", sessions), sessions
    # a task: the one worker running its executor
    one = squall("dump-stacks", "inspected", "1", *zk)
    assert one.returncode == 0, one.stderr
    assert re.findall(r"^==== worker (\S+) ", one.stdout, re.M) == [spout_slot], one.stdout[:500]
    # a short profile instead of the stacks
    prof = squall("dump-stacks", "inspected", "ids", "--profile", "0.5", *zk)
    assert prof.returncode == 0, prof.stderr
    assert "samples over 0.5s" in prof.stdout and "\nMainThread;" in prof.stdout, prof.stdout[:2000]

    # logs: the spout's worker's log file, its last lines
    spout_log = next(p for n, p in ((p.name, p) for p in cluster.workdir.glob("worker-*.log")) if spout_slot in n)
    shown = squall("logs", "inspected", "ids", "--tail", "3", *zk)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert 0 < len(lines) <= 3 and all(line in spout_log.read_text() for line in lines), shown.stdout
    everything = squall("logs", "inspected", *zk)
    assert everything.returncode == 0, everything.stderr
    assert {line.split(" ", 1)[0] for line in everything.stdout.splitlines()} == {f"[{s}]" for s in both}

    # -f: new lines as the worker writes them (a dynamic log level is logged at WARNING)
    follow = subprocess.Popen([sys.executable, "-m", "squall_operator", "logs", "inspected", "1", "-f",
                               "--tail", "0", *zk], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=die_with_this_process())
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(follow.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        time.sleep(3)  # the follower is past the file's end
        assert squall("set-log-level", "inspected", "-l", "squall.followed=INFO:2", *zk).returncode == 0
        wait_for(lambda: any("logger squall.followed set to INFO" in line for line in seen) or None, 30,
                 "the followed log to show the new line", cluster)
        assert follow.poll() is None, follow.stderr.read()  # type: ignore[union-attr]
    finally:
        follow.terminate()
        follow.wait(10)

    # what the verbs run inside a worker pod on Kubernetes (pod exec): the same question, as JSON
    import json

    host, _, root = cluster.connect_string.partition("/")
    inside = subprocess.run([sys.executable, "-m", "squall.worker.debugging", "--zookeeper", host, "--root",
                             "/" + root, "--topology", "inspected", "--target", "pass", "--action", "stacks"],
                            capture_output=True, text=True, timeout=60)
    assert inside.returncode == 0, inside.stdout + inside.stderr
    answer = json.loads(inside.stdout)
    assert sorted(answer["holders"]) == both and sorted(answer["answers"]) == both and answer["missing"] == []
    assert all('"MainThread"' in a["answer"] for a in answer["answers"].values())
    where = subprocess.run([sys.executable, "-m", "squall.worker.debugging", "--zookeeper", host, "--root",
                            "/" + root, "--topology", "inspected", "--target", "9999"],
                           capture_output=True, text=True, timeout=60)
    assert where.returncode == 1 and "no task 9999" in json.loads(where.stdout)["error"], where.stdout

    one_line_error(squall("logs", "nosuch", *zk), 1, "no topology named 'nosuch'")
    one_line_error(squall("logs", "inspected", "cuont", *zk), 1, "no component 'cuont' (it has ids, pass, sink)")
    one_line_error(squall("dump-stacks", "inspected", "999", *zk), 1, "no task 999")
    one_line_error(squall("dump-stacks", "nosuch", *zk), 1, "no topology named 'nosuch'")
