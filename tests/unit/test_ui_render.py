"""What the UI's pages print, without a server: every template escapes what it is given, no HTML
is built by an f-string, latencies print the same in the templates and in ui.js, the topology id
check, and the Host check's parsing."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from squall_operator.ui import TEMPLATES, host_of
from squall_operator.ui.data import WINDOWS, is_topology_id, latency_text

pytestmark = pytest.mark.unit

UI = Path(__file__).resolve().parents[2] / "operator" / "squall_operator" / "ui"
PROBE = "<x-squall-probe a=\"1\" b='2'>&"


def test_latency_text_keeps_three_significant_digits() -> None:
    assert latency_text(0.0) == "0" and latency_text(-1.0) == "0" and latency_text(float("nan")) == "0"
    assert latency_text(0.0034567) == "0.00346"  # 3.46 us: not 0.00
    assert latency_text(0.001) == "0.00100"
    assert latency_text(0.0999) == "0.0999"
    assert latency_text(1.0) == "1.00"
    assert latency_text(3.474) == "3.47"
    assert latency_text(34.74) == "34.7"
    assert latency_text(99.96) == "100"
    assert latency_text(1234.5) == "1,235"
    assert latency_text(123456.4) == "123,456"


def test_is_topology_id_is_metadata_names_rule() -> None:
    # `zookeeper` too: ZooKeeper reserves that node name only at its root, not under Squall's
    for good in ("wordcount", "a", "a-b", "x1", "a" * 63, "zookeeper"):
        assert is_topology_id(good), good
    for bad in ("", "zookeeper-", ".", "..", "a/b", "A", "a_b", "-a", "a-", "a" * 64, "a\n", "a\x00",
                "\x1b[2J", "<img src=x>", "é", "a" * 5000):
        assert not is_topology_id(bad), bad
    # the operator's keys: NAMESPACE~NAME, each a DNS label (squall.topology_keys)
    for good in ("team-a~wordcount", "ns~zookeeper", "a" * 63 + "~" + "b" * 63):
        assert is_topology_id(good), good
    for bad in ("~wc", "ns~", "a~b~c", "A~b", "ns~" + "a" * 64, "n/s~wc", "ns~wc\n"):
        assert not is_topology_id(bad), bad


def test_host_of_a_host_header() -> None:
    assert host_of("127.0.0.1:8080") == "127.0.0.1"
    assert host_of("localhost") == "localhost"
    assert host_of("[::1]:8080") == "::1"
    assert host_of("[::1]") == "::1"
    assert host_of("evil.example:80") == "evil.example"


def test_every_template_escapes_what_it_is_given() -> None:
    assert TEMPLATES.env.autoescape is True
    stats = {"window": ":all-time", "windowPretty": "All time", "emitted": 1, "transferred": 1, "acked": 1,
             "failed": 0, "completeLatency": 0.0034}
    topo: dict[str, Any] = {
        "id": PROBE, "name": PROBE, "status": PROBE, "uptime": PROBE, "workersTotal": 1, "executorsTotal": 1,
        "tasksTotal": 1, "namespace": PROBE, "window": ":all-time", "topologyStats": [stats],
        "spouts": [{"spoutId": PROBE, "executors": 1, "tasks": 1, "emitted": 1, "transferred": 1,
                    "completeLatency": 0.0034, "acked": 1, "failed": 0, "pending": 0, "lastError": PROBE}],
        "bolts": [{"boltId": PROBE, "executors": 1, "tasks": 1, "emitted": 1, "transferred": 1, "executed": 1,
                   "executeLatency": 0.0, "acked": 1, "failed": 0, "lastError": PROBE}],
        "workers": [{"node": PROBE, "host": PROBE, "port": 1, "uptime": PROBE, "heartbeatAgeSecs": 1.0,
                     "components": [PROBE], "executors": [PROBE]}],
        "errors": [{"timePretty": PROBE, "component": PROBE, "executor": PROBE, "task": 1, "host": PROBE,
                    "port": 1, "error": PROBE, "errorFull": PROBE}],
        "configuration": {PROBE: PROBE},
    }
    summary = {"topologies": [{"id": PROBE, "name": PROBE, "status": PROBE, "uptime": PROBE, "workersTotal": 1,
                               "executorsTotal": 1, "tasksTotal": 1, "acked": 1, "failed": 0,
                               "completeLatency": 0.0}]}
    cluster = dict.fromkeys(("supervisors", "slotsUsed", "slotsFree", "slotsTotal", "topologies",
                             "executorsTotal", "tasksTotal"), 1) | {"zookeeper": PROBE}
    base = {"title": PROBE, "windows": WINDOWS}
    pages = {
        "topology.html": TEMPLATES.env.get_template("topology.html").render(base, t=topo, actions_enabled=True),
        "index.html": TEMPLATES.env.get_template("index.html").render(base, cluster=cluster, summary=summary),
        "error.html": TEMPLATES.env.get_template("error.html").render(base, status=404, reason="Not Found",
                                                                      message=PROBE),
        "component.html": TEMPLATES.env.get_template("component.html").render(base, c={
            **topo["bolts"][0], "topologyId": PROBE, "name": PROBE, "componentId": PROBE, "componentType": "bolt",
            "workers": topo["workers"], "userMetricsNote": PROBE, "userMetricsMissing": [PROBE],
            "userMetrics": [{"task": 1, "name": PROBE, "kind": PROBE, "value": 0.5, "count": 2, "sum": 1.0,
                             "worker": PROBE}, {"task": 1, "name": "n", "kind": "gauge", "value": PROBE,
                                                "worker": PROBE}]}),
    }
    assert {p.name for p in (UI / "templates").iterdir()} - {"base.html"} == set(pages), "a template untested"
    for name, html in pages.items():
        assert "<x-squall-probe" not in html, name
        assert "&lt;x-squall-probe" in html, name
        # no script but the static file, no inline handler or style for the CSP to refuse
        assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/ui.js">'], name
        assert not re.search(r"\son\w+\s*=|\sstyle\s*=", html), name
    assert ">0.00340<" in pages["topology.html"] and ">0<" in pages["topology.html"]


def test_no_html_built_by_f_strings() -> None:
    """Pages come from the templates (autoescaped); an f-string holding markup is how the
    reported injection happened (`f"<h1>no topology named {name!r}</h1>"`)."""
    for path in UI.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.JoinedStr):
                literal = "".join(v.value for v in node.values
                                  if isinstance(v, ast.Constant) and isinstance(v.value, str))
                assert not re.search(r"<[a-zA-Z/!]", literal), f"{path.name}:{node.lineno}: HTML in an f-string"


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH")
def test_ui_js_prints_latencies_as_the_templates_do() -> None:
    """ui.js refreshes the figures every 2 s: its `latency` must give the templates' text, or a
    figure changes form on the first refresh (it read `0.00` for two bolts, `0` for the third)."""
    source = (UI / "static" / "ui.js").read_text()
    m = re.search(r"^  function latency\(v\) \{\n.*?^  \}\n", source, re.S | re.M)
    assert m, "ui.js has no latency function"
    values = [0.0, 0.0004, 0.0034567, 0.00999, 0.0999, 0.9995, 1.0, 3.47, 9.996, 34.74, 99.94, 99.96, 100.0,
              1234.5, 123456.0] + [10 ** (k / 37) for k in range(-220, 220)]
    script = m.group(0) + f"console.log(JSON.stringify({json.dumps(values)}.map(latency)));"
    got = json.loads(subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True,
                                    timeout=30).stdout)
    assert got == [latency_text(v) for v in values]
