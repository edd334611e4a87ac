"""The `squall` command line against arbitrary arguments (hypothesis): every verb with
arbitrary names, option values and unknown options answers with exit code 0, 1 or 2, never a
traceback, and an error is one line on stderr (`error: ...`), or, for a topology file that
cannot be used, its report (a line per problem, then `invalid topology: N problems`); nothing
the user typed reaches the terminal raw.

The commands and their options are enumerated from the click group behind the typer app, so a
new verb or option is fuzzed without editing this file: the verbs (every command that takes both
`--zookeeper` and `--kubernetes`) are also called well-formed, each argument and option drawn from
the command's own parameters, and each is called once on an unknown topology. They run in-process through typer's
CliRunner (it calls the group's `main`, as the console script does), then a smaller sample as
real subprocesses of the console script. The verbs act on a real ZooKeeper (the session's, a
fresh root for this module, with no topology in it: whatever name is drawn is unknown); run and
validate get files that do not exist, so nothing is ever started; `squall operator` is left out
(its usage errors are in tests/unit/test_cli_usage.py: with valid arguments it runs the operator),
and so are command groups such as `squall kafka` (another module's).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from squall.state import ClusterState
from squall.zkserver import EmbeddedZooKeeper
from squall_operator.cli import app
from squall_operator.verbs_cli import kubectl_app

pytestmark = [
    pytest.mark.integration,
    # the module's ZooKeeper client has a thread of its own that calls `random` (kazoo's retry
    # jitter): hypothesis sees the global random state move while it draws, whatever the draw
    pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies"),
]

GROUP = get_command(app)
# `squall operator` runs the operator when its arguments parse, and a group's subcommands (`squall
# kafka up` starts a broker) are not this module's: both are left out
COMMANDS = {name: cmd for name, cmd in GROUP.commands.items()  # type: ignore[attr-defined]
            if name != "operator" and not hasattr(cmd, "commands")}
# the verbs that steer or inspect a cluster: ZooKeeper or Kubernetes, whichever is named
VERBS = {name: cmd for name, cmd in COMMANDS.items()
         if {"zookeeper", "kubernetes"} <= {p.name for p in cmd.params}}
# how a verb chooses its cluster: the well-formed calls always name the module's ZooKeeper
TARGET_OPTIONS = {"zookeeper", "kubernetes", "namespace", "kubeconfig", "context"}
OPTIONS = {name: sorted(opt for p in cmd.params for opt in (*p.opts, *getattr(p, "secondary_opts", ()))
                        if opt.startswith("-"))
           for name, cmd in COMMANDS.items()}
KUBECTL = get_command(kubectl_app).commands  # type: ignore[attr-defined]
KUBECTL_OPTIONS = {name: sorted(opt for p in cmd.params for opt in (*p.opts, *getattr(p, "secondary_opts", ()))
                                if opt.startswith("-"))
                   for name, cmd in KUBECTL.items()}
REPORT_END = re.compile(r"invalid topology: \d+ problems?")


@pytest.fixture(scope="module")
def zk_where(zookeeper: EmbeddedZooKeeper) -> Iterator[str]:
    """`--zookeeper HOST:PORT/ROOT` of an empty cluster root (no nimbus, no topology)."""
    root = f"/squall-fuzz-{uuid.uuid4().hex}"
    state = ClusterState.connect(zookeeper.connect_string, root=root)
    try:
        yield f"{zookeeper.connect_string}{root}"
    finally:
        try:
            state.client.delete(root, recursive=True)
        finally:
            state.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty current directory: no fuzzed path names a real topology file."""
    path = tmp_path_factory.mktemp("cli-fuzz")
    old = Path.cwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(old)


numbers = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-0", "1", "-1", "0.0", "1e309", "-inf", "nan", "NaN", "0x10", "1_000", "", " "]),
)
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
hostile = st.sampled_from(["\x1b[2J\x1b]0;TITLE\x07", "a\nb", "\r", "\u2028", "\u202e", "zookeeper", ".", "..",
                           "%2e%2e", "x" * 300, "-", "--", "=", "a=b", "split=0", "split=1", "-e", "--help=1"])


@st.composite
def command_lines(draw: st.DrawFn, options: dict[str, list[str]] = OPTIONS) -> list[str]:
    name = draw(st.sampled_from(sorted(options)))
    opts = options[name]
    token = st.one_of(st.sampled_from(opts) if opts else st.nothing(), numbers, texts, hostile,
                      st.builds(lambda o, v: f"{o}={v}", st.sampled_from(opts) if opts else st.just("--x"),
                                st.one_of(numbers, texts)))
    args = [name, *draw(st.lists(token, max_size=6))]
    if name == "build":  # never a module that could be imported: only the argument handling is fuzzed
        args = [a if ":" not in a else f"no_such_module_for_the_cli_fuzz:{a}" for a in args]
    return args


@st.composite
def verb_calls(draw: st.DrawFn) -> list[str]:
    """Well-formed verbs with arbitrary names and values: these reach ZooKeeper. Each of the
    verb's arguments (the optional ones or not) and options (flags bare, repeatable ones up to 3
    times) is drawn from its parameters, so a new one is drawn too."""
    verb = draw(st.sampled_from(sorted(VERBS)))
    options: list[str] = []
    positional: list[str] = []
    for param in VERBS[verb].params:
        if param.name in TARGET_OPTIONS:
            continue
        if not param.opts[0].startswith("-"):  # an argument
            if param.required or draw(st.booleans()):
                positional.append(draw(st.one_of(texts, hostile)))
            continue
        for _ in range(draw(st.integers(0, 3 if getattr(param, "multiple", False) else 1))):
            options.append(draw(st.sampled_from(param.opts)))
            if not getattr(param, "is_flag", False):
                options.append(draw(_values(param)))
    # after `--` every word is an argument, also one starting with "-"
    return [verb, *options, "--", *positional] if positional else [verb, *options]


