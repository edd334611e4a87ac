"""The verbs as commands: `squall list|activate|deactivate|rebalance|kill|update|set-log-level|logs|dump-stacks` and the kubectl
plugin `kubectl-squall` (the same verbs, always on Kubernetes), so that
`kubectl squall rebalance wordcount -n 3` works. See `squall_operator.verbs` for what they do.

No `from __future__ import annotations` here: the option types depend on `kubectl` and are
evaluated when `add_verbs` defines the commands.
"""

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from squall import loglevels, sampling
from squall.models.v1alpha1 import Topology
from squall.sampling import MAX_SECS as MAX_SAMPLING_SECS
from squall.worker.debugging import MAX_PROFILE_SECS
from squall_operator.cli_usage import MAX_SECONDS, OneLineUsageGroup, print_error
from squall_operator.verbs import (
    EXIT_USAGE,
    MAX_WAIT_SECS,
    MAX_WORKERS,
    KubernetesTarget,
    Target,
    VerbError,
    ZooKeeperTarget,
    format_events,
    format_list,
    parse_executors,
)

__all__ = ["add_verbs", "kubectl_app", "kubectl_main"]

# how long `squall debug` samples when not told (Storm's has no limit: a forgotten switch would
# keep a production topology sampling)
DEFAULT_SAMPLING_SECS = 300.0


@contextmanager
def _verb_errors() -> Iterator[None]:
    try:
        yield
    except VerbError as exc:
        print_error(str(exc))
        raise typer.Exit(exc.code) from None


NamespaceOpt = Annotated[str | None, typer.Option(
    "--namespace", help="Kubernetes namespace (default: the context's, else 'default')")]
