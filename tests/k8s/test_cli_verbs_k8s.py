"""The verbs on a real API server: `kubectl squall ...` found by kubectl as a plugin and
`squall ... --kubernetes` patch or delete the Topology resource as `kubectl patch/delete` would
(the operator's reaction to those is test_operator_e2e's), list every namespace's topologies
with -A, carry a rebalance's and a kill's -w and set-log-level's settings as annotations, refuse
a rebalance beyond the tasks without patching, and report an unknown topology or an unreachable
API server in one line."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from childproc import die_with_this_process
from squall_operator.resources import LOG_LEVELS_ANNOTATION

from .cluster import Cluster
from .conftest import kget, wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "topology.yaml"
VENV_BIN = Path(sys.executable).parent

TOPOLOGY: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "steered"},
    "spec": {
        "numWorkers": 1,
        "spouts": [{"name": "words", "class": "m:S", "parallelism": 1}],
        "bolts": [{"name": "count", "class": "m:B", "parallelism": 1, "numTasks": 4,
                   "inputs": [{"component": "words", "grouping": "shuffle"}]}],
    },
}


def run(c: Cluster, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = env or c.env()
    e["PATH"] = f"{c.bin}{os.pathsep}{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    return subprocess.run(list(args), env=e, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def kubectl_squall(c: Cluster, ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run(c, str(c.bin / "kubectl"), "squall", *args, "--namespace", ns)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_verbs_patch_and_delete_the_topology(k8s_cluster: Cluster, ns: str, tmp_path: Path) -> None:
    c = k8s_cluster
    created = c.kubectl("create", "-f", str(CRD), check=False)
    try:
        # a finalizer of the test's own holds the deleted resource, standing in for the operator's
        held = {**TOPOLOGY, "metadata": {"name": "steered", "finalizers": ["test.squall.io/hold"]}}
        wait_for(lambda: c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(held),
                                   check=False).returncode == 0, 60, what="the Topology CRD to serve")
        listed = kubectl_squall(c, ns, "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[2].split()[0] == "steered", listed.stdout
        assert listed.stdout.splitlines()[0].split()[0] == "Topology_name", listed.stdout

        # --all-namespaces / -A: every namespace's topologies, with a Namespace column, as kubectl
        other_ns = f"{ns}-b"[:63]
        c.kubectl("create", "namespace", other_ns)
        try:
            other = {**TOPOLOGY, "metadata": {"name": "elsewhere"}}
            c.kubectl("apply", "-n", other_ns, "-f", "-", input=yaml.safe_dump(other))
            for listed in (kubectl_squall(c, ns, "list", "-A"),
                           run(c, str(VENV_BIN / "squall"), "list", "--kubernetes", "--all-namespaces")):
                assert listed.returncode == 0, listed.stderr
                lines = listed.stdout.splitlines()
                assert lines[0].split()[:2] == ["Namespace", "Topology_name"], listed.stdout
                rows = {tuple(line.split()[:2]) for line in lines[2:]}
                assert {(ns, "steered"), (other_ns, "elsewhere")} <= rows, listed.stdout
            # without it: the one namespace
            assert "elsewhere" not in kubectl_squall(c, ns, "list").stdout
        finally:
            c.kubectl("delete", "namespace", other_ns, "--wait=false", check=False)

        done = kubectl_squall(c, ns, "deactivate", "steered")
        assert done.returncode == 0, done.stderr
        assert kget(c, "topology", "steered", "-n", ns)["spec"]["active"] is False
        done = run(c, str(VENV_BIN / "squall"), "activate", "steered", "--kubernetes", "--namespace", ns)
        assert done.returncode == 0, done.stderr
        assert kget(c, "topology", "steered", "-n", ns)["spec"]["active"] is True

        before = kget(c, "topology", "steered", "-n", ns)
        one_line_error(kubectl_squall(c, ns, "rebalance", "steered", "-e", "count=5"), 1,
                       "count has 4 tasks, cannot run 5 executors")
        one_line_error(kubectl_squall(c, ns, "rebalance", "steered", "-e", "nosuch=1"), 1,
                       "no component 'nosuch'")
        one_line_error(kubectl_squall(c, ns, "rebalance", "steered", "-e", "count"), 2, "malformed -e")
        one_line_error(kubectl_squall(c, ns, "activate", "nosuch"), 1,
                       f"no topology named 'nosuch' in namespace '{ns}'")
        after = kget(c, "topology", "steered", "-n", ns)
        assert after["metadata"]["generation"] == before["metadata"]["generation"], "a refused verb patched"

        done = kubectl_squall(c, ns, "rebalance", "steered", "-n", "3", "-e", "count=4")
        assert done.returncode == 0, done.stderr
        spec = kget(c, "topology", "steered", "-n", ns)["spec"]
        assert spec["numWorkers"] == 3 and spec["bolts"][0]["parallelism"] == 4
        assert spec["spouts"][0]["parallelism"] == 1 and spec["bolts"][0]["numTasks"] == 4

        # an API server nobody listens on: one line, exit 1
        bad = tmp_path / "bad.kubeconfig"
        conf = yaml.safe_load(c.kubeconfig.read_text())
        conf["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
        bad.write_text(yaml.safe_dump(conf))
        one_line_error(run(c, str(VENV_BIN / "kubectl-squall"), "list", "--kubeconfig", str(bad)), 1,
                       "cannot reach the Kubernetes API server at https://127.0.0.1:1")

        # rebalance -w: the wait rides on the patch that changes the spec, as annotations naming
        # the generation that patch made (the operator honours it for that generation only)
        done = kubectl_squall(c, ns, "rebalance", "steered", "-n", "2", "-w", "5")
        assert done.returncode == 0 and "reassigned after 5s" in done.stdout, done.stderr
        got = kget(c, "topology", "steered", "-n", ns)
        assert got["spec"]["numWorkers"] == 2
        assert got["metadata"]["annotations"]["squall.io/rebalance-wait-secs"] == "5"
        assert got["metadata"]["annotations"]["squall.io/rebalance-wait-generation"] == str(
            got["metadata"]["generation"])
        # the same numbers again: nothing changes, no generation to annotate
        same = kubectl_squall(c, ns, "rebalance", "steered", "-n", "2", "-w", "1")
        assert same.returncode == 0 and "nothing to rebalance" in same.stdout, same.stderr
        assert kget(c, "topology", "steered", "-n", ns)["metadata"] == got["metadata"]
        # without -w: the rebalanceWaitSecs of the spec, the stale annotations go
        done = kubectl_squall(c, ns, "rebalance", "steered", "-n", "3")
        assert done.returncode == 0 and "after rebalanceWaitSecs" in done.stdout, done.stderr
        got = kget(c, "topology", "steered", "-n", ns)
        assert got["spec"]["numWorkers"] == 3
        assert not {"squall.io/rebalance-wait-secs", "squall.io/rebalance-wait-generation"} & set(
            got["metadata"].get("annotations") or {}), got["metadata"]
        # set-log-level: the topology's log config rides on the resource as an annotation the
        # operator copies to ZooKeeper (squall.loglevels); -r takes a logger out, and the last one
        # out removes the annotation
        import json

        done = kubectl_squall(c, ns, "set-log-level", "steered", "-l", "ROOT=DEBUG:30", "-l", "squall.engine=WARN")
        assert done.returncode == 0 and "ROOT=DEBUG for 30s" in done.stdout, done.stdout + done.stderr
        config = json.loads(kget(c, "topology", "steered", "-n", ns)["metadata"]["annotations"][LOG_LEVELS_ANNOTATION])
        assert config["ROOT"]["level"] == "DEBUG" and config["squall.engine"] == {"level": "WARN", "expires": None}
        one_line_error(kubectl_squall(c, ns, "set-log-level", "steered", "-l", "ROOT=LOUD"), 2, "unknown log level")
        for logger in ("ROOT", "squall.engine"):
            done = kubectl_squall(c, ns, "set-log-level", "steered", "-r", logger)
            assert done.returncode == 0, done.stderr
        assert LOG_LEVELS_ANNOTATION not in (kget(c, "topology", "steered", "-n", ns)["metadata"].get("annotations") or {})
        # kill -w: the wait rides on the deleted resource for the operator's kill to read
        done = kubectl_squall(c, ns, "kill", "steered", "-w", "1.5")
        assert done.returncode == 0 and "after 1.5s" in done.stdout, done.stderr
        meta = kget(c, "topology", "steered", "-n", ns)["metadata"]
        assert meta["annotations"]["squall.io/kill-wait-secs"] == "1.5" and meta.get("deletionTimestamp")
        c.kubectl("patch", "topology", "steered", "-n", ns, "--type", "merge", "-p",
                  '{"metadata":{"finalizers":null}}')
        wait_for(lambda: c.kubectl("get", "topology", "steered", "-n", ns, check=False).returncode != 0,
                 30, what="the Topology to be deleted")
        assert kubectl_squall(c, ns, "list").stdout.strip() == "No topologies running."
    finally:
        if created.returncode == 0:  # ours to remove (another test may install it by helm)
            c.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)


def test_operator_ui_actions_patch_and_delete_the_topology(k8s_cluster: Cluster, ns: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator UI's buttons (`KubernetesActions`): the topology as nimbus stored it in a
    real ZooKeeper names its namespace; the actions patch or delete that resource on the real
    API server (a rebalance's wait-time as the annotations `rebalance -w` writes), and refuse
    (with the status the API answers) a rebalance beyond the tasks and an unknown topology,
    without patching."""
    from squall.state import ClusterState
    from squall.validation import parse_topology
    from squall.zkserver import EmbeddedZooKeeper, java_available
    from squall_operator.nimbus import initial_storm_base
    from squall_operator.ui import ActionRefused, KubernetesActions

    if not java_available():
        pytest.skip("no java on PATH (the embedded ZooKeeper needs a Java runtime)")
    c = k8s_cluster
    monkeypatch.setenv("KUBECONFIG", str(c.kubeconfig))
    created = c.kubectl("create", "-f", str(CRD), check=False)
    zk = EmbeddedZooKeeper().start()
    try:
        wait_for(lambda: c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(TOPOLOGY),
                                   check=False).returncode == 0, 60, what="the Topology CRD to serve")
        with ClusterState.connect(zk.connect_string, root="/squall-ui-test") as state:
            stored = {**TOPOLOGY, "metadata": {"name": "steered", "namespace": ns}}
            state.set_storm("steered", initial_storm_base(parse_topology(stored), 0.0))
            actions = KubernetesActions(state)
            gen = kget(c, "topology", "steered", "-n", ns)["metadata"]["generation"]
            for kwargs, status in (
                ({"action": "rebalance", "executors": {"count": 5}}, 400),
                ({"action": "rebalance", "executors": {"nosuch": 1}}, 400),
            ):
                with pytest.raises(ActionRefused) as refused:
                    actions.act("steered", **kwargs)  # type: ignore[arg-type]
                assert refused.value.status == status, (kwargs, refused.value)
            with pytest.raises(ActionRefused) as refused:
                actions.act("nosuch", "activate")
            assert refused.value.status == 404
            assert kget(c, "topology", "steered", "-n", ns)["metadata"]["generation"] == gen

            assert "deactivated" in actions.act("steered", "deactivate")
            assert kget(c, "topology", "steered", "-n", ns)["spec"]["active"] is False
            actions.act("steered", "rebalance", num_workers=2, executors={"count": 3}, wait_secs=0.5)
            got = kget(c, "topology", "steered", "-n", ns)
            assert got["spec"]["numWorkers"] == 2 and got["spec"]["bolts"][0]["parallelism"] == 3
            # the UI's wait-time rides on the patch as `kubectl squall rebalance -w` does
            assert got["metadata"]["annotations"]["squall.io/rebalance-wait-secs"] == "0.5"
            assert got["metadata"]["annotations"]["squall.io/rebalance-wait-generation"] == str(
                got["metadata"]["generation"])
            actions.act("steered", "kill")
            wait_for(lambda: c.kubectl("get", "topology", "steered", "-n", ns, check=False).returncode != 0,
                     30, what="the Topology to be deleted")
    finally:
        zk.stop()
        if created.returncode == 0:
            c.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)


