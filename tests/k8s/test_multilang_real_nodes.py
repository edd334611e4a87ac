"""A shell component on the real nodes: the word count with its split written in JavaScript on
Storm's own storm.js, run by the operator in the worker image's containers (Node.js and the
adapters at /opt/squall-multilang, a read-only root filesystem, /tmp an emptyDir). The script
comes from a ConfigMap mounted into the worker pods (`spec.worker.volumes`, on PYTHONPATH, where
shell.files are looked up), as a team would ship one JavaScript bolt without building an image.
The sentences flow through node and are acked at the spout; storm.js's log and rpcMetrics
reach the pod's log and the task's gauge on its /metrics. On the session's real-node release
(`release`, conftest.py)."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest

from .conftest import wait_for
from .test_chart_real_nodes import Release

pytestmark = pytest.mark.k8s

SPLIT_JS = """\
var storm = require('./storm');
var BasicBolt = storm.BasicBolt;
function SplitBolt() { BasicBolt.call(this); this.words = 0; }
SplitBolt.prototype = Object.create(BasicBolt.prototype);
SplitBolt.prototype.constructor = SplitBolt;
SplitBolt.prototype.initialize = function(conf, context, done) {
    this.logInfo('js split ready, task', context['taskid']);
    done();
};
SplitBolt.prototype.process = function(tup, done) {
    var self = this;
    tup.values[0].split(' ').forEach(function(w) {
        self.emit({tuple: [w], anchorTupleId: tup.id}, function(taskIds) {});
        self.words += 1;
    });
    self.sendMsgToParent({command: 'metrics', name: 'js_words', params: self.words});
    done();
};
new SplitBolt().run();
"""

TOPOLOGY: dict[str, Any] = {
    "apiVersion": "squall.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "mlwords"},
    "spec": {
        "numWorkers": 1,
        "messageTimeoutSecs": 30,
        "maxSpoutPending": 200,
        "worker": {
            # the image's own /app first (the word count's Python components), then the script
            "env": [{"name": "PYTHONPATH", "value": "/app:/mljs"}],
            "volumes": [{"name": "mljs", "configMap": {"name": "mljs"}}],
            "volumeMounts": [{"name": "mljs", "mountPath": "/mljs", "readOnly": True}],
        },
        "spouts": [{"name": "sentences", "class": "wordcount:SentenceSpout"}],
        "bolts": [
            {"name": "split", "shell": {"command": ["node", "split.js"], "files": ["split.js"]},
             "outputs": [{"fields": ["word"]}], "inputs": [{"component": "sentences", "grouping": "shuffle"}]},
            {"name": "count", "class": "wordcount:WordCount",
             "inputs": [{"component": "split", "grouping": "fields", "fields": ["word"]}]},
        ],
    },
}


@pytest.mark.timeout(600)
def test_a_javascript_bolt_on_storm_js_runs_in_the_worker_pods(release: Release) -> None:
    r = release
    r.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mljs"}, "data": {"split.js": SPLIT_JS}})
    r.apply(TOPOLOGY)
    try:
        wait_for(lambda: r.running("mlwords", 1), 240, interval=2, what="mlwords Running 1/1")

        def flowing() -> dict[str, Any] | None:
            comps = r.status("mlwords").get("components") or {}
            ok = comps.get("sentences", {}).get("acked", 0) > 50 and comps.get("count", {}).get("executed", 0) > 200
            return comps if ok else None
        comps = wait_for(flowing, 120, interval=2, what="sentences acked through the JavaScript split")
        assert comps["sentences"].get("failed", 0) == 0, comps
        assert comps["split"]["executed"] > 50, comps

        (pod,) = r.workers("mlwords", live=True)
        log = r.kubectl("logs", pod["metadata"]["name"]).stdout
        assert "js split ready, task" in log, log[-3000:]  # storm.js's log command, in the pod's log
        assert "ShellError" not in log and "exited with code" not in log, log[-3000:]

        # storm.rpcMetrics: the task's gauge on the worker's /metrics (the pod's address is reachable)
        ip = pod["status"]["podIP"]
        port = next(p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])
                    if p.get("name") == "metrics")

        def words_gauge() -> float | None:
            with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=10) as resp:
                for line in resp.read().decode().splitlines():
                    if line.startswith("squall_user_gauge{") and 'name="js_words"' in line and 'component="split"' in line:
                        return float(line.rsplit(" ", 1)[1]) or None
            return None
        assert wait_for(words_gauge, 60, interval=2, what="split's js_words gauge on /metrics") > 0
    finally:
        r.delete_and_wait_gone("mlwords")
        r.kubectl("delete", "configmap", "mljs", "--ignore-not-found")
