"""The `squall` command.

    squall build MODULE:FUNCTION [--output FILE]   a Python-built topology -> checked YAML
    squall validate FILE [--no-classes]            check a topology file

Adding a command: define a function decorated with `@app.command()` and wrap its body in
`with user_errors():`, which turns a `TopologyError` (or a `CliError`) into plain messages on
stderr and exit code 2, without a traceback. Put output for the user on stdout with `typer.echo`,
diagnostics on stderr with `stderr_console()`. A malformed command line (unknown option, missing
argument, a value out of range) is one line on stderr and exit 2 (`cli_usage.OneLineUsageGroup`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from squall import limits
from squall.builder import TopologyBuilder, topology_to_yaml
from squall.classcheck import DEFAULT_IMPORT_TIMEOUT, check_topology_isolated
from squall.classload import ModuleLoader, describe, on_sys_path
from squall.errors import NO_VALUE, Problem, TopologyError
from squall.models import Topology
from squall.validation import ResolvedTopology, check_topology, load_topology, parse_topology
from squall_operator.cli_usage import (
    EXIT_INVALID,
    MAX_SECONDS,
    CliError,
    OneLineUsageGroup,
    print_error,
    report_topology_error,
    stderr_console,
    user_errors,
)

if TYPE_CHECKING:
    from squall.state import ZkCredentials

__all__ = [
    "EXIT_INVALID",
    "CliError",
    "app",
    "build_topology_isolated",
    "report_topology_error",
    "stderr_console",
    "topology_from_target",
    "user_errors",
]

app = typer.Typer(
    name="squall",
    cls=OneLineUsageGroup,
    help="Squall: Apache Storm's model in Python.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _main() -> None:
    """Squall: Apache Storm's model in Python."""


