"""The canary of the hand-over roll (`spec.upgrade.canary`) on the real nodes.

bench/chaos.py's durable source -> pass -> sink topology (2 workers, every ack and delivery
recorded on a hostPath) runs under steady load with a canary of 1 slot and a 20 s analysis.
Its pass bolt is tests/k8s/canary_components.py's FlakyPassBolt, which fails the share of its
tuples that the worker's environment variable CANARY_FAIL_FRACTION says: a change of
`spec.worker.env` is a new version of the topology, no new image needed.

- The bad version (CANARY_FAIL_FRACTION 0.2): the canary's pass executor fails 20% of its tuples
  against none on the old pod, so the operator rolls the canary slot back to the last good
  settings by itself (Events CanaryFailed, RolledBack; condition RolledBack; status.upgrade),
  leaves spec.worker as the user wrote it and does not try those settings again.
- The good version (another env change): the canary passes its 20 s and the roll completes.

Every id is acked in the end (the failed ones replayed by the spout): nothing lost. Figures: the
time from the patch to the canary's verdict and to every worker back on the last good settings
(`SQUALL_K8S_CANARY_JSON=FILE` appends them), the good version's roll.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pytest

from .conftest import wait_for
from .test_chart_real_nodes import BENCH, REPO, Release, load_bench_chaos

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

TEMPLATE = "squall.io/template-hash"
RATE = 200.0


def _cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((x for x in st.get("conditions") or [] if x["type"] == type_), {})


def _events(r: Release, name: str) -> list[dict[str, Any]]:
    items = r.get("events", "--field-selector", f"involvedObject.name={name}")["items"]
    return sorted(items, key=lambda e: (e["metadata"]["creationTimestamp"], e["metadata"]["name"]))


def _templates(r: Release, name: str) -> set[str]:
    return {p["metadata"]["annotations"].get(TEMPLATE, "") for p in r.workers(name, live=True)}


def test_a_failing_version_is_rolled_back_by_its_canary_and_a_good_one_completes(release: Release) -> None:
    chaos = load_bench_chaos()
    r = release
    name, load_secs = "canary", 110.0
    count = int(RATE * load_secs)
    r.kubectl("create", "configmap", "canary-components",
              f"--from-file={BENCH / 'topologies' / 'chaos_components.py'}",
              f"--from-file={REPO / 'tests' / 'k8s' / 'canary_components.py'}")
    out = r.out_dir(name)
    doc = r.id_pipeline(name, out, 0, workers=2)
    spec = doc["spec"]
    spec["maxSpoutPending"] = 1000
    spec["upgrade"] = {"canary": {"slots": 1, "analysisSecs": 20}}
    spec["config"] = {"chaos.count": count, "chaos.rate": RATE, "chaos.out": "/out"}
    spec["worker"]["volumes"][0]["configMap"]["name"] = "canary-components"
    spec["spouts"] = [{"name": "ids", "class": "chaos_components:DurableSpout", "parallelism": 2}]
    spec["bolts"][0]["class"] = "canary_components:FlakyPassBolt"
    spec["bolts"][1]["class"] = "chaos_components:SinkBolt"
    env = spec["worker"]["env"]
    try:
        r.apply(doc)
        wait_for(lambda: r.running(name, 2), 240, interval=1, what=f"{name} Running 2/2")
        wait_for(lambda: len(chaos.read_records(out)[0]) >= 3 * RATE, 120, interval=1, what="the first acks")
        good = wait_for(lambda: (r.status(name).get("upgrade") or {}).get("lastGood"), 30, interval=1,
                        what="status.upgrade.lastGood")
        assert _templates(r, name) == {good["templateHash"]}

        # -- the bad version: rolled back by itself ---------------------------------------------
        bad_env = [*env, {"name": "CANARY_FAIL_FRACTION", "value": "0.2"}]
        at = time.time()
        r.kubectl("patch", "topology", name, "--type", "merge", "-p",
                  json.dumps({"spec": {"worker": {"env": bad_env}}}))
        seen = wait_for(lambda: (s := r.status(name)).get("roll", {}).get("step") == "Canary" and s, 60,
                        interval=0.5, what="the canary")
        assert seen["phase"] == "Rolling" and _cond(seen, "Rolling")["reason"] == "Canary"
        wait_for(lambda: "CanaryFailed" in r.reasons(name), 120, interval=0.5, what="the canary's verdict")
        verdict_s = time.time() - at

        def rolled_back() -> dict[str, Any] | None:
            s = r.status(name)
            done = (s.get("phase") == "Running" and s.get("workers") == "2/2"
                    and _cond(s, "Rolling").get("reason") == "Completed"
                    and _templates(r, name) == {good["templateHash"]})
            return s if done else None

        st = wait_for(rolled_back, 120, interval=0.5, what="every worker back on the last good settings")
        rolled_back_s = time.time() - at
        events = _events(r, name)
        reasons = [e["reason"] for e in events]
        assert reasons.index("RollStarted") < reasons.index("CanaryFailed") < reasons.index("RolledBack"), reasons
        failed = next(e for e in events if e["reason"] == "CanaryFailed")
        print(f"canary: verdict {verdict_s:.1f}s, rolled back {rolled_back_s:.1f}s after the patch: {failed['message']}")
        # the canary's pass executor fails 20% of its tuples, and its spout's trees with them (the
        # load-aware shuffle, Storm 2's default, sends them to their own worker's pass executor):
        # either may be named
        assert failed["type"] == "Warning" and re.match(
            r"(ids|pass): (19|2[01])\.\d% of its tuples failed on the canary", failed["message"]), failed["message"]
        assert "RollCompleted" not in reasons
        cond = _cond(st, "RolledBack")
        assert cond["status"] == "True" and cond["reason"] == "FailedFraction", cond
        assert st["upgrade"]["rolledBack"]["reason"] == "FailedFraction"
        assert st["upgrade"]["lastGood"]["templateHash"] == good["templateHash"]
        # the user's spec is left as written; no live pod runs the rejected settings
        assert r.get("topology", name)["spec"]["worker"]["env"] == bad_env
        for p in r.workers(name, live=True):
            assert "CANARY_FAIL_FRACTION" not in {e["name"] for e in p["spec"]["containers"][0]["env"]}
        # and they are not tried again while the spec asks for them
        time.sleep(8)
        assert r.reasons(name).count("RollStarted") == 1 and _templates(r, name) == {good["templateHash"]}

        # -- the good version: the canary passes, the roll completes -----------------------------
        good_env = [*env, {"name": "CANARY_FAIL_FRACTION", "value": "0"}]
        at2 = time.time()
        r.kubectl("patch", "topology", name, "--type", "merge", "-p",
                  json.dumps({"spec": {"worker": {"env": good_env}}}))

        def completed() -> dict[str, Any] | None:
            s = r.status(name)
            new = (s.get("upgrade") or {}).get("lastGood") or {}
            done = (s.get("phase") == "Running" and s.get("workers") == "2/2"
                    and _cond(s, "Rolling").get("reason") == "Completed"
                    and new.get("templateHash") not in (None, good["templateHash"])
                    and _templates(r, name) == {new["templateHash"]})
            return s if done else None

        st = wait_for(completed, 180, interval=0.5, what="the good version rolled out")
        completed_s = time.time() - at2
        reasons = r.reasons(name)
        assert reasons.count("CanaryPassed") == 1 and reasons.count("RollCompleted") == 1, reasons
        assert reasons.count("CanaryFailed") == 1, reasons
        passed = next(e["message"] for e in _events(r, name) if e["reason"] == "CanaryPassed")
        assert _cond(st, "RolledBack")["status"] == "False" and "rolledBack" not in st["upgrade"]

        # -- nothing lost ------------------------------------------------------------------------
        assert time.time() < at + load_secs - 5, "the canaries outlasted the load: measure with a longer one"
        wait_for(lambda: len(chaos.read_records(out)[1] & set(range(count))) == count, 300, interval=1,
                 what=f"every one of the {count} ids acked at the spout")
        r.delete_and_wait_gone(name)
        _, acked, deliveries = chaos.read_records(out)
        figures = {
            "rate": RATE, "ids": count, "verdict_s": round(verdict_s, 1), "rolled_back_s": round(rolled_back_s, 1),
            "good_roll_s": round(completed_s, 1), "failed": failed["message"], "passed": passed,
            "lost": count - len(acked & set(range(count))), "acked_undelivered": len(acked - set(deliveries)),
            "duplicates": len(deliveries) - len(set(deliveries)),
        }
        print(f"canary figures: {json.dumps(figures)}")
        if os.environ.get("SQUALL_K8S_CANARY_JSON"):
            with open(os.environ["SQUALL_K8S_CANARY_JSON"], "a") as f:
                f.write(json.dumps(figures) + "\n")
        assert figures["lost"] == 0 and figures["acked_undelivered"] == 0, figures
    finally:
        r.delete_and_wait_gone(name)
        r.kubectl("delete", "configmap", "canary-components", "--ignore-not-found")
