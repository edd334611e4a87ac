"""The web UI's JSON API over HTTP on loopback, on a LocalCluster (real ZooKeeper, workers,
zmq): figures that move, the actions doing what Storm's do, and every refused action (disabled,
not JSON, bad wait, bad options, beyond numTasks, unknown topology or action) a 4xx that
changes nothing."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (  # the integration tests' helpers (same directory)
    assigned_slots,
    id_pipeline,
    logs_tail,
    wait_for,
    wait_running,
)

from squall.models.cluster import TopologyStatus
from squall_operator.local import LocalCluster
from squall_operator.ui import NimbusActions, UiServer, create_app
from squall_operator.ui.data import UiData

pytestmark = pytest.mark.integration


def call(url: str, method: str = "GET", body: Any = None, content_type: str | None = "application/json") -> tuple[int, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if content_type and method == "POST":
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if r.headers.get_content_type() == "application/json" else text
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


@pytest.fixture
def ui(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> Iterator[tuple[LocalCluster, str, str]]:
    cluster = make_cluster(nodes=2, slots=2)
    data = UiData(cluster.state, interval=0.5)
    data.start()
    on = UiServer(create_app(data, NimbusActions(cluster.nimbus), actions_enabled=True)).start()
    off = UiServer(create_app(data, NimbusActions(cluster.nimbus), actions_enabled=False)).start()
    try:
        yield cluster, on.url, off.url
    finally:
        on.stop()
        off.stop()
        data.stop()


def test_ui_api_figures_and_actions(ui: tuple[LocalCluster, str, str], tmp_path: Path) -> None:
    cluster, url, readonly = ui
    topo = id_pipeline("shown", tmp_path / "out", 0, rate=200, workers=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    api = url + "api/v1/topology/shown"

    def spout(field: str = "emitted", window: str = ":all-time") -> int:
        code, t = call(api + f"?window={window}")
        assert code == 200, t
        return int(t["spouts"][0]["stats"][window][field])

    e0 = wait_for(lambda: spout(), 60, "the spout's figures in the API", cluster)
    wait_for(lambda: spout() > e0 + 100, 30, "the figures to move", cluster)
    assert spout(window="600") > 0
    code, t = call(api)
    assert t["status"] == "ACTIVE" and t["workersTotal"] == 1 and t["tasksTotal"] == 6
    assert {b["boltId"] for b in t["bolts"]} == {"pass", "sink"}
    assert t["workers"][0]["components"] == ["ids", "pass", "sink"]
    assert t["configuration"]["spec.numWorkers"] == 1 and t["configuration"]["test.rate"] == 200
    code, s = call(url + "api/v1/topology/summary")
    assert code == 200 and [x["name"] for x in s["topologies"]] == ["shown"] and s["topologies"][0]["acked"] > 0
    code, c = call(url + "api/v1/cluster/summary")
    assert code == 200 and c["supervisors"] == 2 and c["slotsTotal"] == 4 and c["slotsUsed"] == 1
    for page in ("", "topology/shown"):
        code, html = call(url + page)
        assert code == 200 and "shown" in html

    # refused: 4xx with a message, nothing changed
    refusals = [
        (readonly + "api/v1/topology/shown/deactivate", {}, "application/json", 403),
        (api + "/deactivate", {}, "application/x-www-form-urlencoded", 415),
        (api + "/deactivate", b"{not json", "application/json", 400),
        (api + "/kill/abc", {}, "application/json", 400),
        (api + "/kill/-1", {}, "application/json", 400),
        (api + "/kill/nan", {}, "application/json", 400),
        (api + "/rebalance/0", {"rebalanceOptions": {"numWorkers": "2"}}, "application/json", 400),
        (api + "/rebalance/0", {"rebalanceOptions": {"numWorkers": 0}}, "application/json", 400),
        (api + "/rebalance/0", {"rebalanceOptions": {"executors": {"pass": 3}}}, "application/json", 400),
        (api + "/rebalance/0", {"rebalanceOptions": {"executors": {"nosuch": 1}}}, "application/json", 400),
        (api + "/rebalance/0", {"rebalanceOptions": {"workers": 2}}, "application/json", 400),
        (api + "/activate/5", {}, "application/json", 404),
        (api + "/explode", {}, "application/json", 404),
        (url + "api/v1/topology/nosuch/deactivate", {}, "application/json", 404),
    ]
    for target, body, ctype, status in refusals:
        code, got = call(target, "POST", body, ctype)
        assert code == status, (target, body, code, got)
        assert isinstance(got, dict) and got.get("error"), (target, got)
    code, got = call(url + "api/v1/topology/nosuch")
    assert code == 404
    code, got = call(api + "/activate", "POST", {})
    assert code == 200 and got["status"] == "success"  # activate while ACTIVE: Storm's no-op
    base = cluster.state.get_storm("shown")
    assert base is not None and base.status is TopologyStatus.ACTIVE
    assert base.num_workers == 1 and base.component_executors["pass"] == 2

    code, got = call(api + "/deactivate", "POST", {})
    assert code == 200 and got["topologyOperation"] == "deactivate", got
    assert cluster.nimbus.status("shown") is TopologyStatus.INACTIVE
    code, got = call(api + "/deactivate", "POST", {})
    assert code == 200
    code, got = call(api + "/activate", "POST", {})
    assert code == 200 and cluster.nimbus.status("shown") is TopologyStatus.ACTIVE

    code, got = call(api + "/rebalance/0", "POST", {"rebalanceOptions": {"numWorkers": 2, "executors": {"sink": 1}}})
    assert code == 200, got
    wait_for(lambda: len(assigned_slots(cluster, "shown")) == 2, 30, "the rebalance to 2 workers", cluster)
    wait_for(lambda: cluster.nimbus.status("shown") is TopologyStatus.ACTIVE, 30, "ACTIVE again", cluster)
    code, got = call(api + "/rebalance/0", "POST", {})
    assert code in (200, 409), got

    code, got = call(api + "/kill/1", "POST", {})
    assert code == 200, got
    code, got = call(api + "/deactivate", "POST", {})
    assert code in (409, 404), got  # KILLED allows only kill; or already removed
    assert cluster.wait_removed("shown", 60), "not removed" + logs_tail(cluster)
    deadline = time.monotonic() + 30
    while call(api)[0] != 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert call(api)[0] == 404


def test_operator_ui_reads_zookeeper_and_is_read_only_by_default(make_cluster: Callable[..., LocalCluster],
                                                                 tmp_path: Path) -> None:
    """`squall operator --ui-address` (the chart's ui.enabled): its own ZooKeeper client, the
    same API; without --ui-actions every action is 403 and nothing changes."""
    from squall_operator.operator_main import OperatorUi

    cluster = make_cluster(nodes=1, slots=2)
    topo = id_pipeline("seen", tmp_path / "out", 0, rate=100, workers=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    ui = OperatorUi("127.0.0.1:0", str(cluster.zk_connect), cluster.root, actions=False)
    try:
        assert ui.started.wait(60), "the operator's UI did not start"
        assert ui.url.startswith("http://127.0.0.1:")
        code, s = call(ui.url + "api/v1/topology/summary")
        assert code == 200 and [t["name"] for t in s["topologies"]] == ["seen"], s
        wait_for(lambda: call(ui.url + "api/v1/topology/seen")[1]["spouts"][0]["emitted"] > 0, 60,
                 "the spout's figures", cluster)
        for op in ("deactivate", "kill/0", "rebalance/0"):
            code, got = call(ui.url + f"api/v1/topology/seen/{op}", "POST", {})
            assert code == 403 and "disabled" in got["error"], (op, got)
        assert cluster.nimbus.status("seen") is TopologyStatus.ACTIVE
        code, html = call(ui.url + "topology/seen")
        assert code == 200 and "Read-only" in html and 'id="btn-deactivate"' not in html
    finally:
        ui.stop()


def test_operator_ui_reads_an_acl_zookeeper_with_the_operators_credentials(
        make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    """The chart's zookeeper.auth: every node of Squall's carries a digest ACL. The operator's
    UI authenticates with the operator's credentials and shows all it shows without ACLs: the
    topology, its figures moving, its workers (from their heartbeats), the errors with their
    time and task, the config. A UI without the credentials answers 503 naming the refusal
    (not a bare 500), and never serves a half-read page."""
    from squall.state import ZkCredentials
    from squall_operator.operator_main import OperatorUi

    creds = ZkCredentials.generate()
    cluster = make_cluster(nodes=1, slots=2, zk_credentials=creds)
    flaky = {"name": "flaky", "class": "engine_components:FlakyBolt", "parallelism": 1,
             "inputs": [{"component": "ids", "grouping": "fields", "fields": ["id"]}]}
    topo = id_pipeline("guarded", tmp_path / "out", 0, rate=100, workers=1, middle=flaky,
                       extra={"test.mod": 5, "test.mode": "raise"})
    cluster.submit(topo)
    wait_running(cluster, topo)
    ui = OperatorUi("127.0.0.1:0", str(cluster.zk_connect), cluster.root, actions=False, credentials=creds)
    stranger = OperatorUi("127.0.0.1:0", str(cluster.zk_connect), cluster.root, actions=False)
    try:
        assert ui.started.wait(60), "the operator's UI did not start"
        code, s = call(ui.url + "api/v1/topology/summary")
        assert code == 200 and [t["name"] for t in s["topologies"]] == ["guarded"], s
        code, summary = call(ui.url + "api/v1/cluster/summary")
        assert code == 200 and summary["topologies"] == 1 and summary["supervisors"] == 1, summary
        api = ui.url + "api/v1/topology/guarded"
        wait_for(lambda: call(api)[1]["spouts"][0]["emitted"] > 0, 60, "the spout's figures", cluster)
        first = call(api)[1]["spouts"][0]["emitted"]
        wait_for(lambda: call(api)[1]["spouts"][0]["emitted"] > first, 60, "the figures to move", cluster)
        got = wait_for(lambda: (t := call(api)[1])["errors"] and t, 60, "the flaky bolt's errors", cluster)
        err = got["errors"][0]
        assert err["component"] == "flaky" and "flaky bolt rejects id" in err["error"], err
        assert isinstance(err["task"], int) and abs(err["time"] - time.time()) < 120 and err["port"], err
        # the executor running that task, as Storm names it ("[first-last]")
        first_task, last_task = map(int, err["executor"].strip("[]").split("-"))
        assert first_task <= err["task"] <= last_task, err
        flaky_row = next(b for b in got["bolts"] if b["boltId"] == "flaky")
        assert "flaky bolt rejects id" in flaky_row["lastError"] and flaky_row["errorTime"], flaky_row
        assert len(got["workers"]) == 1 and "ids" in got["workers"][0]["components"], got["workers"]
        assert got["configuration"]["test.mode"] == "raise"
        code, html = call(ui.url + "topology/guarded")
        assert code == 200 and "guarded" in html

        assert stranger.started.wait(60), "the UI without credentials did not start"
        for path in ("api/v1/topology/summary", "api/v1/cluster/summary", "api/v1/topology/guarded"):
            code, got = call(stranger.url + path)
            assert code == 503 and "refused" in got["error"] and "credentials" in got["error"], (path, code, got)
        code, html = call(stranger.url)
        assert code == 503 and "refused" in html, (code, html)
    finally:
        stranger.stop()
        ui.stop()


def test_ui_answers_503_when_acls_refuse_a_read(zookeeper: Any) -> None:
    """Nodes made before zookeeper.auth was turned on stay open, the new ones carry the ACL: a
    UI without the credentials connects and lists, then a read is refused. Every view answers
    503 naming the refusal, not a bare 500."""
    import uuid

    from squall.models.cluster import StormBase
    from squall.state import ClusterState, ZkCredentials

    root = f"/squall-ui-acl-{uuid.uuid4().hex}"
    creds = ZkCredentials.generate()
    with ClusterState.connect(zookeeper.connect_string, root=root) as open_state, \
            ClusterState.connect(zookeeper.connect_string, root=root, credentials=creds) as owner:
        owner.set_storm("t", StormBase(name="t", status=TopologyStatus.ACTIVE, launch_time_secs=1.0,
                                       num_workers=1, component_executors={"s": 1}, topology={}))
        data = UiData(open_state, interval=0.2)
        server = UiServer(create_app(data, None)).start()
        data.start()
        try:
            for path in ("api/v1/topology/summary", "api/v1/topology/t"):
                code, got = call(server.url + path)
                assert code == 503 and "refused" in got["error"] and root in got["error"], (path, code, got)
            code, html = call(server.url)
            assert code == 503 and "credentials" in html, (code, html)
        finally:
            server.stop()
            data.stop()
            owner.client.delete(root, recursive=True)


def test_kubernetes_rebalance_without_options_is_refused_in_the_uis_words(zookeeper: Any) -> None:
    """The operator UI's rebalance with a wait-time only: the Topology's spec would not change,
    so the operator would do nothing. 400 saying what to give, before any API call (no
    kubeconfig here), not the CLI's "-n WORKERS" line."""
    import uuid

    from squall.state import ClusterState
    from squall.validation import parse_topology
    from squall_operator.nimbus import initial_storm_base
    from squall_operator.ui import ActionRefused, KubernetesActions

    doc = {"apiVersion": "squall.io/v1alpha1", "kind": "Topology",
           "metadata": {"name": "steered", "namespace": "team"},
           "spec": {"numWorkers": 1, "spouts": [{"name": "s", "class": "m:S"}]}}
    root = f"/squall-ui-k8s-{uuid.uuid4().hex}"
    with ClusterState.connect(zookeeper.connect_string, root=root) as state:
        try:
            state.set_storm("steered", initial_storm_base(parse_topology(doc), 0.0))
            for wait in (None, 5.0):
                with pytest.raises(ActionRefused) as refused:
                    KubernetesActions(state).act("steered", "rebalance", wait_secs=wait)
                assert refused.value.status == 400 and "rebalanceOptions" in str(refused.value), refused.value
        finally:
            state.client.delete(root, recursive=True)


def test_ui_debug_switch_samples_a_components_emits_and_the_events_api_shows_them(
        ui: tuple[LocalCluster, str, str], tmp_path: Path) -> None:
    """Storm UI's debug switch (POST .../debug/enable/PCT) and its event log
    (GET .../events): an action like the others (403 when off, 415 without JSON, 404 for what
    is not there), sampling lapses by itself."""
    cluster, on, off = ui
    topo = id_pipeline("sampled", tmp_path / "out", 0, rate=200, workers=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    api = "api/v1/topology/sampled"
    code, got = call(on + api + "/events")
    assert code == 200 and got == {"topologyId": "sampled", "events": []}, got

    assert call(off + api + "/component/pass/debug/enable/50", "POST", {})[0] == 403
    assert call(on + api + "/component/pass/debug/enable/50", "POST", b"", content_type=None)[0] == 415
    code, got = call(on + api + "/component/nosuch/debug/enable/50", "POST", {})
    assert code == 404 and "no component 'nosuch'" in got["error"], got
    code, got = call(on + api + "/component/pass/debug/enable/0", "POST", {})
    assert code == 400 and "above 0" in got["error"], got
    assert call(on + api + "/component/pass/debug/toggle/50", "POST", {})[0] == 404
    assert cluster.state.get_sampling("sampled") is None, "a refused switch changed something"

    code, got = call(on + api + "/component/pass/debug/enable/50?secs=4", "POST", {})
    assert code == 200 and got["status"] == "success" and "sampling 50% of pass's emits for 4s" in got["message"], got
    events = wait_for(lambda: call(on + api + "/events?component=pass&n=10")[1]["events"] or None, 30,
                      "sampled tuples in the API", cluster)
    assert len(events) == 10 and {e["component"] for e in events} == {"pass"}
    assert all(e["stream"] == "default" and e["values"] and e["worker"] for e in events)
    assert call(on + api + "/events?n=many")[0] == 400
    assert call(on + "api/v1/topology/nosuch/events")[0] == 404

    code, got = call(on + api + "/debug/disable/0", "POST", {})  # every component's: none was on
    assert code == 200 and "no longer sampled" in got["message"], got
