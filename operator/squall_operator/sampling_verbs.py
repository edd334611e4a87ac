"""The event inspector's verbs (Storm's `storm debug` and the UI's event log):

    squall debug NAME [COMPONENT] --sample PCT [--secs SECONDS]   sample PCT% of its emits
    squall debug NAME [COMPONENT] --off                            stop sampling
    squall events NAME [COMPONENT] [--tail N]                       the tuples sampled last

A local cluster's (`--zookeeper`, as the other verbs): the setting goes into the topology's
sampling config in ZooKeeper (squall.sampling), every worker applies it to its executors and
publishes what it sampled beside its heartbeat; `events` reads those. Without COMPONENT the
setting is every component's (`*`; a component's own setting wins over it).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from typing import Annotated

import typer

from squall_operator.verbs import EXIT_USAGE, VerbError, ZooKeeperTarget
from squall_operator.verbs_cli import NameArg, TimeoutOpt, _verb_errors

__all__ = ["add_sampling_verbs", "format_events", "set_sampling", "sampled"]

DEFAULT_SECS = 300.0


def _components(t: ZooKeeperTarget, name: str) -> list[str]:
    from squall.models import Topology

    base = t._base(name)
    return [c.name for c in Topology.model_validate(base.topology).spec.components]


def set_sampling(t: ZooKeeperTarget, name: str, component: str | None, pct: float | None,
                 secs: float | None, now: float) -> str:
    """Store the setting; the line to print."""
    from squall import sampling
    from squall.models.sampling import SampleSetting, SamplingConfig

    comps = _components(t, name)
    if component is not None and component not in comps:
        raise VerbError(f"debug: topology {name!r} has no component {component!r} (it has {', '.join(comps)})")
    stored = t.state.get_sampling(name)
    current = {} if stored is None else {k: v.model_dump() for k, v in stored.components.items()}
    try:
        config = sampling.merge(current, component, pct, secs, now)
    except sampling.SamplingError as exc:
        raise VerbError(f"debug: {exc}", EXIT_USAGE) from None
    t.state.set_sampling(name, SamplingConfig(components={k: SampleSetting(**v) for k, v in config.items()}))
    what = component or "every component"
    if pct is None:
        return f"{name}: {what}'s emits are no longer sampled"
    until = "until `squall debug --off`" if secs is None else f"for {secs:g}s"
    return f"{name}: sampling {pct:g}% of {what}'s emits {until}; see them with `squall events {name}`"


def sampled(t: ZooKeeperTarget, name: str, component: str | None, tail: int) -> list[dict[str, object]]:
    """The newest `tail` sampled tuples of the topology's workers (of `component`), oldest first."""
    comps = _components(t, name)
    if component is not None and component not in comps:
        raise VerbError(f"events: topology {name!r} has no component {component!r} (it has {', '.join(comps)})")
    rows: list[dict[str, object]] = []
    for slot, samples in t.state.samples(name).items():
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


ZooKeeperOpt = Annotated[str | None, typer.Option(
    "--zookeeper", envvar="SQUALL_ZOOKEEPER", metavar="HOST:PORT[/ROOT]",
    help="a local cluster: the ZooKeeper (and root) that `squall run` printed")]


def add_sampling_verbs(app: typer.Typer) -> None:

    def target(zookeeper: str | None, timeout: float) -> ZooKeeperTarget:
        if zookeeper is None:
            raise VerbError("where is the topology? give --zookeeper HOST:PORT/ROOT (printed by `squall run`)",
                            EXIT_USAGE)
        return ZooKeeperTarget(zookeeper, timeout=timeout)

    @app.command()
    def debug(
        name: NameArg,
        component: Annotated[str | None, typer.Argument(metavar="[COMPONENT]", help="the component (default: every one)")] = None,
        sample: Annotated[float | None, typer.Option("--sample", "-s", metavar="PCT", help="percentage of the emits to sample (above 0, at most 100)")] = None,
        secs: Annotated[float | None, typer.Option("--secs", metavar="SECONDS", min=0, max=604800, help=f"for how long (default {DEFAULT_SECS:g}; 0: until --off)")] = DEFAULT_SECS,
        off: Annotated[bool, typer.Option("--off", help="stop sampling")] = False,
        zookeeper: ZooKeeperOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Sample the tuples a running topology's components emit (Storm's `storm debug`)."""
        with _verb_errors():
            if off == (sample is not None):
                raise VerbError("debug: give --sample PCT or --off", EXIT_USAGE)
            t = target(zookeeper, timeout)
            try:
                typer.echo(set_sampling(t, name, component, None if off else sample,
                                        None if not secs else secs, time.time()))
            finally:
                t.close()

    @app.command()
    def events(
        name: NameArg,
        component: Annotated[str | None, typer.Argument(metavar="[COMPONENT]", help="the component (default: every one)")] = None,
        tail: Annotated[int, typer.Option("--tail", "-n", min=0, help="the newest N (0: all kept)")] = 20,
        zookeeper: ZooKeeperOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """The tuples `squall debug` sampled: time, component, task, stream, message id, values."""
        with _verb_errors():
            t = target(zookeeper, timeout)
            try:
                typer.echo(format_events(sampled(t, name, component, tail)))
            finally:
                t.close()