def topology_from_target(target: str, stage: Callable[[str], None] | None = None) -> Topology:
    """The `Topology` named by "module:attribute" (the current directory is importable).

    The attribute may be a `Topology`, a `TopologyBuilder`, a mapping shaped like the resource,
    or a function taking no arguments that returns one of those. `stage` (if given) hears
    "import" before the module is imported and "call" before the function is called.
    Runs the user's code in this process: `build_topology_isolated` runs it in a child.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected MODULE:FUNCTION, got {target!r}")
    with on_sys_path([Path.cwd()]):
        if stage is not None:
            stage("import")
        try:
            obj: Any = ModuleLoader().load(target)
        except ImportError as exc:
            raise CliError(str(exc)) from exc
        if callable(obj) and not isinstance(obj, (Topology, TopologyBuilder)):
            if stage is not None:
                stage("call")
            try:
                obj = obj()
            except TopologyError:
                raise
            except (Exception, SystemExit, KeyboardInterrupt) as exc:
                raise CliError(f"{target}() failed: {describe(exc)}") from exc
    if isinstance(obj, TopologyBuilder):
        obj = obj.build()
    if isinstance(obj, Mapping):
        obj = parse_topology(obj, source=target)
    if not isinstance(obj, Topology):
        raise CliError(
            f"{target} gave a {type(obj).__name__}; expected a Topology or a TopologyBuilder"
        )
    return obj


# Seconds `squall build` gives the user's module and function to return the topology.
DEFAULT_BUILD_TIMEOUT = 60.0


def build_topology_isolated(target: str, timeout: float = DEFAULT_BUILD_TIMEOUT) -> Topology:
    """`topology_from_target` in a forked child process, within `timeout` seconds.

    The user's module and function may hang, end the process or start threads: on timeout, or
    if the child ends without an answer, a `CliError` names the module (while importing it) or
    the function (while calling it), and the child's process group is killed, so nothing they
    started outlives the command. What they print goes to stderr (stdout carries the YAML). The
    child exits when the parent dies (it watches a pipe)."""
    reply_r, reply_w = os.pipe()
    alive_r, alive_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.setsid()
            os.close(reply_r)
            os.close(alive_w)
            os.dup2(2, 1)
            _build_in_child(target, os.fdopen(reply_w, "w", encoding="utf-8"), os.fdopen(alive_r, "rb"))
        finally:
            os._exit(70)
    os.close(reply_w)
    os.close(alive_r)
    module = target.partition(":")[0]
    what = {"import": f"importing module '{module}'", "call": f"{target}()"}
    stage = "import"
    try:
        deadline = time.monotonic() + timeout
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CliError(f"{what[stage]} did not finish within {timeout:g} s "
                               "(`--build-timeout` changes it)")
            ready, _, _ = select.select([reply_r], [], [], left)
            if not ready:
                continue
            chunk = os.read(reply_r, 1 << 20)
            if not chunk:
                code = _reap(pid, 5.0)
                raise CliError(f"{what[stage]} ended the process (exit code {code})")
            buf += chunk
            if len(buf) > _MAX_BUILD_REPLY:
                raise CliError(f"{what[stage]} wrote too much to the build's channel")
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    raise CliError(f"{what[stage]} wrote into the build's channel") from None
                if "stage" in message:
                    stage = message["stage"]
                elif "topology" in message:
                    return Topology.model_validate(message["topology"])
                elif "problems" in message:
                    raise TopologyError([Problem(p, v if has else NO_VALUE, m)
                                         for p, has, v, m in message["problems"]], target)
                else:
                    raise CliError(str(message.get("error")))
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)  # its own group: whatever the user's code started too
        except ProcessLookupError:
            pass
        _reap(pid, 10.0)
        for fd in (reply_r, alive_w):
            os.close(fd)


# a topology is at most 1 MiB as YAML; its JSON with room to spare
_MAX_BUILD_REPLY = 16 << 20


def _reap(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _build_in_child(target: str, reply: IO[str], alive: IO[bytes]) -> None:
    def orphaned() -> None:
        alive.read()  # EOF: the parent closed the pipe or died
        os._exit(3)

    threading.Thread(target=orphaned, daemon=True).start()

    def send(message: dict[str, Any]) -> None:
        reply.write(json.dumps(message, default=str) + "\n")
        reply.flush()

    try:
        topo = topology_from_target(target, lambda s: send({"stage": s}))
        send({"topology": topo.model_dump(mode="json", by_alias=True)})
    except TopologyError as exc:
        send({"problems": [[p.path, p.value is not NO_VALUE, None if p.value is NO_VALUE else p.value,
                            p.message] for p in exc.problems]})
    except CliError as exc:
        send({"error": str(exc)})
    except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
        send({"error": f"{target} failed: {describe(exc)}"})
    os._exit(0)  # no interpreter shutdown: threads the user's code started could hang it


ImportTimeout = Annotated[
    float,
    typer.Option(
        "--import-timeout",
        help="Seconds allowed for importing the component classes (in a child process).",
        min=0.1,
        max=MAX_SECONDS,
    ),
]


def _check_file(file: Path, *, classes: bool, import_timeout: float) -> ResolvedTopology:
    """Load and check a topology file; its classes are imported in a child process, from the
    file's directory, so that a module that hangs or exits at import is reported, not obeyed."""
    topo = load_topology(file)
    if not classes:
        return check_topology(topo, resolve_classes=False, source=str(file))
    return check_topology_isolated(topo, search_paths=(file.parent,), source=str(file),
                                   timeout=import_timeout)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@app.command()
def build(
    target: Annotated[
        str,
        typer.Argument(
            metavar="MODULE:FUNCTION",
            help="A function returning a Topology or a TopologyBuilder "
            "(the current directory is importable).",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the YAML to this file instead of stdout."),
    ] = None,
    import_timeout: ImportTimeout = DEFAULT_IMPORT_TIMEOUT,
    build_timeout: Annotated[
        float,
        typer.Option("--build-timeout", min=0.1, max=MAX_SECONDS,
                     help="Seconds allowed for importing MODULE and running FUNCTION (in a child process)."),
    ] = DEFAULT_BUILD_TIMEOUT,
) -> None:
    """Build a topology from Python, check it, and print it as YAML."""
    with user_errors():
        topo = build_topology_isolated(target, build_timeout)
        with on_sys_path([Path.cwd()]):
            check_topology_isolated(topo, search_paths=(Path.cwd(),), source=target,
                                    timeout=import_timeout)
        text = topology_to_yaml(topo)
        if output is None:
            typer.echo(text, nl=False)
            return
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write {output}: {exc.strerror or exc}") from exc
        stderr_console().print(f"wrote {output}", markup=False)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A Topology resource (YAML).")],
    classes: Annotated[
        bool,
        typer.Option(
            "--classes/--no-classes",
            help="Import each component class (from the file's directory) and check it.",
        ),
    ] = True,
    import_timeout: ImportTimeout = DEFAULT_IMPORT_TIMEOUT,
) -> None:
    """Check a topology file: schema, graph, groupings and (by default) classes."""
    with user_errors():
        resolved = _check_file(file, classes=classes, import_timeout=import_timeout)
    spec = resolved.topology.spec
    typer.echo(
        f"ok: {resolved.name} ({_count(len(spec.spouts), 'spout')}, "
        f"{_count(len(spec.bolts), 'bolt')})"
    )