KubeconfigOpt = Annotated[str | None, typer.Option(
    "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=0.1, max=MAX_SECONDS, help="seconds to wait for nimbus (local) or the API server to answer")]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="the topology")]
WaitOpt = Annotated[float | None, typer.Option(
    "--wait", "-w", min=0, max=MAX_WAIT_SECS, metavar="SECONDS",
    help="seconds before it happens (default: the topology's killWaitSecs / rebalanceWaitSecs)")]


def add_verbs(app: typer.Typer, *, kubectl: bool = False) -> None:
    """Add the verbs to `app`; `kubectl=True`: no --zookeeper, always Kubernetes."""
    ZooKeeperOpt = Annotated[str | None, typer.Option(
        "--zookeeper", envvar=None if kubectl else "SQUALL_ZOOKEEPER", metavar="HOST:PORT[/ROOT]",
        hidden=kubectl,
        help="a local cluster: the ZooKeeper (and root) that `squall run` printed")]
    KubernetesOpt = Annotated[bool, typer.Option(
        "--kubernetes", "-k", hidden=kubectl,
        help="the Topology resources of a Kubernetes cluster (kubeconfig as kubectl)")]

    def target(zookeeper: str | None, kubernetes: bool, namespace: str | None,
               kubeconfig: str | None, context: str | None, timeout: float) -> Target:
        if kubectl or kubernetes:
            if zookeeper is not None:
                raise VerbError("give either --zookeeper or --kubernetes, not both", EXIT_USAGE)
            return KubernetesTarget(namespace=namespace, kubeconfig=kubeconfig, context=context,
                                    request_timeout=timeout)
        if zookeeper is None:
            raise VerbError("where is the topology? give --zookeeper HOST:PORT/ROOT (printed by "
                            "`squall run`) or --kubernetes", EXIT_USAGE)
        if namespace or kubeconfig or context:
            raise VerbError("--namespace, --kubeconfig and --context go with --kubernetes", EXIT_USAGE)
        return ZooKeeperTarget(zookeeper, timeout=timeout)

    def run(zookeeper: str | None, kubernetes: bool, namespace: str | None,
            kubeconfig: str | None, context: str | None, timeout: float,
            fn: Callable[[Target], str]) -> None:
        with _verb_errors():
            t = target(zookeeper, kubernetes, namespace, kubeconfig, context, timeout)
            try:
                text = fn(t)
                if text:
                    typer.echo(text)
            except KeyboardInterrupt:  # `logs --follow` ends with Ctrl-C, as `kubectl logs -f`
                raise typer.Exit(130) from None
            except BrokenPipeError:  # `squall logs ... | head`
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(0) from None
            finally:
                t.close()

    def listed(t: Target, all_namespaces: bool) -> str:
        if not all_namespaces:
            return format_list(t.list())
        if not isinstance(t, KubernetesTarget):
            raise VerbError("--all-namespaces goes with --kubernetes (a local cluster has no "
                            "namespaces)", EXIT_USAGE)
        return format_list(t.list_all(), namespaces=True)

    @app.command("list")
    def list_(zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
              namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
              context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
              all_namespaces: Annotated[bool, typer.Option(
                  "--all-namespaces", "-A",
                  help="Kubernetes: the topologies of every namespace, with a Namespace column "
                       "(as kubectl; --namespace is then ignored)")] = False) -> None:
        """List the running topologies (Storm's `storm list`)."""
        if all_namespaces and not (kubectl or kubernetes):
            with _verb_errors():
                raise VerbError("--all-namespaces goes with --kubernetes (a local cluster has no "
                                "namespaces)", EXIT_USAGE)
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: listed(t, all_namespaces))

    @app.command()
    def activate(name: NameArg, zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
                 namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
                 context: ContextOpt = None, timeout: TimeoutOpt = 30.0) -> None:
        """Activate the topology's spouts."""
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.activate(name))

    @app.command()
    def deactivate(name: NameArg, zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
                   namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
                   context: ContextOpt = None, timeout: TimeoutOpt = 30.0) -> None:
        """Deactivate the topology's spouts (the workers stay up)."""
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.deactivate(name))

    @app.command()
    def rebalance(
        name: NameArg,
        num_workers: Annotated[int | None, typer.Option(
            "--num-workers", "-n", min=1, max=MAX_WORKERS, metavar="WORKERS",
            help="new number of workers")] = None,
        executor: Annotated[list[str] | None, typer.Option(
            "--executors", "-e", metavar="COMPONENT=PARALLELISM",
            help="new parallelism of a component (at most its numTasks); repeat for more")] = None,
        wait: WaitOpt = None,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Deactivate, wait, reassign with new workers / parallelism, restore the activation."""
        with _verb_errors():
            executors = parse_executors(executor or [])
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.rebalance(name, num_workers, executors, wait))

    @app.command()
    def update(
        file: Annotated[Path, typer.Argument(metavar="FILE", help="the Topology resource (YAML) to apply")],
        name: Annotated[str | None, typer.Option(
            "--name", metavar="NAME", help="the running topology (default: the file's metadata.name)")] = None,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        wait: Annotated[float | None, typer.Option(
            "--wait", "-w", min=0, max=MAX_WAIT_SECS, metavar="SECONDS",
            help="a graph upgrade: the longest drain before the new graph is launched (default: "
                 "rebalanceWaitSecs)")] = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Apply a changed topology file to the running topology: config live or by restarting
        a component's executors (nothing lost); a graph change (locally) as an upgrade: spouts
        deactivated, drained, the new graph launched, the spouts active again; a change that
        cannot be carried is refused with the reason."""
        from squall.errors import TopologyError
        from squall.validation import check_topology, load_topology

        with _verb_errors():
            try:
                topology = load_topology(file)
                check_topology(topology, resolve_classes=False, source=str(file))
            except TopologyError as exc:
                raise VerbError("; ".join(exc.lines()), EXIT_USAGE) from None
            if name is not None and name != topology.name:
                data = topology.model_dump(mode="json", by_alias=True, exclude_none=True)
                data["metadata"]["name"] = name
                topology = Topology.model_validate(data)
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.update(topology.name, topology, wait, typer.echo))

    @app.command()
    def kill(name: NameArg, wait: WaitOpt = None,
             zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
             namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
             context: ContextOpt = None, timeout: TimeoutOpt = 30.0) -> None:
        """Deactivate the spouts, wait, then remove the topology."""
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.kill(name, wait))

    @app.command("set-log-level")
    def set_log_level(
        name: NameArg,
        level: Annotated[list[str] | None, typer.Option(
            "--log-level", "-l", metavar="LOGGER=LEVEL[:SECS]",
            help="set LOGGER (ROOT: the root logger) to LEVEL (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, "
                 "OFF, ALL) in every worker of the topology, for SECS seconds if given (then it goes "
                 "back to its own level); repeat for more")] = None,
        reset: Annotated[list[str] | None, typer.Option(
            "--reset", "-r", metavar="LOGGER", help="give LOGGER back its own level now; repeat for more")] = None,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Change loggers' levels in a running topology's workers (Storm's `set_log_level`)."""
        for text in level or []:  # a bad setting is said before anything is asked of the cluster
            try:
                loglevels.parse_setting(text)
            except loglevels.LogLevelError as exc:
                with _verb_errors():
                    raise VerbError(f"set-log-level: {exc}", EXIT_USAGE) from None
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.set_log_level(name, level or [], reset or []))


    TargetArg = Annotated[str | None, typer.Argument(
        metavar="[COMPONENT|TASK]",
        help="the worker(s) running this component's executors, or this task's (default: every worker)")]

    @app.command()
    def logs(
        name: NameArg,
        component_or_task: TargetArg = None,
        follow: Annotated[bool, typer.Option("--follow", "-f", help="go on printing new lines as they come")] = False,
        tail: Annotated[int, typer.Option(
            "--tail", min=-1, metavar="LINES", help="the last LINES lines of each log (-1: all)")] = -1,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Show the log of the worker(s) running a component or a task (Storm UI's log viewer).

        Lines start with [NODE-PORT] when several workers' logs are shown."""
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.logs(name, component_or_task, follow, tail, typer.echo))

    @app.command("dump-stacks")
    def dump_stacks(
        name: NameArg,
        component_or_task: TargetArg = None,
        profile: Annotated[float | None, typer.Option(
            "--profile", min=0.1, max=MAX_PROFILE_SECS, metavar="SECONDS",
            help="instead of the stacks, sample where the threads spend SECONDS seconds (a short profile: "
                 "CPU per thread, the hottest functions and stacks)")] = None,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Print every thread's stack of the workers running a component or task (Storm UI's jstack)."""
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.dump_stacks(name, component_or_task, profile, typer.echo))

    @app.command()
    def debug(
        name: NameArg,
        component: Annotated[str | None, typer.Argument(
            metavar="[COMPONENT]", help="the component (default: every one)")] = None,
        sample: Annotated[float | None, typer.Option(
            "--sample", "-s", metavar="PCT", help="percentage of its emits to sample (above 0, at most 100)")] = None,
        secs: Annotated[float, typer.Option(
            "--secs", metavar="SECONDS", min=0, max=MAX_SAMPLING_SECS,
            help="for how long (0: until --off)")] = DEFAULT_SAMPLING_SECS,
        off: Annotated[bool, typer.Option("--off", help="stop sampling")] = False,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """Sample the tuples a running topology's components emit (Storm's `storm debug`)."""
        if off == (sample is not None):
            with _verb_errors():
                raise VerbError("debug: give --sample PCT or --off", EXIT_USAGE)
        if sample is not None:  # a bad percentage is said before anything is asked of the cluster
            try:
                sampling.merge({}, component, sample, secs or None, 0.0)
            except sampling.SamplingError as exc:
                with _verb_errors():
                    raise VerbError(f"debug: {str(exc).removeprefix('*: ')}", EXIT_USAGE) from None
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: t.debug(name, component, None if off else sample, secs or None))

    @app.command()
    def events(
        name: NameArg,
        component: Annotated[str | None, typer.Argument(
            metavar="[COMPONENT]", help="the component (default: every one)")] = None,
        tail: Annotated[int, typer.Option("--tail", "-n", min=0, help="the newest N (0: all kept)")] = 20,
        zookeeper: ZooKeeperOpt = None, kubernetes: KubernetesOpt = False,
        namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None, timeout: TimeoutOpt = 30.0,
    ) -> None:
        """The tuples `squall debug` sampled: time, component, task, stream, message id, values."""
        run(zookeeper, kubernetes, namespace, kubeconfig, context, timeout,
            lambda t: format_events(t.events(name, component, tail)))


kubectl_app = typer.Typer(
    name="kubectl squall",
    cls=OneLineUsageGroup,
    help="Storm's verbs on Squall Topology resources: list, activate, deactivate, rebalance, kill, "
         "set-log-level, logs, dump-stacks, debug, events.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
add_verbs(kubectl_app, kubectl=True)


def kubectl_main() -> None:
    """The `kubectl-squall` entry point (a kubectl plugin)."""
    kubectl_app()
