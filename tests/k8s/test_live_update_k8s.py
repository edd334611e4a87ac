"""A spec change applied to a running topology by the operator, on the
process-kubelet cluster: `kubectl patch` of maxSpoutPending and of a bolt's config reaches the
running workers with no pod replaced (one `ConfigUpdated` Event saying what changed and how:
the spout's bound live, the bolt's executors restarted in place, each prepared with the new
value), every message id is acked, and a graph change (a bolt added) runs as an upgrade: the
`Upgrading` Event, the spouts drained, the new graph launched (`Upgraded`), every worker pod
replaced by one of the new launch, the new bolt receiving tuples, and still every id acked.
`kubectl squall update FILE` does the same from a file.

The chart, the operator, ZooKeeper and the process kubelet are the session's release `squall` in
namespace squall-e2e (the `squall` fixture, conftest.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.topology_keys import topology_key

from .cluster import Cluster
from .conftest import wait_for
from .test_operator_e2e import (
    NS,
    apply_doc,
    delete_and_wait_gone,
    events,
    id_pipeline,
    kubectl_squall,
    running,
    worker_pods,
    zk_state,
)

pytestmark = pytest.mark.k8s

NAME = "liveconf"
KEY = topology_key(NAME, NS)  # in ZooKeeper: NAMESPACE~NAME


def _patch(c: Cluster, ops: list[dict[str, Any]]) -> None:
    c.kubectl("patch", "topology", NAME, "-n", NS, "--type=json", "-p", json.dumps(ops))


def _pending(c: Cluster) -> int:
    with zk_state(c) as zk:
        beats = zk.get_worker_heartbeats(KEY)
    return sum(ex.pending for b in beats.values() for ex in b.executors.values() if ex.component == "ids")


def _tags(out: Path) -> list[str]:
    path = out / "prepared.txt"
    return sorted(line.split()[2] for line in path.read_text().splitlines()) if path.exists() else []


def _event(c: Cluster, reason: str) -> dict[str, Any] | None:
    return next((e for e in events(c, NAME) if e["reason"] == reason), None)


def test_kubectl_patch_of_config_applies_live_with_no_pod_replaced_and_no_id_lost(
    squall: Cluster, tmp_path: Path
) -> None:
    c = squall
    out = tmp_path / "out"
    # the bolt (2 x 10 ms a tuple) is slower than the spout (300/s): the spout's pending sits at
    # its bound, 200, until the patch lowers it. 4000 ids last about 45 s here (about 90/s once
    # the bound is 20): the bolt added about 15 s in receives tuples with about 25 s of ids left
    # (6000 left about 50 s of waiting for the last ids once everything was checked)
    doc = id_pipeline(NAME, out, 4000, workers=2, rate=300)
    doc["spec"]["messageTimeoutSecs"] = 30
    doc["spec"]["bolts"][0].update({"class": "liveupdate_components:TagPassBolt",
                                    "config": {"test.tag": "one", "test.sleep_ms": 10}})
    apply_doc(c, doc)
    try:
        wait_for(lambda: running(c, NAME, 2), 120, what=f"{NAME} Running 2/2")
        wait_for(lambda: _pending(c) > 100, 60, what="the spout's pending near its bound")
        pods = {p["metadata"]["uid"] for p in worker_pods(c, NAME)}
        assert _tags(out) == ["one", "one"]

        t0 = time.monotonic()
        _patch(c, [{"op": "replace", "path": "/spec/maxSpoutPending", "value": 20},
                   {"op": "replace", "path": "/spec/bolts/0/config/test.tag", "value": "two"}])
        ev = wait_for(lambda: _event(c, "ConfigUpdated"), 60, what="a ConfigUpdated Event")
        assert ev["type"] == "Normal"
        assert ev["message"] == "live: maxSpoutPending 200 -> 20; executors restarted: pass (test.tag)", ev
        wait_for(lambda: _tags(out) == ["one", "one", "two", "two"], 60,
                 what="both pass executors prepared again with test.tag two")
        restarted = time.monotonic() - t0
        lows: list[int] = []

        def bounded() -> bool:
            lows.append(_pending(c))
            return len(lows) >= 3 and all(p <= 20 for p in lows[-3:])
        wait_for(bounded, 60, what="the spout's pending under the new bound", interval=1.0)
        assert {p["metadata"]["uid"] for p in worker_pods(c, NAME)} == pods, "a worker pod was replaced"
        assert all(s.get("restartCount", 0) == 0 for p in worker_pods(c, NAME)
                   for s in p["status"].get("containerStatuses") or [])

        # the same through the CLI: `kubectl squall update FILE` replaces the spec, the operator
        # applies it
        doc["spec"]["maxSpoutPending"] = 20
        doc["spec"]["bolts"][0]["config"]["test.tag"] = "two"
        doc["spec"]["killWaitSecs"] = 4
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
        done = kubectl_squall(c, "update", str(tmp_path / "t.yaml"))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"topology {NAME}: live: killWaitSecs 3 -> 4 (spec replaced"), done.stdout
        wait_for(lambda: [e for e in events(c, NAME) if e["reason"] == "ConfigUpdated"
                          and e["message"] == "live: killWaitSecs 3 -> 4"], 60, what="the CLI's ConfigUpdated")

        # a graph change: a bolt added runs as an upgrade, every pod replaced by one of the new launch
        with zk_state(c) as zk:
            before = zk.get_storm(KEY)
        assert before is not None
        assert not list(out.glob("spout-*.done")), "the ids ran out before the upgrade: raise the count"
        t1 = time.monotonic()
        _patch(c, [{"op": "add", "path": "/spec/bolts/-", "value": {
            "name": "tap", "class": "engine_components:PassBolt", "parallelism": 2,
            "inputs": [{"component": "pass", "grouping": "shuffle"}]}}])
        ev = wait_for(lambda: _event(c, "Upgrading"), 60, what="an Upgrading Event")
        assert ev["type"] == "Normal" and ev["message"].startswith("added tap; spouts deactivated"), ev
        ev = wait_for(lambda: _event(c, "Upgraded"), 60, what="an Upgraded Event")
        upgraded = time.monotonic() - t1
        assert "nothing pending" in ev["message"] or "the drain's wait" in ev["message"], ev
        wait_for(lambda: running(c, NAME, 2) and not pods & {p["metadata"]["uid"] for p in worker_pods(c, NAME)},
                 120, what=f"{NAME} Running 2/2 on pods of the new launch")
        with zk_state(c) as zk:
            base = zk.get_storm(KEY)
        assert base is not None and base.launch_time_secs > before.launch_time_secs
        assert [b["name"] for b in base.topology["spec"]["bolts"]] == ["pass", "sink", "tap"]
        assert base.topology["spec"]["maxSpoutPending"] == 20

        def tap_executed() -> int:
            with zk_state(c) as zk:
                beats = zk.get_worker_heartbeats(KEY)
            return sum(ex.executed for b in beats.values() for ex in b.executors.values() if ex.component == "tap")
        wait_for(lambda: tap_executed() > 0, 60, what="the new bolt receiving tuples")
        resumed = time.monotonic() - t1

        left = len(list(out.glob("spout-*.done"))) == 0
        wait_for(lambda: list(out.glob("spout-*.done")), 120, what="every id acked", interval=0.5)
        print(f"LIVE UPDATE k8s: ids still coming when the new bolt got its first tuple: {left}; "
              f"the last acked {time.monotonic() - t1:.1f}s after the graph patch")
        print(f"LIVE UPDATE k8s: restarted in {restarted:.1f}s, pending samples {lows}; upgrade: Upgraded "
              f"{upgraded:.1f}s after the patch ({ev['message']}), the new bolt's first tuple {resumed:.1f}s after it")
    finally:
        delete_and_wait_gone(c, NAME)