def _zk_credentials(path: Path | None) -> ZkCredentials | None:
    if path is None:
        return None
    from squall.state import ZkCredentials  # kazoo: only for the commands that use ZooKeeper

    try:
        return ZkCredentials.from_file(path)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _check_state_provider(topo: Topology, file: Path) -> None:
    """Stateful components: the state provider must answer before anything starts (the local
    workers use this machine's network, as this check does)."""
    from squall.statebackend import PROVIDER_CONFIG_KEY, StateBackendError, open_provider

    try:
        open_provider({"topology.name": topo.name, **topo.spec.config})
    except StateBackendError as exc:
        raise TopologyError([Problem(f"spec.config.{PROVIDER_CONFIG_KEY}", NO_VALUE, str(exc))],
                            source=str(file)) from None


def _check_kafka(topo: Topology, file: Path) -> None:
    """Kafka spouts and bolts: their brokers must answer and accept the settings before anything
    starts (`squall kafka check`'s lines); a running spout would only report and wait."""
    import logging

    from squall.kafka.config import BOLT_KEY, SPOUT_KEY

    spec = topo.spec
    if not any(SPOUT_KEY in {**spec.config, **c.config} or BOLT_KEY in {**spec.config, **c.config}
               for c in spec.components):
        return  # no client library loaded for a topology without Kafka
    from squall.kafka.preflight import kafka_problems

    client_log = logging.getLogger("squall.kafka.client")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # each refused connection would bury the one line
    try:
        problems = kafka_problems(topo)
    finally:
        client_log.setLevel(level)
    if problems:
        raise TopologyError(problems, source=str(file))


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# worker slots of `squall run`'s local cluster at most: each is a loopback port held open while
# the cluster starts, and a worker process when used
MAX_LOCAL_SLOTS = 256


def _check_run_options(*, log_level: str, zookeeper: str | None, summary_json: Path | None) -> None:
    """`squall run`'s option values that typer cannot check, before anything is read or started:
    a bad one is one line and exit 2."""
    if log_level.upper() not in _LOG_LEVELS:
        raise CliError(f"squall run: --log-level must be one of {', '.join(_LOG_LEVELS)} "
                       f"(got {log_level!r})")
    if zookeeper is not None:
        from squall_operator.verbs import VerbError, parse_zookeeper

        try:
            parse_zookeeper(zookeeper)
        except VerbError:
            raise CliError(f"squall run: --zookeeper must be HOST:PORT[,HOST:PORT...] (got {zookeeper!r})") from None
    if summary_json is not None:
        parent = summary_json.parent
        if summary_json.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK):
            why = "is a directory" if summary_json.is_dir() else f"cannot write in {str(parent)!r}"
            raise CliError(f"squall run: --summary-json {str(summary_json)!r}: {why}")


