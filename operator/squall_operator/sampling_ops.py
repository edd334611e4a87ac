"""The event inspector's operations on a cluster's state (squall.sampling): set a component's
sampling, read what the workers sampled, format it. Shared by the verbs (`squall debug`,
`squall events`: squall_operator.sampling_verbs) and the UI.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from squall.state import ClusterState
from squall_operator import stored
from squall_operator.verbs import EXIT_USAGE, VerbError

__all__ = ["format_events", "sampled", "set_sampling"]


def _components(state: ClusterState, name: str) -> list[str]:
    base = state.get_storm(name)
    if base is None:
        raise VerbError(f"no topology named {name!r} is running")
    return [c.name for c in stored.topology(base).spec.components]


def set_sampling(state: ClusterState, name: str, component: str | None, pct: float | None,
                 secs: float | None, now: float) -> str:
    """Store the setting; the line to print."""
    from squall import sampling
    from squall.models.sampling import SampleSetting, SamplingConfig

    comps = _components(state, name)
    if component is not None and component not in comps:
        raise VerbError(f"debug: topology {name!r} has no component {component!r} (it has {', '.join(comps)})")
    stored = state.get_sampling(name)
    current = {} if stored is None else {k: v.model_dump() for k, v in stored.components.items()}
    try:
        config = sampling.merge(current, component, pct, secs, now)
    except sampling.SamplingError as exc:
        raise VerbError(f"debug: {exc}", EXIT_USAGE) from None
    state.set_sampling(name, SamplingConfig(components={k: SampleSetting(**v) for k, v in config.items()}))
    what = component or "every component"
    if pct is None:
        return f"{name}: {what}'s emits are no longer sampled"
    until = "until `squall debug --off`" if secs is None else f"for {secs:g}s"
    return f"{name}: sampling {pct:g}% of {what}'s emits {until}; see them with `squall events {name}`"


def sampled(state: ClusterState, name: str, component: str | None, tail: int) -> list[dict[str, object]]:
    """The newest `tail` sampled tuples of the topology's workers (of `component`), oldest first."""
    comps = _components(state, name)
    if component is not None and component not in comps:
        raise VerbError(f"events: topology {name!r} has no component {component!r} (it has {', '.join(comps)})")
    rows: list[dict[str, object]] = []
    for slot, samples in state.samples(name).items():
        for s in samples.tuples:
            if component is None or s.component == component:
                rows.append({"worker": slot, **s.model_dump()})
    rows.sort(key=lambda r: (float(r["time_secs"]), str(r["worker"])))  # type: ignore[arg-type]
    return rows[-tail:] if tail else rows


def format_events(rows: Sequence[dict[str, object]]) -> str:
    if not rows:
        return "no sampled tuples yet (turn sampling on with `squall debug NAME [COMPONENT] --sample PCT`)"
    lines = ["TIME          COMPONENT  TASK  STREAM   MSG-ID  VALUES"]
    for r in rows:
        when = datetime.datetime.fromtimestamp(float(r["time_secs"]), datetime.timezone.utc)  # type: ignore[arg-type]
        values = ", ".join(str(v) for v in r["values"])  # type: ignore[attr-defined]
        lines.append(f"{when:%H:%M:%S.%f}"[:12] + f"  {r['component']!s:<9}  {r['task']!s:>4}  "
                     f"{r['stream']!s:<7}  {r['msg_id'] if r['msg_id'] is not None else '-'!s:>6}  [{values}]")
    return "\n".join(lines)
