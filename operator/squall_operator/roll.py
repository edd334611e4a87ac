"""Rolling a topology's workers to new pod settings, as a pure step function.

When the worker pods' settings change (another image, env, resources: a new template hash), the
outdated workers are replaced in one of two ways, `spec.upgrade.mode`:

- `handover` (the default): the spouts stay active. Each outdated pod is deleted in turn and its
  slot's new pod created in the same round; the deleted worker keeps serving its slot until the
  new one has registered (the worker hand-over, squall.worker.handover), so the slot is served by
  one worker or the other throughout and the stream does not stop.
- `drain`: Storm's rebalance, for topologies that must not run two versions side by side:
  deactivate the spouts, wait until the spouts' heartbeats (taken `BEAT_MARGIN` after the
  deactivation or later) say nothing is pending, or `rebalanceWaitSecs` at the most (Draining),
  replace the outdated pods (Replacing), and restore the spouts' activation once every assigned
  slot runs a ready pod of the new settings.

`step` decides; `KubeNimbus.reconcile_roll` reads the pods, the assignment and the heartbeats,
turns them into the step's input here (`roll_input`, `spouts_pending`, `observe_canary`,
`canary_settings`), applies the effects, and keeps `status.upgrade` as `upgrade_after` says.
Nothing here does I/O or reads a clock. The mode is the one the roll began with; a change of it applies to the
next roll.

Replacing goes a slot at a time, as a Kubernetes rolling update with `maxUnavailable: 1`: an
outdated pod that is ready is deleted only while every assigned slot has a ready pod, so the next
one goes when the previous slot's new pod is ready, and a new image that never gets ready stops
the roll after one slot, the other workers still running the old one. Outdated pods that are not
ready are unavailable already: they are replaced at once (as a Deployment scales down unhealthy
old pods first). Each slot's executors get a fresh launch time when its pod is deleted.

With a canary (`spec.upgrade.canary`, hand-over only) the roll begins in step Canary: only the
first `slots` outdated slots (by slot key) are replaced, the rest wait while
`squall_operator.canary.judge` compares the canary's executors with the old pods'. A pass goes
on to Replacing; a failure asks the caller to record the settings as rejected (Effect `reject`)
and goes to RollingBack, where the caller's wanted template is the last good one: the pods of
the new settings are then the outdated ones, replaced the same way, and the roll ends with
Event `RolledBack` instead of `RollCompleted`. A change of the settings during the canary starts
it over on the newest; the caller keeps the last good settings wanted until a rollback is done.

Apart from the roll: a graph upgrade stores a new launch of the topology and then deletes every
worker pod of the old one (KubeNimbus.relaunched). Each pod carries the launch it was made for
(`pods.ANNOTATION_LAUNCH`), and `older_launch` names the pods of a launch before the stored one, which
an operator that stopped between those two steps left: the next one deletes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from squall.models.cluster import (
    Assignment,
    ExecutorStats,
    TopologyStatus,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.models.v1alpha1 import TopologySpec, UpgradeMode
from squall.plan import TopologyPlan

from squall_operator import canary as canaries
from squall_operator import pods

__all__ = [
    "BEAT_MARGIN",
    "CANARY",
    "DRAIN",
    "DRAINING",
    "HANDOVER",
    "REPLACING",
    "ROLLING_BACK",
    "Baseline",
    "Effect",
    "Roll",
    "RollInput",
    "canary_settings",
    "drained",
    "observe_canary",
    "older_launch",
    "roll_input",
    "spouts_pending",
    "step",
    "upgrade_after",
]

DRAINING: Final = "Draining"
REPLACING: Final = "Replacing"
CANARY: Final = "Canary"
ROLLING_BACK: Final = "RollingBack"
HANDOVER: Final = UpgradeMode.HANDOVER.value
DRAIN: Final = UpgradeMode.DRAIN.value
# a spout's heartbeat says its pending count after the deactivation only when taken this long
# after it (seconds): the worker has seen the deactivation and its spouts emit no more
BEAT_MARGIN: Final = 1.0


@dataclass(frozen=True)
class Roll:
    """A roll in progress (kept in `status.roll` so that a restarted operator resumes it)."""

    step: str
    # when Draining ends at the latest (seconds): rebalanceWaitSecs after the deactivation
    due: float
    image: str
    from_images: tuple[str, ...] = ()
    mode: str = HANDOVER
    # when the roll (or its canary) began, or (drain) when the spouts were last deactivated (seconds)
    since: float = 0.0
    # the template hash the roll goes to (a change of it during a canary starts the canary over)
    template: str = ""
    # Canary: the slots (keys) that run the new settings first, and since when every one of them
    # has (the analysis window's start; None: not yet)
    canary_slots: tuple[str, ...] = ()
    analysing: float | None = None
    # Canary: the p99 checks of the analysis window so far (canaries.latency_checks); not in
    # status.roll: an operator restarted during the window starts them over
    checks: Mapping[str, canaries.LatencyCheck] = field(default_factory=dict, compare=False)

    def to_status(self, iso: Any) -> dict[str, Any]:
        out = {"step": self.step, "mode": self.mode, "since": iso(self.since), "due": iso(self.due),
               "image": self.image, "from": list(self.from_images)}
        if self.template:
            out["template"] = self.template
        if self.canary_slots:
            out["canarySlots"] = list(self.canary_slots)
        if self.analysing is not None:
            # to the millisecond: the window's end is judged on it after an operator restart
            out["analysingSince"] = round(self.analysing, 3)
        return out


@dataclass(frozen=True)
class RollInput:
    now: float
    storm: TopologyStatus
    # live worker pods whose template hash is not the wanted one: name -> (slot, image)
    outdated: Sequence[tuple[str, WorkerSlot | None, str]]
    # every assigned slot runs a ready pod of the wanted template
    all_ready: bool
    image: str
    rebalance_wait: float
    active: bool
    # names of the live worker pods that are ready (of any template)
    ready: frozenset[str] = frozenset()
    # assigned slots with no ready live pod (of any template): the roll's unavailability
    unavailable: int = 0
    # spec.upgrade.mode now (a roll keeps the mode it began with)
    mode: str = HANDOVER
    # every assigned spout executor (system spouts too) -> (the time of the heartbeat of its slot
    # that reports it, its pending count there); None: no heartbeat of its slot reports it
    spouts: Mapping[str, tuple[float, int] | None] = field(default_factory=dict)
    # the template hash of the wanted settings (the spec's, or the last good during a rollback)
    template: str = ""
    # spec.upgrade.canary when this roll may have one (the caller knows good settings to roll back
    # to, other than the wanted ones); None: no canary
    canary: canaries.Settings | None = None
    # what the canary shows now (step Canary); None: nothing to judge yet
    observed: canaries.Observed | None = None
    # how long the canary's pods may take to get ready (the operator's launchTimeoutSecs)
    ready_timeout: float = 120.0


@dataclass(frozen=True)
class Effect:
    """deactivate | activate | delete (pods) | restamp (slots) | event (reason, message; a
    Warning when `warning`) | reject (the wanted settings failed their canary: reason, message)."""

    kind: str
    pods: tuple[str, ...] = ()
    slots: tuple[WorkerSlot, ...] = ()
    reason: str = ""
    message: str = ""
    warning: bool = False


def drained(since: float, spouts: Mapping[str, tuple[float, int] | None]) -> bool:
    """Whether nothing is pending at any spout after a deactivation at `since`: every assigned
    spout executor reports 0 pending in a heartbeat taken `BEAT_MARGIN` after it or later. A
    deactivated spout emits nothing new, so its pending count only falls: one 0 stays 0."""
    return bool(spouts) and all(
        beat is not None and beat[0] >= since + BEAT_MARGIN and beat[1] == 0 for beat in spouts.values())


def step(roll: Roll | None, inp: RollInput) -> tuple[Roll | None, list[Effect]]:
    """One reconcile round of the roll: the roll after it, and what to do."""
    if inp.storm is TopologyStatus.KILLED:
        return None, []
    if inp.storm is TopologyStatus.REBALANCING:
        # a rebalance goes first (its own drain and reassignment); the roll goes on after it
        return roll, []
    outdated = list(inp.outdated)
    effects: list[Effect] = []
    if roll is None:
        if not outdated:
            return None, []
        old = tuple(sorted({image for _, _, image in outdated}))
        what = f"image {', '.join(old)} -> {inp.image}" if old != (inp.image,) else "pod settings changed"
        if inp.mode == DRAIN:
            wait = inp.rebalance_wait if inp.storm is TopologyStatus.ACTIVE else 0.0
            effects = [Effect("deactivate")] if inp.storm is TopologyStatus.ACTIVE else []
            effects.append(Effect("event", reason="RollStarted", message=(
                f"{what} (upgrade mode drain): spouts deactivated; replacing {len(outdated)} worker pods "
                f"once nothing is pending, in {wait:g}s (rebalanceWaitSecs) at the most")))
            return Roll(DRAINING, inp.now + wait, inp.image, old, DRAIN, inp.now), effects
        first = _canary_slots(outdated, inp.canary)
        if inp.canary is not None and first:
            effects.append(Effect("event", reason="RollStarted", message=(
                f"{what} (upgrade mode handover, canary): slot(s) {', '.join(first)} first, analysed for "
                f"{inp.canary.analysis_secs:g}s against the old pods; the other "
                f"{len(outdated) - len(first)} follow if it passes, every slot rolls back if not")))
            roll = Roll(CANARY, inp.now, inp.image, old, HANDOVER, inp.now, inp.template, first)
        else:
            effects.append(Effect("event", reason="RollStarted", message=(
                f"{what} (upgrade mode handover): replacing {len(outdated)} worker pods one slot at a time, "
                "each serving its slot until its new pod has registered; spouts stay active")))
            roll = Roll(REPLACING, inp.now, inp.image, old, HANDOVER, inp.now, inp.template)
    elif roll.step == CANARY and inp.template != roll.template:
        # the settings changed again during the canary: it starts over on the newest
        first = _canary_slots(outdated, inp.canary)
        roll = replace(roll, step=CANARY if first else REPLACING, since=inp.now, template=inp.template,
                       canary_slots=first, analysing=None, checks={})
        effects.append(_event("CanaryRestarted", (
            f"the pod settings changed during the canary: slot(s) {', '.join(first)} start over on {inp.image}"
            if first else f"the pod settings changed during the canary: replacing every worker pod with {inp.image}")))
    roll = replace(roll, image=inp.image)
    if roll.step == CANARY:
        roll, verdict = _canary_step(roll, inp, outdated, effects)
        if verdict != canaries.PASS:
            return roll, effects
    roll = replace(roll, template=inp.template)
    if roll.step == DRAINING and outdated:
        if inp.storm is TopologyStatus.ACTIVE:
            # activated during the drain (by hand): deactivated again, and the drain counts from now
            effects.append(Effect("deactivate"))
            roll = replace(roll, since=inp.now)
            if inp.now < roll.due:
                return roll, effects
        done = drained(roll.since, inp.spouts)
        if inp.now < roll.due and not done:
            return roll, effects
        roll = replace(roll, step=REPLACING)
        why = "nothing pending" if done else "rebalanceWaitSecs passed"
        effects.append(Effect("event", reason="RollReplacing", message=(
            f"{why} {max(0.0, inp.now - roll.since):.1f}s after the deactivation: replacing "
            f"{len(outdated)} worker pods with {inp.image}, one slot at a time")))
    if outdated:
        # a second change during the roll makes more pods outdated: they go too
        effects.extend(_replace(outdated, inp))
        return replace(roll, step=ROLLING_BACK if roll.step == ROLLING_BACK else REPLACING), effects
    if not inp.all_ready:
        return roll, effects
    if inp.active and inp.storm is TopologyStatus.INACTIVE:
        effects.append(Effect("activate"))
    if roll.step == ROLLING_BACK:
        effects.append(Effect("event", reason="RolledBack", warning=True, message=(
            f"every worker runs the last good settings ({inp.image}) again, "
            f"{max(0.0, inp.now - roll.since):.1f}s after the canary began; the rejected settings are "
            "not tried again until spec.worker changes")))
        return None, effects
    message = f"every worker runs {inp.image}" + ("; spouts activated" if inp.active and (
        roll.mode == DRAIN or inp.storm is TopologyStatus.INACTIVE) else "")
    effects.append(Effect("event", reason="RollCompleted", message=message))
    return None, effects


def _event(reason: str, message: str, warning: bool = False) -> Effect:
    return Effect("event", reason=reason, message=message, warning=warning)


def _canary_slots(outdated: Sequence[tuple[str, WorkerSlot | None, str]],
                  settings: canaries.Settings | None) -> tuple[str, ...]:
    """The slots a canary replaces first: the first `slots` outdated slots by key (none without
    a canary, or when no outdated pod says its slot)."""
    if settings is None:
        return ()
    keys = sorted({s.key() for _, s, _ in outdated if s is not None})
    return tuple(keys[:settings.slots])


def _replace(outdated: Sequence[tuple[str, WorkerSlot | None, str]], inp: RollInput) -> list[Effect]:
    """The outdated pods to delete now, a slot at a time: those not ready at once (they are
    unavailable already), else the first ready one while every assigned slot has a ready pod."""
    go = [o for o in outdated if o[0] not in inp.ready]
    if not go and inp.unavailable == 0 and outdated:
        go = [min(outdated, key=lambda o: o[0])]
    if not go:
        return []
    return [Effect("restamp", slots=tuple(s for _, s, _ in go if s is not None)),
            Effect("delete", pods=tuple(n for n, _, _ in go))]


def _canary_step(roll: Roll, inp: RollInput, outdated: Sequence[tuple[str, WorkerSlot | None, str]],
                 effects: list[Effect]) -> tuple[Roll, str]:
    """Step Canary: replace the canary's slots, then judge them (effects appended). Returns the
    roll after it and the verdict's outcome: PASS goes on to Replacing in the same round."""
    if inp.observed is not None and inp.observed.gone:
        first = _canary_slots(outdated, inp.canary)
        roll = replace(roll, since=inp.now, canary_slots=first, analysing=None, checks={})
        effects.append(_event("CanaryRestarted", (
            f"the canary's slots are no longer assigned (a rebalance): slot(s) {', '.join(first)} start over"
            if first else "the canary's slots are no longer assigned (a rebalance) and no other slot is outdated")))
        if not first:
            return replace(roll, step=REPLACING), canaries.PASS
    mine = [o for o in outdated if o[1] is not None and o[1].key() in roll.canary_slots]
    if mine:
        effects.extend(_replace(mine, inp))
        return roll, canaries.WAIT
    if inp.canary is None:
        # spec.upgrade.canary removed during the canary: the roll goes on without it
        effects.append(_event("CanaryPassed", "spec.upgrade.canary removed: replacing the other worker pods"))
        return replace(roll, step=REPLACING, canary_slots=(), analysing=None, checks={}), canaries.PASS
    seen = inp.observed or canaries.Observed(ready=False)
    if roll.analysing is None and seen.ready:
        roll = replace(roll, analysing=inp.now)
    roll = replace(roll, checks=canaries.latency_checks(roll.checks, seen, inp.canary, roll.analysing, inp.now))
    verdict = canaries.judge(inp.canary, seen, roll.since, roll.analysing, inp.now, inp.ready_timeout, roll.checks)
    if verdict.outcome == canaries.PASS:
        effects.append(_event("CanaryPassed", f"{verdict.message}; replacing the other worker pods"))
        return replace(roll, step=REPLACING, canary_slots=(), analysing=None, checks={}), canaries.PASS
    if verdict.outcome == canaries.FAIL:
        effects.append(Effect("reject", reason=verdict.reason, message=verdict.message))
        effects.append(_event("CanaryFailed", (
            f"{verdict.message}: rolling every worker back to the last good settings "
            f"{max(0.0, inp.now - roll.since):.1f}s after the canary began"), warning=True))
        return replace(roll, step=ROLLING_BACK, canary_slots=(), analysing=None, checks={}), canaries.FAIL
    return roll, canaries.WAIT


