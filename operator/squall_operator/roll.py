"""Rolling a topology's workers to new pod settings, as a pure step function.

When the worker pods' settings change (another image, env, resources: a new template hash), the
workers are replaced the way Storm's rebalance moves them: deactivate the spouts, wait
`rebalanceWaitSecs` for in-flight tuples to finish (Draining), replace the outdated pods on their
slots (Replacing), and restore the spouts' activation once every assigned slot runs a ready pod of
the new settings. `step` decides; `KubeNimbus.reconcile_roll` reads the inputs and applies the
effects. Nothing here does I/O or reads a clock.

Replacing goes a slot at a time, as a Kubernetes rolling update with `maxUnavailable: 1`: an
outdated pod that is ready is deleted only while every assigned slot has a ready pod, so the next
one goes when the previous slot's new pod is ready, and a new image that never gets ready stops
the roll after one slot, the other workers still running the old one. Outdated pods that are not
ready are unavailable already: they are replaced at once (as a Deployment scales down unhealthy
old pods first). Each slot's executors get a fresh launch time when its pod is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from squall.models.cluster import TopologyStatus, WorkerSlot

__all__ = ["Effect", "Roll", "RollInput", "step"]

DRAINING = "Draining"
REPLACING = "Replacing"


@dataclass(frozen=True)
class Roll:
    """A roll in progress (kept in `status.roll` so that a restarted operator resumes it)."""

    step: str
    # when Draining ends (seconds)
    due: float
    image: str
    from_images: tuple[str, ...] = ()

    def to_status(self, iso: Any) -> dict[str, Any]:
        return {"step": self.step, "due": iso(self.due), "image": self.image, "from": list(self.from_images)}


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


@dataclass(frozen=True)
class Effect:
    """deactivate | activate | delete (pods) | restamp (slots) | event (reason, message)."""

    kind: str
    pods: tuple[str, ...] = ()
    slots: tuple[WorkerSlot, ...] = ()
    reason: str = ""
    message: str = ""


def step(roll: Roll | None, inp: RollInput) -> tuple[Roll | None, list[Effect]]:
    """One reconcile round of the roll: the roll after it, and what to do."""
    if inp.storm is TopologyStatus.KILLED:
        return None, []
    if inp.storm is TopologyStatus.REBALANCING:
        # a rebalance goes first (its own drain and reassignment); the roll goes on after it
        return roll, []
    outdated = list(inp.outdated)
    if roll is None:
        if not outdated:
            return None, []
        old = tuple(sorted({image for _, _, image in outdated}))
        wait = inp.rebalance_wait if inp.storm is TopologyStatus.ACTIVE else 0.0
        what = f"image {', '.join(old)} -> {inp.image}" if old != (inp.image,) else "pod settings changed"
        effects = [Effect("deactivate")] if inp.storm is TopologyStatus.ACTIVE else []
        effects.append(Effect("event", reason="RollStarted", message=(
            f"{what}: spouts deactivated; replacing {len(outdated)} worker pods in {wait:g}s "
            "(rebalanceWaitSecs)")))
        return Roll(DRAINING, inp.now + wait, inp.image, old), effects
    roll = replace(roll, image=inp.image)
    effects = []
    if roll.step == DRAINING and outdated:
        if inp.storm is TopologyStatus.ACTIVE:
            effects.append(Effect("deactivate"))
        if inp.now < roll.due:
            return roll, effects
        roll = replace(roll, step=REPLACING)
        effects.append(Effect("event", reason="RollReplacing", message=(
            f"replacing {len(outdated)} worker pods with {inp.image}, one slot at a time")))
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
    message = f"every worker runs {inp.image}" + ("; spouts activated" if inp.active else "")
    effects.append(Effect("event", reason="RollCompleted", message=message))
    return None, effects
