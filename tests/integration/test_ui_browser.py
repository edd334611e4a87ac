"""The web UI in a real browser: headless Chromium (Debian's chromium + chromium-driver,
installed by scripts/setup-browser) driven by Selenium opens the UI of `squall run --ui-actions`
running the word count, watches the figures move, deactivates the topology with the page's
button and sees the spout's emitted count stop, activates it again and sees it move again.
Screenshots of both pages go to the test's tmp dir, and to docs/ when SQUALL_UI_SCREENSHOTS=docs
(how docs/ui-topology.png and docs/ui-topologies.png were made). On the same run: the reported
injection (`/topology/<img src=x onerror=...>` once ran its handler) runs nothing, number
columns are right-aligned, and the page's script prints latencies as the server does."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.zkserver import java_available
from squall_operator.ui.data import latency_text

from helpers import REPO, SquallRun, browser_missing, wait_for  # the integration tests' helpers (same directory)

pytestmark = pytest.mark.integration

def _missing() -> str | None:
    if not java_available():
        return "no java on PATH (squall run starts an embedded ZooKeeper)"
    return browser_missing()


@pytest.fixture(scope="module")
def squall_run() -> Iterator[tuple[str, list[str]]]:
    """`squall run` of the word count with the UI (actions on, any free port): its URL."""
    run = SquallRun("examples/wordcount/topology.yaml", "--duration", "300", "--no-progress", "--ui-actions",
                    "--ui-port", "0", "--kill-wait", "2")
    try:
        m = run.wait_line(r"UI: (http://127\.0\.0\.1:\d+/)", 120)
        assert m, "squall run did not print its UI address:\n" + run.text()
        yield m.group(1), run.out
    finally:
        run.stop(2)  # Ctrl-C: Storm's kill, then exit


def _shoot(driver: Any, name: str, tmp_path: Path) -> None:
    driver.save_screenshot(str(tmp_path / name))
    if os.environ.get("SQUALL_UI_SCREENSHOTS") == "docs":
        # the whole page: as tall as its content
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1360, max(800, int(height) + 20))
        driver.save_screenshot(str(REPO / "docs" / name))
        driver.set_window_size(1360, 1000)


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_ui_in_headless_chromium(squall_run: tuple[str, list[str]], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    url, _ = squall_run
    driver = browser

    # read and click through JavaScript in one step: the page re-renders its tables every poll,
    # so an element found in one call may be gone by the next (a stale reference)
    def text(selector: str) -> str:
        got = driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';", selector)
        return str(got).strip()

    def click(selector: str) -> None:
        assert driver.execute_script(
            "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;", selector), selector

    def figure(key: str) -> int:
        t = text(f'[data-k="{key}"]').replace(",", "")
        return int(t) if t.isdigit() else -1

    # the topologies page: the word count listed, its acked count moving
    driver.get(url)
    wait_for(lambda: text('#topologies tr[data-topology="wordcount"]'), 60, "wordcount on the topologies page")
    acked = lambda: int(text('#topologies tr[data-topology="wordcount"] td:nth-child(7)').replace(",", "") or 0)  # noqa: E731
    a0 = wait_for(lambda: acked() > 0 and acked(), 120, "acked tuples on the topologies page")
    wait_for(lambda: acked() > a0, 30, "the acked count to move without a reload")
    _shoot(driver, "ui-topologies.png", tmp_path)

    # the topology page: figures move by themselves (the page polls the API)
    click('#topologies a[href="/topology/wordcount"]')
    wait_for(lambda: text("#status") == "ACTIVE", 30, "the topology page")
    e0 = wait_for(lambda: figure("spout:sentences:emitted") > 0 and figure("spout:sentences:emitted"), 60,
                  "the spout's emitted count")
    wait_for(lambda: figure("spout:sentences:emitted") > e0, 30, "the spout's emitted count to move")
    wait_for(lambda: figure("bolt:count:executed") > 0, 30, "the count bolt's executed count")
    assert text("#workers tbody tr"), "no workers shown"
    assert "spec.numWorkers" in text("#configuration")

    # deactivate from the page: the spout stops emitting
    click("#btn-deactivate")
    wait_for(lambda: text("#status") == "INACTIVE", 30, "INACTIVE after the Deactivate button")
    assert "deactivated" in text("#message")
    # the worker sees the change through its ZooKeeper watch and the heartbeats written before
    # that still arrive (late on a loaded machine): wait until the figure holds still for 6 s
    # (several page refreshes), then check it stays put
    last = {"value": -2, "since": time.monotonic()}

    def still_for(secs: float) -> int | None:
        value = figure("spout:sentences:emitted")
        if value != last["value"]:
            last.update(value=value, since=time.monotonic())
        return value if time.monotonic() - last["since"] >= secs else None

    stopped = wait_for(lambda: still_for(6.0), 90, "the spout's emitted count to stop while INACTIVE")
    updated = driver.execute_script("return document.body.dataset.updated")
    wait_for(lambda: driver.execute_script("return document.body.dataset.updated") != updated, 10, "a refresh")
    time.sleep(4)  # two more refreshes
    assert figure("spout:sentences:emitted") == stopped, "the spout kept emitting while INACTIVE"
    assert driver.find_element(By.ID, "btn-deactivate").get_attribute("disabled") is not None

    # activate again: it emits again
    click("#btn-activate")
    wait_for(lambda: text("#status") == "ACTIVE", 30, "ACTIVE after the Activate button")
    wait_for(lambda: figure("spout:sentences:emitted") > stopped, 30, "the spout to emit again")
    # the 10 min window (the topology is younger: all of it)
    click('#windows button[data-window="600"]')
    wait_for(lambda: "10m" in text('[data-k="window-label"]'), 10, "the 10 min window")
    wait_for(lambda: figure("spout:sentences:emitted") > stopped, 30, "the 10 min figures")
    click('#windows button[data-window=":all-time"]')
    time.sleep(2.5)
    _shoot(driver, "ui-topology.png", tmp_path)


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_injected_markup_runs_nothing_in_chromium(squall_run: tuple[str, list[str]], browser: Any) -> None:
    """The 404 page of `/topology/<img src=x onerror=...>` once echoed the name raw
    and Chromium ran the handler (which, with --ui-actions, could post any action). Now the name is
    text, and the Content-Security-Policy would refuse an inline handler anyway."""
    from urllib.parse import quote

    url, out = squall_run
    driver = browser
    handler = "document.title='pwned';window.squallPwned=1"
    for target in (url + "topology/" + quote(f"<img src=x onerror={handler}>", safe=""),
                   url + "topology/" + quote(f"<svg onload={handler}>", safe="")):
        driver.get(target)
        time.sleep(0.5)  # an image's error event fires after the load
        assert driver.execute_script("return window.squallPwned") is None, target
        assert driver.title != "pwned" and "pwned" not in driver.title, driver.title
        assert driver.execute_script("return document.querySelectorAll('img, svg').length") == 0
        assert "onerror=" in driver.find_element("tag name", "main").text or "onload=" in driver.find_element(
            "tag name", "main").text, "the name is not shown as text"
    assert "Traceback" not in "".join(out)


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_numbers_right_aligned_and_latencies_as_the_server_prints_them(
        squall_run: tuple[str, list[str]], browser: Any) -> None:
    """`table.grid td` once overrode `td.num` (numbers left-aligned); execute latency
    read `0.00` for two bolts and `0` for the third once the script refreshed it, and two
    decimals turned latencies under 10 us into 0."""
    url, _ = squall_run
    driver = browser
    driver.get(url + "topology/wordcount")
    wait_for(lambda: driver.execute_script("return document.body.dataset.updated"), 60, "a refresh of the page")
    aligns = driver.execute_script(
        "return [...document.querySelectorAll('td.num, th.num')].map((e) => getComputedStyle(e).textAlign)")
    assert aligns and set(aligns) == {"right"}, aligns
    assert driver.execute_script("return getComputedStyle(document.querySelector('#bolts td')).textAlign") == "left"
    values = [0.0, 0.0004, 0.0034567, 0.0999, 1.0, 3.474, 34.74, 99.96, 1234.5, 123456.4]
    got = driver.execute_script("return arguments[0].map((v) => window.squallFormat.latency(v))", values)
    assert got == [latency_text(v) for v in values], got
    cells = driver.execute_script(
        "return [...document.querySelectorAll('[data-k$=\"Latency\"]')].map((e) => e.textContent)")
    assert cells and all(c == "0" or "." in c or c.replace(",", "").isdigit() for c in cells), cells
    assert "0.00" not in cells, cells


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_the_debug_switch_shows_a_components_sampled_tuples_in_chromium(
        squall_run: tuple[str, list[str]], browser: Any, tmp_path: Path) -> None:
    """Storm UI's debug switch and event log: pick a component, sample all its emits for a
    while, and its tuples (words, as text) show on the page by themselves; stop it again."""
    url, _ = squall_run
    driver = browser
    driver.get(url + "topology/wordcount")
    wait_for(lambda: driver.execute_script("return document.body.dataset.updated"), 60, "a refresh of the page")
    assert "No sampled tuples." in driver.execute_script("return document.querySelector('#events').textContent")
    driver.execute_script(
        "document.getElementById('dbg-component').value = 'split';"
        "document.getElementById('dbg-pct').value = '100';"
        "document.getElementById('dbg-secs').value = '60';"
        "document.querySelector('#debug button[data-debug=enable]').click();")
    wait_for(lambda: "sampling 100% of split's emits for 60s" in driver.execute_script(
        "return document.getElementById('message').textContent"), 30, "the switch's answer")
    rows = wait_for(lambda: driver.execute_script(
        "return [...document.querySelectorAll('#events tbody tr:not(.empty)')].map((r) => "
        "[...r.children].map((c) => c.textContent))") or None, 60, "sampled tuples on the page")
    # time, component, task, stream, message id, values, worker: a bolt's emit of one word
    assert all(r[1] == "split" and r[3] == "default" and r[5].startswith("['") for r in rows), rows[:3]
    _shoot(driver, "ui-events.png", tmp_path)
    driver.execute_script("document.querySelector('#debug button[data-debug=disable]').click();")
    wait_for(lambda: "no longer sampled" in driver.execute_script(
        "return document.getElementById('message').textContent"), 30, "the switch turned off")