# --- the round's inputs, the canary's observation and status.upgrade, from plain values ----------


@dataclass(frozen=True)
class Baseline:
    """The executors' counts when a canary's analysis window began (canaries.since counts from
    them), for the canary `identity` (its template hash and start): another canary takes its own."""

    identity: tuple[str, float]
    counts: Mapping[str, ExecutorStats]


def observe_canary(roll: Roll, live: Sequence[pods.PodView], want: str, assignment: Assignment,
                   beats: Mapping[WorkerSlot, WorkerHeartbeat], kept: Baseline | None,
                   degraded: Mapping[str, Any], parse_time: Callable[[str | None], float | None],
                   ) -> tuple[canaries.Observed, Baseline | None]:
    """What the canary shows now: its slots' pods of the new settings (`want`; ready, restarts),
    the executors on them counted from heartbeats of workers started since the canary began, the
    executors on pods of the old settings, and the topology's Degraded condition (`degraded`, as
    the status has it; its time read with `parse_time`). The executors' counts are taken since the
    analysis window's start: the first round that finds the canary ready returns them as the
    baseline to keep (`kept` the one kept so far; None returned: none to keep yet). An operator
    restarted during the window keeps none and counts from its first round."""
    by_slot = {v.slot: v for v in live if v.slot is not None}
    slot_executors: dict[WorkerSlot, list[str]] = {}
    for executor, slot in assignment.slots().items():
        slot_executors.setdefault(slot, []).append(f"{executor[0]}-{executor[1]}")
    new: dict[str, ExecutorStats] = {}
    old: dict[str, ExecutorStats] = {}
    not_ready: list[str] = []
    restarts = 0
    canary_slots = sorted((s for s in slot_executors if s.key() in roll.canary_slots), key=WorkerSlot.key)
    for slot, keys in slot_executors.items():
        pod, beat = by_slot.get(slot), beats.get(slot)
        stats = {f"{slot.key()}/{k}": beat.executors[k] for k in keys
                 if beat is not None and k in beat.executors}
        if slot in canary_slots:
            fresh = pod is not None and pod.template == want
            # the slot's new worker (the deleted one served it until the new one registered)
            started = beat is not None and beat.time_secs - beat.uptime_secs >= roll.since
            if fresh and pod is not None:
                restarts += pod.restarts
            if fresh and started:
                new.update(stats)
            if not (fresh and started and pod is not None and pod.ready):
                not_ready.append(slot.key())
        elif pod is not None and pod.template != want:
            old.update(stats)
    ready = bool(canary_slots) and not not_ready
    identity = (roll.template, roll.since)
    if kept is None or kept.identity != identity:
        # the window begins now (or began before this operator started)
        kept = None if not ready and roll.analysing is None else Baseline(identity, {**new, **old})
    base = kept.counts if kept is not None else {}
    degraded_since = parse_time(degraded.get("lastTransitionTime")) if degraded.get("status") == "True" else None
    return canaries.Observed(
        ready=ready, restarts=restarts,
        new=canaries.component_figures(canaries.since(new, base)),
        old=canaries.component_figures(canaries.since(old, base)),
        degraded_since=degraded_since, degraded=str(degraded.get("message") or ""),
        not_ready=tuple(not_ready) if canary_slots else roll.canary_slots, gone=not canary_slots), kept