@app.command()
def run(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="topology.yaml (apiVersion squall.io/v1alpha1, kind Topology)")],
    nodes: Annotated[int, typer.Option(help="simulated supervisor nodes", min=1, max=MAX_LOCAL_SLOTS)] = 2,
    slots: Annotated[int | None, typer.Option(help="worker slots per node (default: enough for one worker per core, and at least 2 and the topology's numWorkers in all)", min=1, max=MAX_LOCAL_SLOTS, show_default=False)] = None,
    zookeeper: Annotated[str | None, typer.Option(help="HOST:PORT of an existing ZooKeeper (default: start an embedded one)")] = None,
    zk_auth_file: Annotated[Path | None, typer.Option(envvar="SQUALL_ZK_AUTH_FILE", help="file holding 'user:password': Squall's ZooKeeper nodes get a digest ACL for that user alone (default: generated for the embedded ZooKeeper; none for an existing one)")] = None,
    duration: Annotated[float | None, typer.Option(help="stop after the topology has run this many seconds, counted from when all its workers are up (default: run until Ctrl-C)", min=0, max=MAX_SECONDS)] = None,
    kill_wait: Annotated[float | None, typer.Option(help="seconds to let in-flight tuples finish on stop (default: killWaitSecs)", min=0, max=limits.MAX_SECONDS)] = None,
    summary_json: Annotated[Path | None, typer.Option(help="write per-component counts and latency percentiles here")] = None,
    progress: Annotated[bool, typer.Option(help="show live progress")] = True,
    log_level: Annotated[str, typer.Option(help="log level of the local cluster")] = "WARNING",
    import_timeout: ImportTimeout = DEFAULT_IMPORT_TIMEOUT,
    curve: Annotated[bool, typer.Option(help="seal the transport between workers with CURVE (a key pair per run; encrypted and authenticated, slower)")] = False,
    metrics_port: Annotated[int | None, typer.Option(help="serve every worker's and nimbus's Prometheus metrics on 127.0.0.1:PORT/metrics (0: a free port, printed)", min=0, max=65535)] = None,
    ui: Annotated[bool, typer.Option("--ui", help="serve the web UI (Storm UI's pages and REST API) on 127.0.0.1")] = False,
    ui_port: Annotated[int, typer.Option(help="port of the web UI (0: any free port)", min=0, max=65535)] = 8080,
    ui_actions: Annotated[bool, typer.Option("--ui-actions", help="let the UI activate, deactivate, rebalance and kill (implies --ui)")] = False,
) -> None:
    """Run a topology on the local cluster (embedded ZooKeeper, simulated nodes, real workers)."""
    import logging

    from squall_operator.run import output_console, run_topology

    with user_errors():
        if slots is not None and nodes * slots > MAX_LOCAL_SLOTS:
            raise CliError(f"squall run: --nodes x --slots must be <= {MAX_LOCAL_SLOTS} (got {nodes} x {slots})")
        _check_run_options(log_level=log_level, zookeeper=zookeeper, summary_json=summary_json)
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        resolved = _check_file(file, classes=True, import_timeout=import_timeout)
        spec = resolved.topology.spec
        if slots is None:
            from squall_operator.local import default_slots

            slots = default_slots(os.cpu_count() or 1, nodes, spec.num_workers)
            if spec.num_workers > (os.cpu_count() or 1):
                logging.getLogger("squall.run").warning(
                    "%s: numWorkers %d on %d cores: workers share cores (a worker is one core's worth of "
                    "work; see docs/performance.md)", file, spec.num_workers, os.cpu_count() or 1)
        if nodes * slots > MAX_LOCAL_SLOTS:
            raise CliError(f"squall run: --nodes x --slots must be <= {MAX_LOCAL_SLOTS} (got {nodes} x {slots})")
        if nodes * slots < spec.num_workers:
            raise CliError(f"{file}: numWorkers {spec.num_workers} needs {spec.num_workers} slots; "
                           f"--nodes {nodes} x --slots {slots} offers {nodes * slots}")
        if any(c.stateful for c in spec.components):
            _check_state_provider(resolved.topology, file)
        _check_kafka(resolved.topology, file)
        code = run_topology(
            resolved,
            search_paths=[str(file.resolve().parent)],
            nodes=nodes,
            slots=slots,
            zookeeper=zookeeper,
            zk_credentials=_zk_credentials(zk_auth_file),
            duration=duration,
            kill_wait=kill_wait,
            summary_json=summary_json,
            console=output_console(),
            progress=progress,
            curve=curve,
            metrics_port=metrics_port,
            ui_port=ui_port if (ui or ui_actions) else None,
            ui_actions=ui_actions,
        )
    raise typer.Exit(code)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def operator(ctx: typer.Context) -> None:
    """Run the Kubernetes operator (nimbus for Topology resources); `squall operator --help`."""
    import argparse

    from squall_operator.operator_main import main as operator_main
    from squall_operator.operator_main import parser

    class _Refused(Exception):
        pass

    def refuse(message: str) -> NoReturn:
        raise _Refused(message)

    # argparse's usage block becomes one line, as every other command's usage errors
    check: argparse.ArgumentParser = parser()
    check.error = refuse  # type: ignore[method-assign]
    try:
        check.parse_args(list(ctx.args))
    except _Refused as exc:
        print_error(f"squall operator: {exc}")
        raise typer.Exit(EXIT_INVALID) from None
    raise typer.Exit(operator_main(list(ctx.args)))


# Storm's verbs on a running topology: list, activate, deactivate, rebalance, kill
# (squall_operator.verbs_cli; the same verbs are the kubectl plugin `kubectl-squall`)
from squall_operator.verbs_cli import add_verbs  # noqa: E402

add_verbs(app)

from squall_operator.kafka_cli import add_kafka  # noqa: E402  (squall kafka up: a local broker)
add_kafka(app)
