"""The event inspector in a worker (`squall debug`, Storm's event logger): the topology's
sampling config read from ZooKeeper, each executor given a sampler (or none) for its component's
percentage, settings that lapse taken back, and the newest sampled tuples published beside the
heartbeat (squall.sampling decides; functions of the worker's state).
"""

from __future__ import annotations

import logging
import time

from squall import sampling
from squall.models.sampling import SampledTuple, SampledTuples
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
