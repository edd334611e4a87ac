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

`step` decides; `KubeNimbus.reconcile_roll` reads the inputs and applies the effects. Nothing here
does I/O or reads a clock. The mode is the one the roll began with; a change of it applies to the
next roll.

Replacing goes a slot at a time, as a Kubernetes rolling update with `maxUnavailable: 1`: an
outdated pod that is ready is deleted only while every assigned slot has a ready pod, so the next
one goes when the previous slot's new pod is ready, and a new image that never gets ready stops
the roll after one slot, the other workers still running the old one. Outdated pods that are not
ready are unavailable already: they are replaced at once (as a Deployment scales down unhealthy
old pods first). Each slot's executors get a fresh launch time when its pod is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from squall.models.cluster import TopologyStatus, WorkerSlot
from squall.models.v1alpha1 import UpgradeMode

__all__ = ["BEAT_MARGIN", "DRAIN", "DRAINING", "Effect", "HANDOVER", "REPLACING", "Roll", "RollInput",
           "drained", "step"]

DRAINING: Final = "Draining"
REPLACING: Final = "Replacing"
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
    # when the roll began, or (drain) when the spouts were last deactivated (seconds)
    since: float = 0.0

    def to_status(self, iso: Any) -> dict[str, Any]:
        return {"step": self.step, "mode": self.mode, "since": iso(self.since), "due": iso(self.due),
                "image": self.image, "from": list(self.from_images)}


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


@dataclass(frozen=True)
class Effect:
    """deactivate | activate | delete (pods) | restamp (slots) | event (reason, message)."""

    kind: str
    pods: tuple[str, ...] = ()
    slots: tuple[WorkerSlot, ...] = ()
    reason: str = ""
    message: str = ""


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
        effects.append(Effect("event", reason="RollStarted", message=(
            f"{what} (upgrade mode handover): replacing {len(outdated)} worker pods one slot at a time, "
            "each serving its slot until its new pod has registered; spouts stay active")))
        roll = Roll(REPLACING, inp.now, inp.image, old, HANDOVER, inp.now)
    roll = replace(roll, image=inp.image)
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
        go = [o for o in outdated if o[0] not in inp.ready]
        if not go and inp.unavailable == 0:
            go = [min(outdated, key=lambda o: o[0])]
        if go:
            effects.append(Effect("restamp", slots=tuple(s for _, s, _ in go if s is not None)))
            effects.append(Effect("delete", pods=tuple(n for n, _, _ in go)))
        return replace(roll, step=REPLACING), effects
    if not inp.all_ready:
        return roll, effects
    if inp.active and inp.storm is TopologyStatus.INACTIVE:
        effects.append(Effect("activate"))
    message = f"every worker runs {inp.image}" + ("; spouts activated" if inp.active and (
        roll.mode == DRAIN or inp.storm is TopologyStatus.INACTIVE) else "")
    effects.append(Effect("event", reason="RollCompleted", message=message))
    return None, effects
