"""`squall run` as a user runs it: a subprocess that starts its own ZooKeeper, nimbus and worker
processes, prints a summary, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from childproc import die_with_this_process

from squall.zkserver import java_available

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = Path(__file__).resolve().parent / "topologies"


def squall(*args: str) -> list[str]:
    return [sys.executable, "-m", "squall_operator", *args]


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def descendants(root: int) -> dict[int, str]:
    """pid -> cmdline of every live process below `root`, from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = _ppid(int(entry))
            if ppid is not None:
                parents[int(entry)] = ppid
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        children = {p for p, pp in parents.items() if pp in frontier and p not in found}
        for p in children:
            cmd = _cmdline(p)
            if cmd is not None:
                found[p] = cmd
        frontier = children
    return found


def alive_with(pid: int, cmdline: str) -> bool:
    """Whether `pid` still runs the same command (a recycled pid does not count)."""
    cmd = _cmdline(pid)
    if cmd is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return cmd == cmdline and state != "Z"


@pytest.mark.skipif(not java_available(), reason="no java on PATH (squall run starts an embedded ZooKeeper)")
def test_run_wordcount_writes_summary_and_leaves_nothing(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    proc = subprocess.Popen(
        squall("run", "examples/wordcount/topology.yaml", "--duration", "6", "--kill-wait", "5",
               "--summary-json", str(summary), "--no-progress"),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_this_process(),
    )
    seen: dict[int, str] = {}
    try:
        # collect the run's children (ZooKeeper's JVM, the workers) while it runs
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            for pid, cmd in descendants(proc.pid).items():
                # keep the first real command line: a process being reaped reads as ''
                if cmd and pid not in seen:
                    seen[pid] = cmd
            time.sleep(0.3)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    # stdout is a pipe: the final table has every column, whatever its width (it
    # was cut at 80 columns, its header ending `p50 ms   p9`)
    lines = text.splitlines()
    header = next(line for line in lines if "execs" in line)
    assert header.split()[-4:] == ["p50", "ms", "p99", "ms"], text
    body = lines[lines.index(header) + 2:]

    def figure(cell: str) -> bool:
        return cell.replace(",", "").replace(".", "").isdigit()
    # a row: the component's name (COLUMNS, when set, folds a long one onto a second line),
    # then its 7 figures, whole
    rows = [cells for line in body if len(cells := line.split()) >= 8 and all(map(figure, cells[-7:]))]
    assert [r[0] for r in rows] == ["sentences", "split", "count", "report"], text
    assert any("squall.worker" in c for c in seen.values()), f"no worker process was seen: {seen}"
    assert any("ZooKeeperServerMain" in c for c in seen.values()), f"no ZooKeeper was seen: {seen}"

    data = json.loads(summary.read_text())
    assert data["topology"] == "wordcount" and data["exit_code"] == 0
    comps = data["components"]
    assert set(comps) == {"sentences", "split", "count", "report"}
    spout = comps["sentences"]
    assert spout["kind"] == "spout" and spout["acked"] > 0 and spout["emitted"] > 0
    lat = spout["complete_latency_ms"]
    assert lat["samples"] > 0 and 0 < lat["p50"] <= lat["p99"]
    for bolt in ("split", "count"):
        assert comps[bolt]["kind"] == "bolt" and comps[bolt]["executed"] > 0
        assert {"p50", "p99", "mean"} <= set(comps[bolt]["execute_latency_ms"])

    # nothing of the run is left: no worker, no ZooKeeper JVM
    left = {p: c for p, c in seen.items() if alive_with(p, c)}
    assert not left, f"processes left behind by squall run: {left}"
    root_marker = f"/squall-local-{proc.pid}-"
    stray = {p: c for p in map(int, filter(str.isdigit, os.listdir("/proc")))
             if (c := _cmdline(p)) and root_marker in c}
    assert not stray, f"workers of this run still running: {stray}"


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("invalid_unknown_input.yaml", "spec.bolts[0].inputs[0].component"),
        ("invalid_fields_grouping.yaml", "spec.bolts[0].inputs[0].fields[0]"),
        ("invalid_class.yaml", "spec.bolts[0].class"),
        ("invalid_name.yaml", "spec.spouts[0].name"),
    ],
)
def test_run_refuses_invalid_topology_before_starting(name: str, path: str, tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    command = squall("run", str(TOPOLOGIES / name), "--duration", "5", "--summary-json", str(summary), "--no-progress")
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=die_with_this_process())
    seen: dict[int, str] = {}
    while proc.poll() is None:
        seen.update(descendants(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out + err).decode()
    message = err.decode()
    assert path in message, message
    assert "invalid topology" in message
    assert not summary.exists()
    # nothing was started: no ZooKeeper, no worker. The one child allowed is the class check
    # (squall.classcheck), a fork of this command: it has squall run's own command line (or
    # none, once it has exited), and it is gone with squall run.
    started = {p: c for p, c in seen.items() if c not in ("", " ".join(command) + " ")}
    assert not started, f"squall run started processes for an invalid topology: {started}"
    assert len(seen) <= 1, f"more than the class check ran: {seen}"
    assert not [p for p in seen if _cmdline(p)], f"the class check outlived squall run: {seen}"


@pytest.mark.parametrize("option", ["--metrics-port", "--ui-port"])
def test_run_on_a_busy_port_is_one_line_before_anything_starts(option: str, tmp_path: Path) -> None:
    """A busy --metrics-port once printed its error, then an empty table titled
    `wordcount [KILLED] 0.0s`. docs/operator.md: one line and exit 1 before anything starts."""
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    summary = tmp_path / "summary.json"
    extra = ["--ui"] if option == "--ui-port" else []
    command = squall("run", "examples/wordcount/topology.yaml", *extra, option, str(port), "--duration", "5",
                     "--summary-json", str(summary))
    try:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=die_with_this_process())
        seen: dict[int, str] = {}
        while proc.poll() is None:
            seen.update(descendants(proc.pid))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
    finally:
        busy.close()
    assert proc.returncode == 1, (out + err).decode()
    assert out.decode() == "", out.decode()
    assert err.decode().splitlines() == [f"error: squall run: {option} {port}: cannot listen on 127.0.0.1: "
                                         "Address already in use"], err.decode()
    assert not summary.exists()
    started = {p: c for p, c in seen.items() if "ZooKeeperServerMain" in c or "squall.worker" in c}
    assert not started, f"squall run started processes before refusing the port: {started}"
