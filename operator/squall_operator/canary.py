"""The canary of a roll, and what a failed one rolls back to, as pure decisions.

With `spec.upgrade.canary`, a hand-over roll replaces only its first `slots` worker slots with
the new pod settings, then watches them for `analysisSecs` before it replaces the others
(squall_operator.roll). `judge` compares what the workers' heartbeats say of the canary's
executors with what they say of the executors on the old pods, component by component:

- the failed fraction (tuples the component's executors failed, of those they acked or failed):
  the canary's may pass the old pods' by `maxFailedFraction` at most; where no old executor of the
  component reports enough tuples (all its executors are on the canary's slots), the canary's
  own fraction is held against `maxFailedFraction`;
- the p99 latency (complete latency for spouts, execute latency for bolts, from the merged
  latency histograms), judged after the failed fractions, over consecutive check intervals
  (`latency_checks`) rather than once over the whole window: an interval closes once it is
  `CHECK_SECS` long and each side has `MIN_LATENCY_SAMPLES` latencies in it (so its p99 is set by
  three tuples or more, not by one or two that met a stalled moment), and it regressed when the
  canary's p99 is above `maxP99Ratio` times the old pods' and `P99_SLACK_MS` above it. A
  component fails on its latency after `LATENCY_CHECKS` regressed intervals in a row, or, at the
  window's end, when more than half of its intervals, and two or more, regressed: one slow
  interval (a new worker's first seconds, a neighbour's burst on a shared machine) is noise, as
  a single failed measurement is to Argo Rollouts' `failureLimit` or Flagger's `threshold`;
- the canary pods' container restarts: at most `maxRestarts`;
- readiness: every canary slot has a ready pod of the new settings whose worker heartbeats, within
  the operator's `launchTimeoutSecs` of the canary's start, and still at the end of the window;
- the topology's own `Degraded` condition (squall_operator.degraded, the same heartbeat figures
  summed over the topology): turning True after the canary began fails it.

Both sides count from the analysis window's start (`since`: the heartbeats' cumulative counters
less a baseline the caller takes when the window begins), so they cover the same time and the
canary worker's own start is left out. A component is compared only once the canary's executors
of it have ended `MIN_TUPLES` tuples (a fraction of 3 tuples says nothing), and then at every
round, so a clear regression fails the canary as soon as the figures show it, without waiting
for the window's end (latencies: once the intervals say so); passing needs the whole window. An idle topology passes on readiness and restarts alone (the message says so).

`Upgrade` is what the operator keeps in `status.upgrade`: the last good settings (the template
hash, the image and the `spec.worker` the pods were made from, so that an operator restarted in
the middle of a rollback can still make the old pods), and the settings it rolled back from and
why, which it does not try again until `spec.worker` changes.

Nothing here reads a clock, the API server or ZooKeeper: the caller passes the time and figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from squall import stats as latency
from squall.models.cluster import ExecutorStats
from squall.models.v1alpha1 import CanarySpec

__all__ = [
    "CHECK_SECS",
    "FAIL",
    "LATENCY_CHECKS",
    "MIN_LATENCY_SAMPLES",
    "MIN_TUPLES",
    "P99_SLACK_MS",
    "PASS",
    "WAIT",
    "Figures",
    "LatencyCheck",
    "Observed",
    "Rejected",
    "Settings",
    "Template",
    "Upgrade",
    "Verdict",
    "component_figures",
    "judge",
    "latency_checks",
    "since",
    "slower",
]

PASS: Final = "Passed"
FAIL: Final = "Failed"
WAIT: Final = "Analysing"
# the canary's executors of a component must have ended this many tuples before it is compared
MIN_TUPLES: Final = 100
# a p99 regression smaller than this (milliseconds) never counts, whatever the ratio (a
# sub-millisecond execute latency doubles on noise alone)
P99_SLACK_MS: Final = 10.0
# the p99 latencies are compared over intervals at least this long (seconds) ...
CHECK_SECS: Final = 5.0
# ... holding at least this many latencies on each side (the canary's, the old pods'), so that
# an interval's p99 is set by three tuples or more (of 200, the third slowest)
MIN_LATENCY_SAMPLES: Final = 200
# this many regressed intervals in a row fail a canary before its window ends
LATENCY_CHECKS: Final = 3


@dataclass(frozen=True)
class Settings:
    """`spec.upgrade.canary` with its defaults filled in."""

    slots: int = 1
    analysis_secs: float = 60.0
    max_failed_fraction: float = 0.05
    max_p99_ratio: float = 2.0
    max_restarts: int = 0

    @classmethod
    def of(cls, spec: CanarySpec) -> Settings:
        return cls(spec.slots, spec.analysis_secs, spec.max_failed_fraction, spec.max_p99_ratio,
                   spec.max_restarts)


@dataclass(frozen=True)
class Figures:
    """One component's executors in one group (the canary's slots, or the old pods'): tuples
    acked and failed, and the merged latency histogram (squall.stats buckets)."""

    acked: int = 0
    failed: int = 0
    hist: Mapping[int, int] = field(default_factory=dict)

    @property
    def ended(self) -> int:
        return self.acked + self.failed

    @property
    def fraction(self) -> float:
        return self.failed / self.ended if self.ended else 0.0

    @property
    def samples(self) -> int:
        return sum(self.hist.values())

    @property
    def p99(self) -> float:
        return latency.percentile(self.hist, 0.99)

    def less(self, base: Figures) -> Figures | None:
        """What was counted since `base` (the same figures earlier); None when a count went
        down (an executor's worker restarted, or the window's baseline was taken again)."""
        if self.acked < base.acked or self.failed < base.failed or any(
                self.hist.get(b, 0) < n for b, n in base.hist.items()):
            return None
        return Figures(self.acked - base.acked, self.failed - base.failed,
                       {b: n - base.hist.get(b, 0) for b, n in self.hist.items() if n > base.hist.get(b, 0)})


def since(now: Mapping[str, ExecutorStats], base: Mapping[str, ExecutorStats]) -> list[ExecutorStats]:
    """Each executor's counts (key -> its latest heartbeat's stats) since `base` (the same at
    the analysis window's start), so the canary and the old pods are compared over the same
    time, and the canary's worker's start (connections, first tuples) is left out. An executor
    not in `base`, or whose counts went down (its worker restarted), counts from its start."""
    out = []
    for key, s in now.items():
        b = base.get(key)
        if b is None or s.acked < b.acked or s.failed < b.failed:
            out.append(s)
            continue
        hist = {k: n - b.latency_hist.get(k, 0) for k, n in s.latency_hist.items() if n > b.latency_hist.get(k, 0)}
        out.append(s.model_copy(update={"acked": s.acked - b.acked, "failed": s.failed - b.failed,
                                        "latency_hist": hist}))
    return out


def component_figures(stats: Iterable[ExecutorStats]) -> dict[str, Figures]:
    """Executors' heartbeat counters summed per component. System components (`__acker`,
    `__system`, the checkpoint spout `$checkpoint`) are left out: their counts follow the user
    components' (an acker relays the fails of every bolt), they do not run the user's code."""
    sums: dict[str, tuple[int, int, list[Mapping[int, int]]]] = {}
    for s in stats:
        if s.component.startswith(("__", "$")):
            continue
        acked, failed, hists = sums.get(s.component, (0, 0, []))
        sums[s.component] = (acked + s.acked, failed + s.failed, [*hists, s.latency_hist])
    return {c: Figures(a, f, latency.merge(h)) for c, (a, f, h) in sums.items()}


@dataclass(frozen=True)
class Observed:
    """What the canary shows now (the caller reads it off the pods and heartbeats)."""

    # every canary slot has a ready pod of the new settings whose (new) worker heartbeats
    ready: bool
    # container restarts of the canary's pods of the new settings
    restarts: int = 0
    # per component: the canary slots' executors (counted since their new worker started), and
    # the executors on pods of the old settings
    new: Mapping[str, Figures] = field(default_factory=dict)
    old: Mapping[str, Figures] = field(default_factory=dict)
    # when the topology's Degraded condition last turned True, if it is True now; and its message
    degraded_since: float | None = None
    degraded: str = ""
    # the canary slots without a ready pod of the new settings (for the message)
    not_ready: tuple[str, ...] = ()
    # none of the canary's slots is assigned any more (a rebalance took them): it starts over
    gone: bool = False


@dataclass(frozen=True)
class Verdict:
    """PASS, FAIL (with a reason for the condition: FailedFraction, LatencyP99, Restarts,
    NotReady, Degraded) or WAIT; the message says what was compared."""

    outcome: str
    reason: str = ""
    message: str = ""


def _failed(comp: str, new: Figures, old: Figures | None, settings: Settings) -> tuple[str, str] | None:
    if new.ended < MIN_TUPLES:
        return None
    base = old.fraction if old is not None and old.ended >= MIN_TUPLES else None
    if new.fraction - (base or 0.0) > settings.max_failed_fraction:
        against = (f"against {base:.1%} on the old pods ({old.failed} of {old.ended})"
                   if base is not None and old is not None
                   else "with no old executor of it to compare against")
        return "FailedFraction", (
            f"{comp}: {new.fraction:.1%} of its tuples failed on the canary ({new.failed} of {new.ended}) "
            f"{against}; maxFailedFraction {settings.max_failed_fraction:g}")
    return None


def slower(new: Figures, old: Figures, settings: Settings) -> bool:
    """Whether `new`'s p99 latency is a regression against `old`'s: above `maxP99Ratio` times
    it and `P99_SLACK_MS` above it."""
    new_p99, old_p99 = new.p99, old.p99
    return old_p99 > 0 and new_p99 > settings.max_p99_ratio * old_p99 and new_p99 - old_p99 >= P99_SLACK_MS


@dataclass(frozen=True)
class LatencyCheck:
    """One component's p99 checks in the analysis window so far: the interval being gathered
    began at `at` with the figures then (the window's counts: the canary's and the old pods'),
    the closed intervals (`judged`), how many of them regressed, the last ones in a row that
    did (`streak`), and what the last regressed one showed (for the message)."""

    at: float
    new: Figures = field(default_factory=Figures)
    old: Figures = field(default_factory=Figures)
    judged: int = 0
    regressed: int = 0
    streak: int = 0
    last: str = ""


def latency_checks(checks: Mapping[str, LatencyCheck], seen: Observed, settings: Settings,
                   analysing: float | None, now: float) -> dict[str, LatencyCheck]:
    """The p99 checks after a round (`checks` those before it; none before the window began):
    each component with executors on both sides closes its interval once it is `CHECK_SECS`
    long and holds `MIN_LATENCY_SAMPLES` latencies on each side, and counts whether it
    regressed (`slower`); a component's first interval begins with the window (at `analysing`,
    from nothing), and one whose counts went down begins again from the figures now."""
    if analysing is None:
        return {}
    out: dict[str, LatencyCheck] = {}
    for comp in sorted(seen.new):
        new, old = seen.new[comp], seen.old.get(comp)
        if old is None:
            continue
        check = checks.get(comp) or LatencyCheck(analysing)
        dn, do = new.less(check.new), old.less(check.old)
        if dn is None or do is None:
            out[comp] = replace(check, at=now, new=new, old=old)
            continue
        if now - check.at < CHECK_SECS or dn.samples < MIN_LATENCY_SAMPLES or do.samples < MIN_LATENCY_SAMPLES:
            out[comp] = check
            continue
        hit = slower(dn, do, settings)
        out[comp] = LatencyCheck(
            now, new, old, check.judged + 1, check.regressed + hit, check.streak + 1 if hit else 0,
            (f"{dn.p99:.1f} ms on the canary against {do.p99:.1f} ms on the old pods over "
             f"{now - check.at:.0f}s ({dn.samples} and {do.samples} latencies)") if hit else check.last)
    return out


def _latency(comp: str, check: LatencyCheck, settings: Settings, ended: bool) -> tuple[str, str] | None:
    if check.streak < LATENCY_CHECKS and not (ended and check.regressed >= 2 and 2 * check.regressed > check.judged):
        return None
    return "LatencyP99", (
        f"{comp}: p99 latency above {settings.max_p99_ratio:g}x the old pods' (maxP99Ratio) and "
        f"{P99_SLACK_MS:g} ms more in {check.regressed} of {check.judged} intervals"
        + (f", the last {check.streak} in a row" if check.streak >= LATENCY_CHECKS else "")
        + f"; the last: {check.last}")


def judge(settings: Settings, seen: Observed, since: float, analysing: float | None, now: float,
          ready_timeout: float, checks: Mapping[str, LatencyCheck] | None = None) -> Verdict:
    """The canary's verdict at `now`: it began at `since` (its first old pod deleted), and its
    analysis window at `analysing` (every canary slot ready; None: not yet). `ready_timeout`:
    how long the canary's pods may take to get ready (the operator's launchTimeoutSecs);
    `checks`: the p99 checks after this round (`latency_checks`; None: latencies not judged)."""
    if seen.restarts > settings.max_restarts:
        return Verdict(FAIL, "Restarts", f"the canary's worker containers restarted {seen.restarts} times "
                                         f"(maxRestarts {settings.max_restarts})")
    if seen.degraded_since is not None and seen.degraded_since >= since:
        return Verdict(FAIL, "Degraded", f"the topology turned Degraded during the canary: {seen.degraded}")
    if analysing is None:
        if now - since >= ready_timeout:
            return Verdict(FAIL, "NotReady", (
                f"canary slot(s) {', '.join(seen.not_ready) or '?'} not ready {now - since:.0f}s after the "
                f"canary began (launchTimeoutSecs {ready_timeout:g})"))
        return Verdict(WAIT)
    # failures first: a version that fails tuples also slows the trees it fails
    for comp in sorted(seen.new):
        found = _failed(comp, seen.new[comp], seen.old.get(comp), settings)
        if found is not None:
            return Verdict(FAIL, *found)
    ended = now - analysing >= settings.analysis_secs
    for comp, check in sorted((checks or {}).items()):
        found = _latency(comp, check, settings, ended)
        if found is not None:
            return Verdict(FAIL, *found)
    if not ended:
        return Verdict(WAIT)
    if not seen.ready:
        return Verdict(FAIL, "NotReady", (
            f"canary slot(s) {', '.join(seen.not_ready) or '?'} not ready at the end of the "
            f"{settings.analysis_secs:g}s analysis"))
    judged = sorted(c for c, f in seen.new.items() if f.ended >= MIN_TUPLES)
    if not judged:
        return Verdict(PASS, "Passed", (
            f"ready for {settings.analysis_secs:g}s with no restart; too few tuples "
            f"(under {MIN_TUPLES} per component) to compare failures and latencies"))
    parts = []
    for comp in judged:
        new, old = seen.new[comp], seen.old.get(comp)
        intervals = (checks or {}).get(comp)
        parts.append(f"{comp} failed {new.fraction:.1%}" + (f" (old {old.fraction:.1%})" if old and old.ended else "")
                     + (f", p99 {new.p99:.1f} ms" if new.samples else "")
                     + (f" (old {old.p99:.1f} ms)" if new.samples and old and old.samples else "")
                     + (f", slower in {intervals.regressed} of {intervals.judged} intervals"
                        if intervals is not None and intervals.judged else ""))
    return Verdict(PASS, "Passed", f"{settings.analysis_secs:g}s with no regression: " + "; ".join(parts))


# --- what status.upgrade keeps ------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """Pod settings the workers ran: the template hash (pods.template_hash), the image, and the
    topology's `spec.worker` they were made from (JSON, by alias; None: the chart's defaults)."""

    hash: str
    image: str
    worker: Mapping[str, Any] | None = None

    def to_status(self) -> dict[str, Any]:
        return {"templateHash": self.hash, "image": self.image,
                **({"worker": dict(self.worker)} if self.worker is not None else {})}

    @classmethod
    def from_status(cls, data: Any) -> Template | None:
        if not isinstance(data, Mapping) or not data.get("templateHash"):
            return None
        worker = data.get("worker")
        return cls(str(data["templateHash"]), str(data.get("image") or ""),
                   dict(worker) if isinstance(worker, Mapping) else None)

    def same_worker(self, worker: Mapping[str, Any] | None) -> bool:
        """Whether `worker` (spec.worker as JSON) is the one these settings were made from."""
        return json.dumps(self.worker, sort_keys=True) == json.dumps(worker, sort_keys=True)


@dataclass(frozen=True)
class Rejected:
    """Settings a failed canary rolled back from: the template hash and image of the spec's
    `spec.worker` then, the generation, why (the verdict's reason and message), and when."""

    hash: str
    image: str
    generation: int | None
    reason: str
    message: str
    time: float

    def to_status(self, iso: Any) -> dict[str, Any]:
        return {"templateHash": self.hash, "image": self.image, "generation": self.generation,
                "reason": self.reason, "message": self.message, "time": iso(self.time)}

    @classmethod
    def from_status(cls, data: Any, parse_time: Any) -> Rejected | None:
        if not isinstance(data, Mapping) or not data.get("templateHash"):
            return None
        generation = data.get("generation")
        return cls(str(data["templateHash"]), str(data.get("image") or ""),
                   generation if isinstance(generation, int) else None, str(data.get("reason") or ""),
                   str(data.get("message") or ""), parse_time(data.get("time")) or 0.0)


@dataclass(frozen=True)
class Upgrade:
    """`status.upgrade`: the last good settings, and the ones rolled back from (if any)."""

    last_good: Template | None = None
    rejected: Rejected | None = None

    def to_status(self, iso: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.last_good is not None:
            out["lastGood"] = self.last_good.to_status()
        if self.rejected is not None:
            out["rolledBack"] = self.rejected.to_status(iso)
        return out

    @classmethod
    def from_status(cls, data: Any, parse_time: Any) -> Upgrade:
        if not isinstance(data, Mapping):
            return cls()
        return cls(Template.from_status(data.get("lastGood")),
                   Rejected.from_status(data.get("rolledBack"), parse_time))