def test_debugging_verbs_without_worker_pods_say_so(k8s_cluster: Cluster, ns: str) -> None:
    """`logs` and `dump-stacks` on the API server alone: an unknown topology, and a topology with
    no worker pod yet (nothing to read a log from, nothing to ask through), are one line, exit 1."""
    c = k8s_cluster
    created = c.kubectl("create", "-f", str(CRD), check=False)
    try:
        wait_for(lambda: c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(TOPOLOGY),
                                   check=False).returncode == 0, 60, what="the Topology CRD to serve")
        one_line_error(kubectl_squall(c, ns, "logs", "nosuch"), 1, f"no topology named 'nosuch' in namespace '{ns}'")
        one_line_error(kubectl_squall(c, ns, "dump-stacks", "nosuch"), 1, "no topology named 'nosuch'")
        one_line_error(kubectl_squall(c, ns, "logs", "steered"), 1, "topology steered: no worker pod")
        one_line_error(kubectl_squall(c, ns, "logs", "steered", "count"), 1, "no worker pod is running")
        one_line_error(kubectl_squall(c, ns, "dump-stacks", "steered", "count"), 1, "no worker pod is running")
    finally:
        if created.returncode == 0:
            c.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)


@pytest.mark.timeout(900)
def test_logs_and_dump_stacks_reach_the_right_worker_pods(release: Any, tmp_path: Path) -> None:
    """On real nodes (the chart's operator and ZooKeeper, the word count in containers): `kubectl
    squall dump-stacks` asks the workers of a component through a worker pod (pod exec) and prints
    their threads; `kubectl squall logs` shows that component's pod's log (--tail, every pod's
    prefixed with its slot, -f as new lines come); bad names are one line. On the session's
    real-node release (`release`, conftest.py), which test_chart_real_nodes.py shares."""
    import re
    import threading

    c, ns = release.c, release.ns
    example = REPO / "examples" / "wordcount" / "topology.yaml"
    c.kubectl("-n", ns, "apply", "-f", str(example))

    def running() -> dict[str, Any] | None:
        st = kget(c, "topology", "wordcount", "-n", ns).get("status") or {}
        return st if st.get("phase") == "Running" and st.get("workers") == "2/2" else None

    status = wait_for(running, 300, interval=2, what="wordcount Running 2/2")
    pods = status["slots"]  # slot -> pod
    assert len(pods) == 2, status

    def answered() -> subprocess.CompletedProcess[str] | None:
        done = kubectl_squall(c, ns, "dump-stacks", "wordcount")
        return done if done.returncode == 0 else None

    # every worker: both pods answer, each under its slot and pod
    dump = wait_for(answered, 90, interval=2, what="dump-stacks to answer")
    headers = re.findall(r"^==== worker (\S+) \(pod (\S+)\) on \S+ \(pid \d+\), running (.*) ====$",
                         dump.stdout, re.M)
    assert sorted((slot, pod) for slot, pod, _ in headers) == sorted(pods.items()), dump.stdout[:3000]
    assert dump.stdout.count('"MainThread" ident=') == 2 and "squall/worker/" in dump.stdout
    # a component: the workers running it, and only those
    split = kubectl_squall(c, ns, "dump-stacks", "wordcount", "split")
    assert split.returncode == 0, split.stderr
    shown = re.findall(r"^==== worker (\S+) \(pod (\S+)\) .*, running split ====$", split.stdout, re.M)
    assert shown and all(pods[slot] == pod for slot, pod in shown), split.stdout[:2000]
    assert {slot for slot, _ in shown} == {slot for slot, _, comps in headers if "split" in comps.split(", ")}

    spout = kubectl_squall(c, ns, "dump-stacks", "wordcount", "sentences", "--profile", "0.5")
    assert spout.returncode == 0, spout.stderr
    (slot, pod), = re.findall(r"^==== worker (\S+) \(pod (\S+)\)", spout.stdout, re.M)
    assert "samples over 0.5s" in spout.stdout and pods[slot] == pod, spout.stdout[:2000]

    shown = kubectl_squall(c, ns, "logs", "wordcount", "sentences", "--tail", "5")
    assert shown.returncode == 0, shown.stderr
    full = c.kubectl("-n", ns, "logs", pod).stdout
    lines = shown.stdout.splitlines()
    assert 0 < len(lines) <= 5 and all(line in full for line in lines), shown.stdout
    every = run(c, str(VENV_BIN / "squall"), "logs", "wordcount", "--tail", "3", "--kubernetes", "--namespace", ns)
    assert every.returncode == 0, every.stderr
    assert {line.split(" ", 1)[0] for line in every.stdout.splitlines()} == {f"[{s}]" for s in pods}

    # -f: the pod's new lines as they come (a worker logs each debug request it answers)
    env = c.env()
    env["PATH"] = f"{c.bin}{os.pathsep}{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    follow = subprocess.Popen([str(c.bin / "kubectl"), "squall", "logs", "wordcount", "sentences", "-f",
                               "--tail", "1", "--namespace", ns], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=die_with_this_process())
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(follow.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_for(lambda: seen or follow.poll() is not None, 30, what="the followed log's last line")
        asked = kubectl_squall(c, ns, "dump-stacks", "wordcount", "sentences")
        assert asked.returncode == 0, asked.stderr
        request = re.search(r"worker \S+ \(pid \d+\)", asked.stdout)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and follow.poll() is None and not any(
                "debugging: answered stacks request" in line for line in seen):
            time.sleep(0.5)
    finally:
        follow.terminate()
        _, err = follow.communicate(timeout=10)
    assert any("debugging: answered stacks request" in line for line in seen), (
        f"followed {len(seen)} lines, exit {follow.returncode}, stderr {err[-500:]!r}, asked {request}; the pod's "
        f"log ends: {c.kubectl('-n', ns, 'logs', pod, '--tail', '5').stdout!r}; seen ends {seen[-3:]!r}")

    one_line_error(kubectl_squall(c, ns, "logs", "wordcount", "cuont"), 1,
                   "no component 'cuont' (it has count, report, sentences, split)")
    one_line_error(kubectl_squall(c, ns, "dump-stacks", "wordcount", "999"), 1, "no task 999")

    # the event inspector, through a worker pod as well: split's words sampled, then off
    on = kubectl_squall(c, ns, "debug", "wordcount", "split", "--sample", "100", "--secs", "60")
    assert on.returncode == 0 and "sampling 100% of split's emits for 60s" in on.stdout, on.stdout + on.stderr

    def sampled() -> list[str] | None:
        shown = kubectl_squall(c, ns, "events", "wordcount", "split", "-n", "5")
        rows = shown.stdout.splitlines()[1:] if shown.returncode == 0 else []
        return rows if len(rows) == 5 else None

    rows = wait_for(sampled, 60, interval=2, what="split's sampled tuples")
    assert all(" split " in r and " default " in r for r in rows), rows
    off = kubectl_squall(c, ns, "debug", "wordcount", "split", "--off")
    assert off.returncode == 0 and "no longer sampled" in off.stdout, off.stdout + off.stderr
    one_line_error(kubectl_squall(c, ns, "debug", "wordcount", "split", "--sample", "0"), 2, "above 0")
    one_line_error(kubectl_squall(c, ns, "events", "wordcount", "cuont"), 1, "no component 'cuont'")

    # set-log-level end to end: the annotation, the operator's copy in ZooKeeper, every worker pod
    # setting the logger and giving it back when the setting lapses
    done = kubectl_squall(c, ns, "set-log-level", "wordcount", "-l", "squall.worker.debugging=DEBUG:20")
    assert done.returncode == 0, done.stdout + done.stderr

    def pod_logs() -> dict[str, str]:
        return {p: c.kubectl("-n", ns, "logs", p).stdout for p in pods.values()}
    wait_for(lambda: all("logger squall.worker.debugging set to DEBUG" in log for log in pod_logs().values()),
             120, interval=2, what="every worker pod to set the logger to DEBUG")
    wait_for(lambda: all("logger squall.worker.debugging back to" in log for log in pod_logs().values()),
             90, interval=2, what="every worker pod to give the logger back its level")

    # the UI the operator serves (ui.enabled), on the release's ZooKeeper with the operator's
    # credentials: the component page asks the worker pods for their registered metrics, and a
    # worker's profile link answers from its pod
    from squall.state import ClusterState, ZkCredentials, topology_key
    from squall_operator.ui import UiServer, create_app
    from squall_operator.ui.data import UiData

    secret = kget(c, "secret", "squall-zk-auth", "-n", ns)
    creds = ZkCredentials.parse(base64.b64decode(secret["data"]["credentials"]).decode(), "the chart's Secret")
    (zk_pod,) = kget(c, "pods", "-n", ns, "-l", "app.kubernetes.io/component=zookeeper")["items"]
    key = topology_key("wordcount", ns)
    with ClusterState.connect(f"{zk_pod['status']['podIP']}:2181", root="/squall", credentials=creds) as state:
        data = UiData(state, interval=0.5)
        data.start()
        ui = UiServer(create_app(data, None)).start()
        try:
            with urllib.request.urlopen(ui.url + f"api/v1/topology/{key}/component/split", timeout=60) as resp:
                page = json.loads(resp.read())
            assert page["componentType"] == "bolt" and page["userMetricsMissing"] == [], page
            assert {f"{w['node']}-{w['port']}" for w in page["workers"]} == {
                slot for slot, _, comps in headers if "split" in comps.split(", ")}, page
            slot = min(pods)
            with urllib.request.urlopen(ui.url + f"api/v1/topology/{key}/profiling/profile/{slot}?secs=0.5",
                                        timeout=60) as resp:
                profile = json.loads(resp.read())
            assert "samples over 0.5s" in profile["dump"] and profile["worker"] == slot, profile
        finally:
            ui.stop()
            data.stop()
