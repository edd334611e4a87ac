"""The UI's stack dump (Storm UI's jstack) on a LocalCluster (real ZooKeeper, real workers): the
topology page links every worker's stacks; the link and the JSON API ask that worker through
ZooKeeper and show its threads; an unknown worker is 404 and another site's request 403, even on
a read-only UI. In headless Chromium (as test_ui_browser): the link the page's script renders
opens the worker's threads in a new tab (docs/ui-stacks.png when SQUALL_UI_SCREENSHOTS=docs)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, assigned_slots, id_pipeline, wait_for, wait_running  # the integration tests' helpers

from squall_operator.local import LocalCluster
from squall_operator.ui import UiServer, create_app
from squall_operator.ui.data import UiData

pytestmark = pytest.mark.integration



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
    cluster.submit(topo)
    wait_running(cluster, topo)
    data = UiData(cluster.state, interval=0.5)
    data.start()
    ui = UiServer(create_app(data, None)).start()  # read-only: no actions
    try:
        slots = sorted(s.key() for s in assigned_slots(cluster, "dumped"))
        status, _, page = get(ui.url + "topology/dumped")
        assert status == 200
        for slot in slots:
            assert f'href="/topology/dumped/stacks/{slot}"' in page, page

        status, kind, text = get(ui.url + f"topology/dumped/stacks/{slots[0]}", {"Sec-Fetch-Site": "same-origin"})
        assert (status, kind) == (200, "text/plain"), text
        assert text.startswith(f"worker {slots[0]} (pid ") and '"MainThread" ident=' in text, text[:2000]

        status, kind, body = get(ui.url + f"api/v1/topology/dumped/profiling/dumpjstack/{slots[1]}")
        assert (status, kind) == (200, "application/json"), body
        got = json.loads(body)
        assert got["worker"] == slots[1] and got["pid"] > 0 and '"squall-debug" ident=' in got["dump"]

        status, _, body = get(ui.url + "api/v1/topology/dumped/profiling/dumpjstack/nowhere-1")
        assert status == 404 and "has no worker" in body
        status, _, body = get(ui.url + "api/v1/topology/nosuch/profiling/dumpjstack/nowhere-1")
        assert status == 404 and "no topology" in body
        status, _, body = get(ui.url + f"topology/dumped/stacks/{slots[0]}", {"Sec-Fetch-Site": "cross-site"})
        assert status == 403 and "UI's own pages" in body
    finally:
        ui.stop()
        data.stop()


def test_stacks_link_in_headless_chromium(make_cluster: Callable[..., LocalCluster], browser: Any,
                                          tmp_path: Path) -> None:
    cluster = make_cluster(nodes=1, slots=1)
    topo = id_pipeline("dumped", tmp_path / "out", 0, rate=20, workers=1)
    cluster.submit(topo)
    wait_running(cluster, topo)
    (slot,) = sorted(s.key() for s in assigned_slots(cluster, "dumped"))
    data = UiData(cluster.state, interval=0.5)
    data.start()
    ui = UiServer(create_app(data, None)).start()
    driver = browser
    try:
        driver.get(ui.url + "topology/dumped")
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
    finally:
        ui.stop()
        data.stop()