def spouts_pending(plan: TopologyPlan, assignment: Assignment, beats: Mapping[WorkerSlot, WorkerHeartbeat],
                   ) -> dict[str, tuple[float, int] | None]:
    """What the spouts have pending, for a drain that ends when nothing is (RollInput.spouts)."""
    spouts: dict[str, tuple[float, int] | None] = {}
    for executor, slot in assignment.slots().items():
        if plan.executor_component(executor) in plan.spouts:
            beat = beats.get(slot)
            stats = beat.executors.get(f"{executor[0]}-{executor[1]}") if beat is not None else None
            spouts[f"{executor[0]}-{executor[1]}"] = (
                (beat.time_secs, stats.pending) if beat is not None and stats is not None else None)
    return spouts


def canary_settings(spec: TopologySpec, good: canaries.Template | None,
                    worker: Mapping[str, Any] | None) -> canaries.Settings | None:
    """spec.upgrade.canary for a roll to `worker` (spec.worker as JSON), or None: a canary needs
    settings to roll back to that differ from the wanted ones, so not when only the operator's own
    worker settings changed (a helm upgrade of the chart's image)."""
    if spec.upgrade is None or spec.upgrade.canary is None or good is None or good.same_worker(worker):
        return None
    return canaries.Settings.of(spec.upgrade.canary)