def _values(param: Any) -> st.SearchStrategy[str]:
    """What an option's value is drawn from: a number option mostly within its declared range
    (so the call gets past the parsing), else any number; a text option any text, also `A=B`."""
    kind = param.type_descriptor.annotation
    if kind is int:
        low, high = param.min if param.min is not None else -(10**6), param.max if param.max is not None else 10**6
        return st.one_of(st.integers(low, high).map(str), st.integers(low, high).map(str), numbers)
    if kind is float:
        low, high = param.min if param.min is not None else -1e6, param.max if param.max is not None else 1e6
        return st.one_of(st.floats(low, high).map(repr), st.floats(low, high).map(repr), numbers)
    return st.one_of(texts, hostile, st.builds(lambda c, n: f"{c}={n}", texts, st.one_of(numbers, texts)))


def _with_target(args: list[str], zk_where: str) -> list[str]:
    """The verbs reach the module's ZooKeeper (a --zookeeper drawn earlier is overridden: click
    keeps the last; the option goes before a `--`, after which every word is an argument), and
    run/validate a file that does not exist, unless the draw named one."""
    name = args[0]
    if name in VERBS and "--kubernetes" not in args and "-k" not in args:
        end = args.index("--") if "--" in args else len(args)
        return [*args[:end], "--zookeeper", zk_where, *args[end:]]
    if name in ("run", "validate") and len(args) == 1:
        return [*args, "missing-topology.yaml"]
    return args


def _check(args: list[str], code: int, stdout: str, stderr: str) -> None:
    where = f"squall {args!r}: exit {code}\nstdout: {stdout!r}\nstderr: {stderr!r}"
    assert code in (0, 1, 2), where
    assert "Traceback" not in stdout + stderr, where
    for ch in stdout + stderr:
        assert ch == "\n" or unicodedata.category(ch) not in ("Cc", "Zl", "Zp"), (repr(ch), where)
    if currently_in_test_context():
        event(f"{args[0]}: exit {code}" + (": unknown topology" if "no topology named" in stderr else ""))
    if code == 0:
        return
    lines = stderr.splitlines()
    assert lines, where
    if REPORT_END.fullmatch(lines[-1]):  # a topology file that cannot be used: its report
        assert args[0] in ("validate", "run", "build") and len(lines) >= 2, where
    else:
        assert len(lines) == 1 and lines[0].startswith("error: "), where


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(args=st.one_of(command_lines(), verb_calls()))
# a name no ZooKeeper node can have reached `squall events` as a ValueError traceback
@example(args=["events", "--", ""])
@example(args=["debug", "--off", "--", ".."])
def test_arbitrary_arguments_in_process(args: list[str], zk_where: str, workdir: Path) -> None:
    args = _with_target(args, zk_where)
    result = CliRunner(env={"KUBECONFIG": str(workdir / "no-kubeconfig"), "SQUALL_ZOOKEEPER": None,
                            "SQUALL_ZK_AUTH_FILE": None}).invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"squall {args!r} raised {result.exception!r}") from result.exception
    _check(args, result.exit_code, result.stdout, result.stderr)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_answers_with_only_its_required_arguments(verb: str, zk_where: str, workdir: Path) -> None:
    """Each verb once, whatever hypothesis draws: its required arguments naming a topology that
    is not there (or a file that is not there), on the module's ZooKeeper."""
    required = [p for p in VERBS[verb].params if not p.opts[0].startswith("-") and p.required]
    args = _with_target([verb, *("no-such-topology" for _ in required)], zk_where)
    result = CliRunner(env={"KUBECONFIG": str(workdir / "no-kubeconfig"), "SQUALL_ZOOKEEPER": None,
                            "SQUALL_ZK_AUTH_FILE": None}).invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"squall {args!r} raised {result.exception!r}") from result.exception
    _check(args, result.exit_code, result.stdout, result.stderr)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(args=st.one_of(command_lines(), verb_calls()))
def test_arbitrary_arguments_as_a_subprocess(args: list[str], zk_where: str, workdir: Path) -> None:
    """The console script itself: what reaches a shell (the exit status, the bytes on stderr)."""
    args = _with_target(args, zk_where)
    env = {k: v for k, v in os.environ.items() if k not in ("SQUALL_ZOOKEEPER", "SQUALL_ZK_AUTH_FILE")}
    env["KUBECONFIG"] = str(workdir / "no-kubeconfig")
    proc = subprocess.run([sys.executable, "-m", "squall_operator", *args], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env, cwd=workdir)
    _check(args, proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(args=command_lines(KUBECTL_OPTIONS))
def test_arbitrary_arguments_to_the_kubectl_plugin(args: list[str], workdir: Path) -> None:
    """`kubectl squall` (always Kubernetes): with no kubeconfig to load, every verb is refused in
    one line, whatever the arguments; usage errors as `squall`'s."""
    result = CliRunner(env={"KUBECONFIG": str(workdir / "no-kubeconfig"), "KUBERNETES_SERVICE_HOST": None}
                       ).invoke(kubectl_app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"kubectl squall {args!r} raised {result.exception!r}") from result.exception
    _check(args, result.exit_code, result.stdout, result.stderr)
