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

import time
from typing import Annotated

import typer

from squall_operator.sampling_ops import format_events, sampled, set_sampling
from squall_operator.verbs import EXIT_USAGE, VerbError, ZooKeeperTarget
from squall_operator.verbs_cli import NameArg, TimeoutOpt, _verb_errors

__all__ = ["add_sampling_verbs"]

DEFAULT_SECS = 300.0


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
                typer.echo(set_sampling(t.state, name, component, None if off else sample,
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
                typer.echo(format_events(sampled(t.state, name, component, tail)))
            finally:
                t.close()
