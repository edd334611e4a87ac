"""The UI's stack dump (Storm UI's jstack) on a LocalCluster (real ZooKeeper, real workers): the
topology page links every worker's stacks; the link and the JSON API ask that worker through
ZooKeeper and show its threads; an unknown worker is 404 and another site's request 403, even on
a read-only UI. In headless Chromium (as test_ui_browser): the link the page's script renders
opens the worker's threads in a new tab (docs/ui-stacks.png when SQUALL_UI_SCREENSHOTS=docs);
the component page shows the metrics a bolt registered and its worker's profile link a short
profile (docs/ui-component.png, docs/ui-profile.png). The profile routes are checked here too."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (  # the integration tests' helpers
    REPO,
    assigned_slots,
    id_pipeline,
    wait_for,
    wait_running,
)
from squall_operator.local import LocalCluster
from squall_operator.ui import UiServer, create_app
from squall_operator.ui.data import UiData

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def ui_over(cluster: LocalCluster, topo: Any) -> Iterator[tuple[list[str], str]]:
    """`topo` submitted and running, and the UI (read-only: no actions) served over the cluster's
    state: (the topology's slots, sorted; the UI's URL)."""
    cluster.submit(topo)
    wait_running(cluster, topo)
    slots = sorted(s.key() for s in assigned_slots(cluster, topo.metadata.name))
    data = UiData(cluster.state, interval=0.5)
    data.start()
    try:
        ui = UiServer(create_app(data, None)).start()
        try:
            yield slots, ui.url
        finally:
            ui.stop()
    finally:
        data.stop()



def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get_content_type(), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get_content_type(), e.read().decode()


def test_ui_links_and_serves_every_workers_stacks(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    cluster = make_cluster(nodes=2, slots=1)
    topo = id_pipeline("dumped", tmp_path / "out", 0, rate=20, workers=2)
    with ui_over(cluster, topo) as (slots, url):
        status, _, page = get(url + "topology/dumped")
        assert status == 200
        for slot in slots:
            assert f'href="/topology/dumped/stacks/{slot}"' in page, page

        status, kind, text = get(url + f"topology/dumped/stacks/{slots[0]}", {"Sec-Fetch-Site": "same-origin"})
        assert (status, kind) == (200, "text/plain"), text
        assert text.startswith(f"worker {slots[0]} (pid ") and '"MainThread" ident=' in text, text[:2000]

        status, kind, body = get(url + f"api/v1/topology/dumped/profiling/dumpjstack/{slots[1]}")
        assert (status, kind) == (200, "application/json"), body
        got = json.loads(body)
        assert got["worker"] == slots[1] and got["pid"] > 0 and '"squall-debug" ident=' in got["dump"]

        # a short profile (Storm UI's "Profile"), as text and JSON; secs out of range is 400
        status, kind, text = get(url + f"topology/dumped/profile/{slots[0]}?secs=0.5")
        assert (status, kind) == (200, "text/plain"), text
        assert "samples over 0.5s" in text and "\nMainThread;" in text, text[:2000]
        status, kind, body = get(url + f"api/v1/topology/dumped/profiling/profile/{slots[1]}?secs=0.3")
        assert (status, kind) == (200, "application/json") and "samples over 0.3s" in json.loads(body)["dump"], body
        for bad in ("0", "31", "x"):
            status, _, body = get(url + f"api/v1/topology/dumped/profiling/profile/{slots[0]}?secs={bad}")
            assert status == 400 and "secs must be a number from 0.1 to 30" in body, body
        status, _, body = get(url + "api/v1/topology/dumped/profiling/dumpjstack/nowhere-1")
        assert status == 404 and "has no worker" in body
        status, _, body = get(url + "api/v1/topology/nosuch/profiling/dumpjstack/nowhere-1")
        assert status == 404 and "no topology" in body
        status, _, body = get(url + f"topology/dumped/stacks/{slots[0]}", {"Sec-Fetch-Site": "cross-site"})
        assert status == 403 and "UI's own pages" in body


def test_stacks_link_in_headless_chromium(make_cluster: Callable[..., LocalCluster], browser: Any,
                                          tmp_path: Path) -> None:
    cluster = make_cluster(nodes=1, slots=1)
    topo = id_pipeline("dumped", tmp_path / "out", 0, rate=20, workers=1)
    driver = browser
    with ui_over(cluster, topo) as ((slot,), url):
        driver.get(url + "topology/dumped")
        # the script's own rendering of the workers' table (it replaces the server's every poll)
        wait_for(lambda: driver.execute_script("return document.body.dataset.updated || ''"), 30,
                 "the page's script to render the topology")
        href = driver.execute_script(
            "const a = document.querySelector('#workers tbody a'); if (a) a.click(); return a ? a.getAttribute('href') : '';")
        assert href == f"/topology/dumped/stacks/{slot}", href
        wait_for(lambda: len(driver.window_handles) == 2 or None, 30, "the stacks tab to open")
        driver.switch_to.window(driver.window_handles[1])
        body = wait_for(lambda: '"MainThread" ident=' in (t := driver.execute_script(
            "return document.body ? document.body.innerText : ''")) and t, 30, "the worker's threads")
        assert body.startswith(f"worker {slot} (pid ") and '"squall-debug" ident=' in body, body[:1000]
        driver.save_screenshot(str(tmp_path / "ui-stacks.png"))
        if os.environ.get("SQUALL_UI_SCREENSHOTS") == "docs":
            driver.save_screenshot(str(REPO / "docs" / "ui-stacks.png"))


def test_component_page_and_profile_link_in_headless_chromium(make_cluster: Callable[..., LocalCluster],
                                                              browser: Any, tmp_path: Path) -> None:
    """Storm UI's component page: the topology page's component link opens it, with the metrics
    the bolt's tasks registered (asked of its worker); its worker's profile link opens a short
    sampled profile in a new tab (docs/ui-component.png, docs/ui-profile.png)."""
    cluster = make_cluster(nodes=1, slots=1)
    middle = {"name": "metered", "class": "usermetrics_components:MeteredBolt", "parallelism": 2,
              "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    topo = id_pipeline("metered", tmp_path / "out", 0, rate=50, workers=1, middle=middle)
    driver = browser
    shots = [tmp_path]
    if os.environ.get("SQUALL_UI_SCREENSHOTS") == "docs":
        shots.append(REPO / "docs")
    with ui_over(cluster, topo) as ((slot,), url):
        driver.get(url + "topology/metered")
        wait_for(lambda: driver.execute_script("return document.body.dataset.updated || ''"), 30,
                 "the page's script to render the topology")
        href = driver.execute_script(
            "const a = document.querySelector('#bolts tbody tr[data-component=\"metered\"] a');"
            " if (a) a.click(); return a ? a.getAttribute('href') : '';")
        assert href == "/topology/metered/component/metered", href

        def metric_rows() -> list[list[str]]:
            return driver.execute_script(
                "return [...document.querySelectorAll('#user-metrics tbody tr')]"
                ".map((tr) => [...tr.cells].map((td) => td.textContent));") or []
        rows = wait_for(lambda: (r := metric_rows()) and len(r) >= 10 and r, 30, "the registered metrics")
        names = sorted({(r[1], r[2]) for r in rows})
        assert names == [("id_mod", "histogram"), ("ids", "meter"), ("last_id", "gauge"), ("process", "timer"),
                         ("tuples", "counter")], rows
        tuples = [int(r[3].replace(",", "")) for r in rows if r[1] == "tuples"]
        assert len(tuples) == 2 and sum(tuples) > 0 and all(r[6] == slot for r in rows), rows
        # its figures are asked for once, when the page is served: the header says so, not "live"
        badge = driver.execute_script("const b = document.getElementById('live'); return [b.textContent, b.title]")
        assert badge == ["snapshot", "figures as of this page's load: reload to refresh"], badge
        for where in shots:
            driver.save_screenshot(str(where / "ui-component.png"))

        driver.execute_script("document.querySelector('#component-workers a[href$=\"/profile/" + slot + "\"]').click()")
        wait_for(lambda: len(driver.window_handles) == 2 or None, 30, "the profile tab to open")
        driver.switch_to.window(driver.window_handles[1])
        body = wait_for(lambda: "samples over 5s" in (t := driver.execute_script(
            "return document.body ? document.body.innerText : ''")) and t, 60, "the worker's profile")
        assert body.startswith(f"worker {slot} (pid ") and "CPU seconds by thread:" in body, body[:1000]
        for where in shots:
            driver.save_screenshot(str(where / "ui-profile.png"))