def upgrade_after(upgrade: canaries.Upgrade, roll: Roll | None, effects: Sequence[Effect], inp: RollInput,
                  worker: Mapping[str, Any] | None, generation: int | None, asked: str) -> canaries.Upgrade:
    """`status.upgrade` after a round of the roll (`roll` the roll after it, `effects` its
    effects, `inp` its input): a failed canary's settings recorded as rejected (the next rounds
    want the last good ones until spec.worker changes); the wanted settings the last good once
    every assigned slot runs a ready pod of them; the rejected ones forgotten once the spec asks
    for other settings (`asked`: the template hash of spec.worker) and no rollback is under way."""
    good = upgrade.last_good
    for effect in effects:
        if effect.kind == "reject":
            upgrade = canaries.Upgrade(good, canaries.Rejected(
                inp.template, inp.image, generation, effect.reason, effect.message, inp.now))
    rejected = upgrade.rejected
    if roll is None and not inp.outdated and inp.all_ready:
        # during a rollback's aftermath the wanted settings are the last good already
        now_good = canaries.Template(inp.template, inp.image, worker)
        if now_good != good:
            upgrade = canaries.Upgrade(now_good, rejected)
    if rejected is not None and (roll is None or roll.step != ROLLING_BACK) and asked != rejected.hash:
        # spec.worker changed since the rollback: the next roll tries the new settings
        upgrade = canaries.Upgrade(upgrade.last_good, None)
    return upgrade


