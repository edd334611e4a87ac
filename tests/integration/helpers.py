"""Helpers of the integration tests that run topologies on a LocalCluster (the `make_cluster`
fixture is in conftest.py): waits with deadlines that show the workers' logs on failure,
figures from the heartbeats in ZooKeeper, topologies built from the components in
tests/integration/topologies, the usual start/stop steps, the `squall` command as a child
process with the check of its one-line errors, and headless Chromium for the UI's pages."""

from __future__ import annotations

import collections
import contextlib
import importlib
import json
import queue
import re
import shutil
import subprocess
import sys
import threading
from types import ModuleType
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from childproc import die_with_this_process

from squall.models.cluster import WorkerSlot
from squall.models.v1alpha1 import Topology
from squall.plan import build_plan
from squall.validation import parse_topology
from squall_operator.local import LocalCluster

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = Path(__file__).resolve().parent / "topologies"
WORDCOUNT = REPO / "examples" / "wordcount"
COMPONENTS = "engine_components"


def wait_for(cond: Callable[[], Any], timeout: float, what: str, cluster: LocalCluster | None = None,
             interval: float = 0.1) -> Any:
    """Poll `cond` until it returns something truthy; fail with `what` (and the worker logs'
    tails) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}" + (logs_tail(cluster) if cluster else ""))
        time.sleep(interval)


def logs_tail(cluster: LocalCluster, lines: int = 25) -> str:
    out = []
    for name, text in cluster.worker_logs().items():
        out.append(f"\n--- {name} (last {lines} lines) ---\n" + "\n".join(text.splitlines()[-lines:]))
    if cluster.crashes:
        out.append(f"\n--- crashes: {cluster.crashes}")
    out.append(f"\n--- nimbus events: {cluster.nimbus.events[-15:]}")
    return "".join(out)


def totals(cluster: LocalCluster, topo: str) -> dict[str, collections.Counter[str]]:
    """Per component, the executor counters summed over the workers' latest heartbeats."""
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for beat in cluster.state.get_worker_heartbeats(topo).values():
        for ex in beat.executors.values():
            c = out[ex.component]
            for f in ("emitted", "executed", "acked", "failed", "pending"):
                c[f] += getattr(ex, f)
    return out


def latest_beat_time(cluster: LocalCluster, topo: str) -> float:
    beats = cluster.state.get_worker_heartbeats(topo)
    return min((b.time_secs for b in beats.values()), default=0.0)


def topology(name: str, spec: dict[str, Any], config: dict[str, Any]) -> Topology:
    data = {
        "apiVersion": "squall.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {**spec, "config": config},
    }
    return parse_topology(data, source=name)


