"""A stateful topology's graph upgrade by `kubectl apply`, on the real nodes, under load.

The stateful word count of examples/stateful-wordcount (its own image, its state in the Redis of
the example's redis.yaml, applied in the shared `release`'s namespace) reads a numbered input of
LIMIT sentences at RATE a second; the sentence number is the spout's message id, and the spout's
read position is its state. While it runs:

- `kubectl apply` of the same file with a bolt added (`audit`, sorted before `count`, so every
  counter task's id moves by one): the operator upgrades the graph (Events `Upgrading`, then
  `Upgraded` with the drain's end; phase `Upgrading`, then `Running`; every worker pod of the old
  launch replaced), the checkpoint spout's final commit ends the drain, and the new launch finds
  each task's state under `<component>#<index>`: the committed position and every word's total,
  read straight from Redis 4 times a second through the whole run, never go back (a state
  started afresh would), and the new bolt receives tuples.
- `kubectl apply` with count's task count changed (numTasks 4 -> 6): refused, condition
  `SpecChangeRefused` (`CannotBeCarried`, saying why) and a Warning Event; the topology keeps
  running its graph in the same pods and its committed position goes on; the spec applied back
  turns the condition False (`SpecApplied`).

At the end the totals committed to Redis equal a recount of the whole input
(`stateful_wordcount.expected_counts`): no id lost across the upgrade, none counted twice.
Figures printed (docs/operator.md quotes them): the seconds from the apply to `Upgraded`, to
the new graph's first commit and to its new bolt's first tuple in the status; the committed
sentences a second before and after the upgrade and the longest time nothing was committed around
it (under messageTimeoutSecs: a checkpoint round lost at the new launch stalls it that long), a
timeline of the sentences committed each second (`SQUALL_K8S_UPGRADE_JSON=FILE` appends the
figures).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from squall.statebackend import StateBackendError, namespace, open_provider
from squall.topology_keys import KEY_CONF, topology_key
from squall.validation import parse_topology
from loadfile import load_file

from .conftest import pod_ready, wait_for

if TYPE_CHECKING:
    from .test_chart_real_nodes import Release

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

STATEFUL = Path(__file__).resolve().parents[2] / "examples" / "stateful-wordcount"
NAME = "swc-upgrade"
RATE = 100.0  # sentences a second
LIMIT = 6000  # about 60 s of input: the upgrade and the refusal were done within about 20 s of it on the real nodes
REFUSED = ("count is stateful and its task count changed (4 -> 6): its state is kept per task and cannot be "
           "carried to another count")


def _example() -> ModuleType:
    return load_file(STATEFUL / "stateful_wordcount.py", "_example_stateful_wordcount")


def _cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((x for x in st.get("conditions") or [] if x["type"] == type_), {})


class Committed:
    """What the topology committed to Redis, read from this machine (the Redis pod's address is
    routed here) with the state provider the workers use, by component and task index."""

    def __init__(self, doc: dict[str, Any], ns: str, host: str) -> None:
        topo = parse_topology(doc, source=NAME)
        conf = {"topology.name": topo.name, **topo.spec.config, KEY_CONF: topology_key(topo.name, ns),
                "topology.state.provider.config": {"host": host, "port": 6379}}
        self.provider = open_provider(conf)
        self.tasks = {c.name: c.tasks for c in topo.spec.components}

    def _states(self, component: str) -> list[Any]:
        return [self.provider.state(namespace(component, i)) for i in range(self.tasks[component])]

    def position(self) -> int:
        return min(int(s.get("position", 0)) for s in self._states("sentences"))

    def txids(self, component: str) -> list[int]:
        return [s.committed_txid() or -1 for s in self._states(component)]

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self._states("count"):
            for word, n in s:
                assert word not in out, f"{word} in two count tasks"
                out[word] = n
        return out


class Sampler:
    """The committed position 4 times a second, and the status's components (acked and failed
    by component) once a second, in a thread (stopped by `stop`)."""

    def __init__(self, committed: Committed, status: Callable[[], dict[str, Any]]) -> None:
        self.committed, self.status = committed, status
        self.samples: list[tuple[float, int]] = []
        self.counts: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._run, name="position-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.25):
            n += 1
            try:
                self.samples.append((time.time(), self.committed.position()))
                if n % 4 == 0:
                    comps = self.status().get("components") or {}
                    self.counts.append((time.time(), {c: (int(v.get("acked", 0)), int(v.get("failed", 0)))
                                                      for c, v in comps.items()}))
            except (StateBackendError, subprocess.CalledProcessError) as exc:  # noted, not fatal
                self.errors.append(repr(exc))

    def timeline(self, start: float, end: float) -> str:
        """Sentences committed in each second of [start, end) (`+N`), and the status's failed
        counts where they changed (`fail {component: N}`), one entry a second."""
        out = []
        for k in range(int(end - start)):
            a, b = start + k, start + k + 1
            inside = [p for t, p in self.samples if a <= t < b]
            before = [p for t, p in self.samples if t < a]
            moved = (inside[-1] - before[-1]) if inside and before else 0
            fails = [f for t, f in self.counts if a <= t < b]
            failed = {c: x[1] for c, x in fails[-1].items() if x[1]} if fails else {}
            out.append(f"{k + int(start - self.t0)}s +{moved}" + (f" fail {failed}" if failed else ""))
        return "; ".join(out)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def rate(self, start: float, end: float) -> float:
        inside = [(t, p) for t, p in self.samples if start <= t <= end]
        if len(inside) < 2:
            return 0.0
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def longest_still(self, start: float, end: float) -> float:
        """The longest time within [start, end] in which the committed position did not move."""
        last_move, worst, prev = start, 0.0, None
        for t, p in self.samples:
            if t < start:
                prev = p
                continue
            if t > end:
                break
            if prev is not None and p != prev:
                worst = max(worst, t - last_move)
                last_move = t
            prev = p
        return max(worst, end - last_move) if prev is not None else end - start


def test_a_bolt_added_to_a_running_stateful_topology_carries_its_state_and_a_task_count_change_is_refused(
    release: Release,
) -> None:
    r = release
    example = _example()
    r.kubectl("apply", "-f", str(STATEFUL / "redis.yaml"))
    sampler: Sampler | None = None
    committed: Committed | None = None
    try:
        (redis,) = wait_for(lambda: [p for p in r.get("pods", "-l", "app.kubernetes.io/name=redis")["items"]
                                     if pod_ready(p) and not p["metadata"].get("deletionTimestamp")],
                            120, interval=1, what="Redis Ready")
        doc = yaml.safe_load((STATEFUL / "topology.yaml").read_text())
        doc["metadata"]["name"] = NAME
        spec = doc["spec"]
        spec.update({"messageTimeoutSecs": 10, "killWaitSecs": 2, "rebalanceWaitSecs": 20})
        cfg = spec["config"]
        cfg["topology.state.provider.config"]["host"] = "redis"  # the Service of redis.yaml
        cfg.update({"wordcount.limit": LIMIT, "wordcount.rate": RATE, "topology.state.checkpoint.interval.ms": 500})
        r.apply(doc)
        t0 = time.monotonic()
        wait_for(lambda: r.running(NAME, 2), 240, interval=1, what=f"{NAME} Running 2/2")
        print(f"{NAME} Running 2/2 in {time.monotonic() - t0:.1f}s")
        committed = Committed(doc, r.ns, redis["status"]["podIP"])
        wait_for(lambda: committed.position() >= 500, 120, interval=0.5, what="a few committed checkpoints")
        sampler = Sampler(committed, lambda: r.status(NAME))
        time.sleep(3)  # the committed rate before the upgrade
        before, totals_before = committed.position(), committed.totals()
        old_pods = {p["metadata"]["uid"] for p in r.workers(NAME, live=True)}
        assert len(old_pods) == 2

        # -- a bolt added: the graph upgrade -----------------------------------------------------
        grown = copy.deepcopy(doc)
        grown["spec"]["bolts"].append({"name": "audit", "class": "stateful_wordcount:SplitSentence",
                                       "parallelism": 1, "inputs": [{"component": "sentences",
                                                                     "grouping": "shuffle"}]})
        at = time.time()
        r.apply(grown)
        generation = r.get("topology", NAME)["metadata"]["generation"]
        seen_upgrading = wait_for(lambda: r.status(NAME).get("phase") == "Upgrading" or "Upgraded" in r.reasons(NAME),
                                  60, interval=0.2, what="the upgrade's drain")
        assert seen_upgrading
        wait_for(lambda: "Upgraded" in r.reasons(NAME), 90, interval=0.2, what="the Upgraded Event")
        upgraded_s = time.time() - at
        at_launch = committed.position()
        launch_txid = max(committed.txids("sentences"))
        wait_for(lambda: min(committed.txids("sentences") + committed.txids("count")) > launch_txid, 90,
                 interval=0.2, what="a commit of the new launch")
        first_commit_s = time.time() - at

        def active() -> dict[str, Any] | None:
            st = r.status(NAME)
            live = {p["metadata"]["uid"] for p in r.workers(NAME, live=True)}
            done = (st.get("phase") == "Running" and st.get("workers") == "2/2"
                    and st.get("observedGeneration") == generation and not live & old_pods
                    and (st.get("components") or {}).get("audit", {}).get("executed", 0) >= 1)
            return st if done else None

        st = wait_for(active, 120, interval=0.5, what="the new graph Running 2/2 on new pods, audit executing")
        active_s = time.time() - at
        assert _cond(st, "Active")["status"] == "True", st["conditions"]
        events = r.get("events", "--field-selector", f"involvedObject.name={NAME}")["items"]
        messages = {e["reason"]: e["message"] for e in events}
        assert messages["Upgrading"].startswith("added audit"), messages["Upgrading"]
        assert "nothing pending" in messages["Upgraded"], f"the drain waited for its end: {messages['Upgraded']}"
        # the state was carried, not started afresh: the position and every total went on from
        # where they were (a fresh state would have committed position ~0 and empty counters)
        after_totals = committed.totals()
        assert committed.position() >= at_launch >= before
        assert all(after_totals.get(w, 0) >= n for w, n in totals_before.items()), "a total went back"
        assert sum(after_totals.values()) > sum(totals_before.values())

        # -- count's task count changed: refused, the topology keeps running ---------------------
        pods = {p["metadata"]["uid"] for p in r.workers(NAME, live=True)}
        wrong = copy.deepcopy(grown)
        next(b for b in wrong["spec"]["bolts"] if b["name"] == "count")["numTasks"] = 6
        refused_at = time.time()
        r.apply(wrong)
        cond = wait_for(lambda: (c := _cond(r.status(NAME), "SpecChangeRefused")).get("status") == "True" and c,
                        60, interval=0.5, what="condition SpecChangeRefused")
        refused_s = time.time() - refused_at
        assert cond["reason"] == "CannotBeCarried" and REFUSED in cond["message"], cond
        warning = next(e for e in r.get("events", "--field-selector", f"involvedObject.name={NAME}")["items"]
                       if e["reason"] == "SpecChangeRefused")
        assert warning["type"] == "Warning" and REFUSED in warning["message"], warning
        still = committed.position()
        assert still < LIMIT - 300, "the input was read before the refusal was checked: lengthen it"
        wait_for(lambda: committed.position() >= still + 200, 30, interval=0.5,
                 what="the committed position going on after the refusal")
        st = r.status(NAME)
        assert st["phase"] == "Running" and st["workers"] == "2/2", st
        assert {p["metadata"]["uid"] for p in r.workers(NAME, live=True)} == pods, "a pod was replaced"
        assert r.reasons(NAME).count("Upgrading") == 1 and r.reasons(NAME).count("RebalanceRequested") == 0
        r.apply(grown)  # the graph it runs: the refusal is over
        cond = wait_for(lambda: (c := _cond(r.status(NAME), "SpecChangeRefused")).get("status") == "False" and c,
                        60, interval=0.5, what="condition SpecChangeRefused False")
        assert cond["reason"] == "SpecApplied", cond

        # -- the end: every sentence counted once --------------------------------------------------
        wait_for(lambda: committed.position() >= LIMIT, 240, interval=1,
                 what=f"the spout's committed position to reach {LIMIT}")
        final_txid = min(committed.txids("sentences"))
        wait_for(lambda: min(committed.txids("count")) >= final_txid, 120, interval=0.5,
                 what=f"every counter to commit txid {final_txid}")
        sampler.stop()
        totals = committed.totals()
        expected = example.expected_counts(LIMIT)
        positions = [p for _, p in sampler.samples]
        went_back = [(a, b) for a, b in itertools.pairwise(positions) if b < a]
        components = r.status(NAME).get("components") or {}
        figures = {
            "rate": RATE, "sentences": LIMIT, "upgraded_s": round(upgraded_s, 1),
            "first_commit_s": round(first_commit_s, 1), "audit_active_s": round(active_s, 1),
            "committed_per_s_before": round(sampler.rate(at - 3, at), 1),
            "committed_per_s_after": round(sampler.rate(at + active_s, at + active_s + 5), 1),
            "longest_still_s": round(sampler.longest_still(at - 3, at + active_s + 3), 1),
            "position_at_apply": before, "position_at_launch": at_launch,
            "refused_s": round(refused_s, 1), "lost": sum(max(0, n - totals.get(w, 0)) for w, n in expected.items()),
            "counted_twice": sum(max(0, totals.get(w, 0) - n) for w, n in expected.items()),
            "failed": sum(int(c.get("failed", 0)) for c in components.values()),
            "sampler_errors": len(sampler.errors), "upgraded": messages["Upgraded"],
        }
        print(f"stateful upgrade figures: {json.dumps(figures)}")
        print(f"committed a second from the sampling's start (the apply at {at - sampler.t0:.1f}s): "
              f"{sampler.timeline(at - 3, at + active_s + 15)}")
        print(f"components at the end: {components}")
        if os.environ.get("SQUALL_K8S_UPGRADE_JSON"):
            with open(os.environ["SQUALL_K8S_UPGRADE_JSON"], "a") as f:
                f.write(json.dumps(figures) + "\n")
        assert not went_back, f"the committed position went back: {went_back[:5]}"
        # a checkpoint round lost at the new launch (its spout ran before its peers listened)
        # costs messageTimeoutSecs with nothing committed, and fails every pending tree
        assert figures["longest_still_s"] < spec["messageTimeoutSecs"], (
            f"nothing committed for {figures['longest_still_s']}s around the upgrade: "
            f"{sampler.timeline(at - 3, at + active_s + 15)}")
        assert totals == expected, {w: (totals.get(w), expected.get(w)) for w in set(totals) | set(expected)
                                    if totals.get(w) != expected.get(w)}
    finally:
        if sampler is not None:
            sampler.stop()
        if committed is not None:
            committed.provider.close()
        r.delete_and_wait_gone(NAME)
        r.kubectl("delete", "-f", str(STATEFUL / "redis.yaml"), "--wait=false", check=False)