def roll_input(*, now: float, storm: TopologyStatus, running: TopologySpec, spec: TopologySpec,
               live: Sequence[pods.PodView], want: str, image: str, assignment: Assignment,
               spouts: Mapping[str, tuple[float, int] | None], canary: canaries.Settings | None,
               observed: canaries.Observed | None, ready_timeout: float) -> RollInput:
    """The input of `step` from what a round read: the live (not deleting) worker pods, the
    assignment, the running topology's spec and the one asked (`spec`, the running one while the
    asked one is invalid), and the wanted template hash `want` and its `image`."""
    ready = {v.slot for v in live if v.ready and v.template == want}
    assigned = set(assignment.slots().values())
    return RollInput(
        now=now, storm=storm,
        outdated=[(v.name, v.slot, v.image) for v in live if v.template != want],
        all_ready=assigned <= ready,
        ready=frozenset(v.name for v in live if v.ready),
        unavailable=len(assigned - {v.slot for v in live if v.ready}),
        image=image,
        rebalance_wait=running.rebalance_wait,
        active=spec.active,
        mode=spec.upgrade.mode.value if spec.upgrade is not None else HANDOVER,
        spouts=spouts,
        template=want,
        canary=canary,
        observed=observed,
        ready_timeout=ready_timeout,
    )


# --- a graph upgrade's new launch ---------------------------------------------------------------


def older_launch(worker_pods: Iterable[Mapping[str, Any]], launch: float) -> list[str]:
    """The worker pods (API objects) not being deleted that were made for a launch of the
    topology before `launch`, the stored one, by name. A graph upgrade stores its new launch and
    then deletes every worker pod (KubeNimbus.relaunched); an operator that stopped between the
    two finds them here and deletes them itself. A pod with no readable annotation (made by an
    operator older than it) is not judged."""
    out = []
    for pod in worker_pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") is not None:
            continue
        try:
            made_for = float((meta.get("annotations") or {})[pods.ANNOTATION_LAUNCH])
        except (KeyError, TypeError, ValueError):
            continue
        if made_for < launch:
            out.append(str(meta.get("name")))
    return sorted(out)
