"""Whether a running topology is Degraded: its active spouts have tuples pending but nothing was
acked for `stalledSecs`, or at least `failedFraction` of its tuple trees failed (or timed out)
over the last window of `windowSecs` (the Topology's `spec.health`).

`assess` is pure, as `pods.build_status` that calls it: the spouts' figures from the workers'
heartbeats now, the time now (the caller's clock) and what the previous status kept
(`status.health`, so an operator that restarts judges on) give the verdict and what to keep for
the next one. `transition_event` says which Event a change of the condition is worth. Nothing
here reads a clock or calls anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from squall.models.v1alpha1 import HealthSpec

__all__ = [
    "CONDITION",
    "MIN_TREES",
    "Figures",
    "Settings",
    "Verdict",
    "assess",
    "transition_event",
]

CONDITION: Final = "Degraded"
# a window with fewer tuple trees than this is not judged: 1 failed of 1 says little
MIN_TREES: Final = 10


@dataclass(frozen=True)
class Settings:
    """`spec.health` with its defaults filled in."""

    stalled_secs: float = 60.0
    failed_fraction: float = 0.5
    window_secs: float = 60.0

    @classmethod
    def of(cls, spec: HealthSpec | None) -> Settings:
        spec = spec if spec is not None else HealthSpec.model_validate({})
        return cls(spec.stalled_secs, spec.failed_fraction, spec.window_secs)


@dataclass(frozen=True)
class Figures:
    """What the heartbeats say of the topology's spouts now: whether they are active, their
    cumulative acked and failed tuple trees, and the tuples they have pending."""

    active: bool
    acked: int
    failed: int
    pending: int


@dataclass(frozen=True)
class Verdict:
    """The condition's value, reason and message, and the sample to keep in `status.health`
    (empty: nothing to keep, the spouts are not active)."""

    degraded: bool
    reason: str
    message: str
    sample: dict[str, Any]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def assess(previous: Mapping[str, Any] | None, now: Figures, at: float, settings: Settings) -> Verdict:
    """The verdict at time `at` (seconds) on the figures `now`, after the sample `previous`
    (the last `Verdict.sample`, as the status kept it; None or {} at first).

    Stalled: the spouts have tuples pending and their acked count has not moved since
    `stalledSince`, for `stalled_secs` or more. A count that moved (a worker restarted counts
    from 0 again) or nothing pending starts over. Failing: the last complete window of
    `window_secs` saw at least MIN_TREES tuple trees end and `failed_fraction` of them failed;
    the verdict holds until the next window ends. Spouts that are not active are not judged
    and keep nothing, so an activation starts afresh.
    """
    if not now.active:
        return Verdict(False, "SpoutsInactive", "the spouts are not active: nothing to judge", {})
    prev = previous or {}
    # -- stalled: pending tuples and an acked count that does not move
    since = _number(prev.get("stalledSince"))
    if now.pending <= 0:
        since = None
    elif since is None or prev.get("acked") != now.acked:
        since = at
    stalled_for = at - since if since is not None else 0.0
    stalled = since is not None and stalled_for >= settings.stalled_secs
    # -- failing: the failed share of the tuple trees over the last complete window
    start = _number(prev.get("windowStart"))
    base_acked, base_failed = _count(prev.get("windowAcked")), _count(prev.get("windowFailed"))
    trees, failed = _count(prev.get("lastTrees")), _count(prev.get("lastFailed"))
    if (start is None or base_acked is None or base_failed is None
            or now.acked < base_acked or now.failed < base_failed or at < start):
        # the first sample, or the counts started again (a worker restarted): a new window
        start, base_acked, base_failed = at, now.acked, now.failed
    elif at - start >= settings.window_secs:
        trees = (now.acked - base_acked) + (now.failed - base_failed)
        failed = now.failed - base_failed
        start, base_acked, base_failed = at, now.acked, now.failed
    fraction = failed / trees if trees is not None and failed is not None and trees >= MIN_TREES else None
    failing = fraction is not None and fraction >= settings.failed_fraction
    sample: dict[str, Any] = {
        "acked": now.acked,
        "stalledSince": since,
        "windowStart": start,
        "windowAcked": base_acked,
        "windowFailed": base_failed,
        "lastTrees": trees,
        "lastFailed": failed,
    }
    sample = {k: v for k, v in sample.items() if v is not None}
    problems: list[tuple[str, str]] = []
    if stalled:
        problems.append(("AcksStalled",
                         f"{now.pending} tuples pending at the spouts and nothing acked for "
                         f"{stalled_for:.0f}s (spec.health.stalledSecs: {settings.stalled_secs:g})"))
    if failing and fraction is not None:
        problems.append(("TuplesFailing",
                         f"{fraction:.0%} of the tuple trees failed or timed out in the last "
                         f"{settings.window_secs:g}s window ({failed} of {trees}; "
                         f"spec.health.failedFraction: {settings.failed_fraction:g})"))
    if problems:
        return Verdict(True, problems[0][0], "; ".join(m for _, m in problems), sample)
    return Verdict(False, "Healthy",
                   f"acks flowing and under {settings.failed_fraction:.0%} of the tuple trees failed "
                   "in the last window", sample)


def transition_event(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
                     ) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event a change of the `Degraded` condition between two
    statuses' conditions is worth: a Warning when it turns True, a Normal `Recovered` when a
    True one turns False; None otherwise (one Event per change, not one per status write)."""
    def find(conditions: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        return next((c for c in conditions if c.get("type") == CONDITION), {})

    before, after = find(old), find(new)
    if after.get("status") == "True" and before.get("status") != "True":
        return ("Warning", CONDITION, str(after.get("message", "")))
    if before.get("status") == "True" and after.get("status") == "False":
        return ("Normal", "Recovered", str(after.get("message", "")))
    return None