def id_pipeline(name: str, out: Path, count: int, *, workers: int = 2, rate: float = 0, timeout: float = 5,
                middle: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> Topology:
    """ids (IdSpout) -> middle (PassBolt by default, shuffle) -> sink (SinkBolt, fields on id)."""
    middle = middle or {"name": "pass", "class": f"{COMPONENTS}:PassBolt", "parallelism": 2,
                        "inputs": [{"component": "ids", "grouping": "shuffle"}]}
    spec = {
        "numWorkers": workers,
        "messageTimeoutSecs": timeout,
        "maxSpoutPending": 500,
        "spouts": [{"name": "ids", "class": f"{COMPONENTS}:IdSpout", "parallelism": 1}],
        "bolts": [
            middle,
            {"name": "sink", "class": f"{COMPONENTS}:SinkBolt", "parallelism": 2,
             "inputs": [{"component": middle["name"], "grouping": "fields", "fields": ["id"]}]},
        ],
    }
    config = {"test.count": count, "test.rate": rate, "test.out": str(out), **(extra or {})}
    return topology(name, spec, config)


def component_slots(cluster: LocalCluster, topo: Topology) -> dict[str, set[WorkerSlot]]:
    """Component -> the slots its executors are assigned to, from the assignment in ZooKeeper."""
    base = cluster.state.get_storm(topo.name)
    assignment = cluster.state.get_assignment(topo.name)
    assert base is not None and assignment is not None
    plan = build_plan(topo, {}, base.component_executors)
    out: dict[str, set[WorkerSlot]] = collections.defaultdict(set)
    for executor, slot in assignment.slots().items():
        out[plan.task_component[executor[0]]].add(slot)
    return out


def assigned_slots(cluster: LocalCluster, name: str) -> set[WorkerSlot]:
    assignment = cluster.state.get_assignment(name)
    return set(assignment.slots().values()) if assignment else set()


def wait_running(cluster: LocalCluster, topo: Topology, timeout: float = 60) -> None:
    """Every assigned slot has a worker that registered its endpoint and heartbeats."""
    def ready() -> bool:
        slots = assigned_slots(cluster, topo.name)
        return bool(slots) and slots <= set(cluster.state.get_endpoints(topo.name)) and slots <= set(
            cluster.state.get_worker_heartbeats(topo.name))
    wait_for(ready, timeout, f"{topo.name}'s workers to start", cluster)


def stop_topology(cluster: LocalCluster, name: str, timeout: float = 60) -> None:
    """Storm's kill with a short wait, then wait until its workers have exited (their spouts'
    close and bolts' cleanup have run)."""
    cluster.kill(name, 1.0)
    assert cluster.wait_removed(name, timeout), f"{name} was not removed" + logs_tail(cluster)
    wait_for(lambda: not cluster.worker_pids(name), timeout, f"{name}'s workers to exit", cluster)


def read_spout(out: Path, cluster: LocalCluster) -> dict[str, Any]:
    files = sorted(out.glob("spout-*.json"))
    assert len(files) == 1, f"expected one spout file, found {files}" + logs_tail(cluster)
    return json.loads(files[0].read_text())


def wait_spout_done(out: Path, cluster: LocalCluster, timeout: float) -> None:
    wait_for(lambda: list(out.glob("spout-*.done")), timeout, "every message id to be acked", cluster, 0.2)


def import_example(folder: Path, *names: str) -> list[ModuleType]:
    """Imports an example's modules by their plain names (as its workers do), fresh: examples share
    module names (every one may have a `batch_job`), so a copy cached by an earlier test is dropped."""
    for name in names:
        sys.modules.pop(name, None)
    sys.path.insert(0, str(folder))
    try:
        return [importlib.import_module(name) for name in names]
    finally:
        sys.path.remove(str(folder))


def browser_missing() -> str | None:
    """Why the headless-browser tests cannot run here, or None."""
    if not shutil.which("chromium") and not shutil.which("chromium-browser") or not shutil.which("chromedriver"):
        return "Debian's chromium and chromium-driver are not installed (scripts/setup-browser installs them as root)"
    return None


@contextlib.contextmanager
def headless_chromium() -> Iterator[Any]:
    """Headless Chromium driven by Selenium (Debian's chromium and chromium-driver): a 1360x1000
    window at scale 1, as the UI's screenshots in docs/ were taken; quit on leaving."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium") or shutil.which("chromium-browser"))
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1360,1000", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(shutil.which("chromedriver"))), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def squall(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`squall ARGS...` as a user runs it: the console script's module in a child process."""
    return subprocess.run([sys.executable, "-m", "squall_operator", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """`proc` failed as the CLI promises: exit `code`, one line `error: ...` on stderr naming
    every one of `words`, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for word in words:
        assert word in lines[0], (word, lines[0])


class SquallRun:
    """`squall run ARGS...` from the repository as a child process; its output is read on a
    thread into a bounded queue so a test can wait for a line while the run goes on."""

    def __init__(self, *args: str) -> None:
        repo = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "squall_operator", "run", *args], cwd=repo, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, preexec_fn=die_with_this_process())
        self.lines: queue.Queue[str] = queue.Queue(maxsize=100_000)
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_line(self, pattern: str, timeout: float) -> re.Match[str] | None:
        """The first output line matching `pattern` (None when the run ends or `timeout` passes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    return None
                continue
            self.out.append(line)
            if m := re.search(pattern, line):
                return m
        return None

    def text(self) -> str:
        """Everything the run printed so far."""
        while not self.lines.empty():
            self.out.append(self.lines.get())
        return "".join(self.out)

    def stop(self, sig: int | None = None, timeout: float = 90) -> None:
        """Signal the run (or kill it) if it is still going, and reap it."""
        if self.proc.poll() is None:
            if sig is None:
                self.proc.kill()
            else:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_yaml(doc: dict[str, Any], path: Path) -> Path:
    """`doc` as a YAML file at `path` (a topology file for `squall update` and the like)."""
    import yaml

    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


class FakeClock:
    """An injected clock for nimbus and its monitor: `now` moves only when a test moves it."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
