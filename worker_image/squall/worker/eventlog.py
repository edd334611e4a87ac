"""The event inspector in a worker (`squall debug`, Storm's event logger): the topology's
sampling config read from ZooKeeper, each executor given a sampler (or none) for its component's
percentage, settings that lapse taken back, and the newest sampled tuples published beside the
heartbeat (squall.sampling decides; functions of the worker's state).

Also the verbs' side, on a cluster's state: `set_sampling` and `sampled` (what `squall debug` and
`squall events` do, and the UI), and `python -m squall.worker.eventlog`, which runs them inside a
worker pod for `kubectl squall debug|events` (the pod has the topology's ZooKeeper).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from squall import sampling
from squall.models.sampling import SampledTuple, SampledTuples, SampleSetting, SamplingConfig
from squall.models.v1alpha1 import Topology
from squall.stateviews import ForViewers
from squall.topology_keys import TopologyKey
from squall.worker.workerstate import WorkerState

log = logging.getLogger("squall.worker")


def read_sampling(w: WorkerState) -> None:
    """The topology's sampling config from ZooKeeper (watched), applied at once."""
    stored = w.state.get_sampling(w.topology_id, watch=w.watch)
    raw = {} if stored is None else {k: v.model_dump() for k, v in stored.components.items()}
    try:
        config = sampling.parse_config(raw)
        w.sampling_problem = None
    except sampling.SamplingError as exc:
        if w.sampling_problem != str(exc):
            w.sampling_problem = str(exc)
            log.warning("worker %s: the topology's sampling config is not used: %s", w.slot.key(), exc)
        return
    if config != w.sampling:
        w.sampling = config
        apply_sampling(w, time.time())


def apply_sampling(w: WorkerState, now: float) -> None:
    """Give each executor the sampler its component's setting asks for at `now` (Unix time), or
    none; a sampler whose percentage is unchanged is kept (its count goes on)."""
    for ex in list(w.executors.values()):
        pct = sampling.pct_for(w.sampling, ex.component, now)
        current = ex.sampler
        if pct <= 0:
            if current is not None:
                ex.sampler = None
                log.info("worker %s: %s's emits are no longer sampled", w.slot.key(), ex.component)
        elif current is None or current.pct != pct:
            ex.sampler = sampling.Sampler(pct, ex.component, w.samples, time.time)
            log.info("worker %s: sampling %g%% of %s's emits (squall debug)", w.slot.key(), pct, ex.component)
    w.sampling_next_check = sampling.next_change(w.sampling, now)


def publish_samples(w: WorkerState) -> None:
    """The newest sampled tuples to ZooKeeper, when there are new ones since the last time."""
    samples = list(w.samples)
    if not samples or samples[-1] is w.samples_published:
        return
    newest = samples[-sampling.PUBLISHED:]
    w.state.put_samples(w.topology_id, w.slot, SampledTuples(worker=w.slot.key(), tuples=[
        SampledTuple(time_secs=t, component=c, task=task, stream=s, msg_id=m, values=v)
        for t, c, task, s, m, v in newest]))
    w.samples_published = samples[-1]


class InspectorError(ValueError):
    """A `squall debug` / `squall events` request that cannot be served, in one line; `usage`:
    the request itself is wrong (exit 2), else what it names is not there (exit 1)."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def _components(state: ForViewers, name: TopologyKey) -> list[str]:
    try:
        base = state.get_storm(name)
    except ValueError as exc:  # a name no ZooKeeper node can have ('', '..', 'a/b')
        raise InspectorError(f"topology {name!r}: {exc}") from None
    if base is None:
        raise InspectorError(f"no topology named {name!r} is running")
    return [c.name for c in Topology.model_validate(base.topology).spec.components]


def set_sampling(state: ForViewers, name: TopologyKey, component: str | None, pct: float | None,
                 secs: float | None, now: float) -> str:
    """Store a component's (None: every component's) sampling at `pct` for `secs` (None: until
    turned off), or turn it off (`pct` None); the line to print."""
    comps = _components(state, name)
    if component is not None and component not in comps:
        raise InspectorError(f"debug: topology {name!r} has no component {component!r} (it has {', '.join(comps)})")
    stored = state.get_sampling(name)
    current = {} if stored is None else {k: v.model_dump() for k, v in stored.components.items()}
    try:
        config = sampling.merge(current, component, pct, secs, now)
    except sampling.SamplingError as exc:
        raise InspectorError(f"debug: {exc}", usage=True) from None
    state.set_sampling(name, SamplingConfig(components={k: SampleSetting(**v) for k, v in config.items()}))
    what = component or "every component"
    if pct is None:
        return f"{name}: {what}'s emits are no longer sampled"
    until = "until `squall debug --off`" if secs is None else f"for {secs:g}s"
    return f"{name}: sampling {pct:g}% of {what}'s emits {until}; see them with `squall events {name}`"


def sampled(state: ForViewers, name: TopologyKey, component: str | None, tail: int) -> list[dict[str, Any]]:
    """The newest `tail` (0: all) sampled tuples the topology's workers published (of
    `component`), oldest first, each with its worker."""
    comps = _components(state, name)
    if component is not None and component not in comps:
        raise InspectorError(f"events: topology {name!r} has no component {component!r} (it has {', '.join(comps)})")
    rows: list[dict[str, Any]] = []
    for slot, samples in state.samples(name).items():
        for s in samples.tuples:
            if component is None or s.component == component:
                rows.append({"worker": slot, **s.model_dump()})
    rows.sort(key=lambda r: (r["time_secs"], r["worker"]))
    return rows[-tail:] if tail else rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m squall.worker.eventlog``: the event inspector's verbs run inside a worker pod
    (which has the topology's ZooKeeper and credentials), as `kubectl squall debug|events` run it;
    prints one JSON object: {"message": ...}, {"events": [...]} or {"error": ..., "usage": bool}."""
    import argparse

    from squall.worker.debugging import in_pod

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--component", default=None)
        p.add_argument("--sample", type=float, default=None, help="percentage to sample")
        p.add_argument("--secs", type=float, default=None, help="for how long (default: until --off)")
        p.add_argument("--off", action="store_true")
        p.add_argument("--tail", type=int, default=None, help="show the newest N sampled tuples")

    def answer(state: ForViewers, args: argparse.Namespace) -> dict[str, Any]:
        try:
            if args.tail is not None:
                return {"events": sampled(state, args.topology, args.component, args.tail)}
            return {"message": set_sampling(state, args.topology, args.component,
                                            None if args.off else args.sample, args.secs, time.time())}
        except InspectorError as exc:
            return {"error": str(exc), "usage": exc.usage}

    return in_pod("python -m squall.worker.eventlog", argv, add_arguments, answer)

if __name__ == "__main__":
    sys.exit(main())
