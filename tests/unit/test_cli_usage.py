"""Usage errors of `squall` and `kubectl squall` are one line on stderr with exit code 2:
typer's six-line usage panel is gone, and the line names the command, the option and
the value. In-process through typer's CliRunner, which calls the group's `main` as the console
script does; nothing here reaches ZooKeeper, Kubernetes or starts a process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from squall_operator.cli import app
from squall_operator.cli_usage import one_line
from squall_operator.verbs_cli import kubectl_app

pytestmark = pytest.mark.unit

WORDCOUNT = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "topology.yaml")


def one_error_line(args: list[str], *, code: int = 2, application: object = app) -> str:
    result = CliRunner().invoke(application, args)  # type: ignore[arg-type]
    assert result.exit_code == code, (args, result.exit_code, result.output, result.exception)
    assert result.stdout == "", (args, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    assert "Traceback" not in result.stderr and "╭" not in result.stderr, result.stderr
    return lines[0]


def test_rebalance_with_no_workers_is_one_line() -> None:
    """The reported case: six lines of usage panel before."""
    assert one_error_line(["rebalance", "wordcount", "-n", "0"]) == \
        "error: squall rebalance: -n/--num-workers must be >= 1 (got 0)"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["kill"], "squall kill: missing argument 'NAME'"),
        (["activate"], "squall activate: missing argument 'NAME'"),
        (["deactivate"], "squall deactivate: missing argument 'NAME'"),
        (["rebalance"], "squall rebalance: missing argument 'NAME'"),
        (["validate"], "squall validate: missing argument 'FILE'"),
        (["run"], "squall run: missing argument 'FILE'"),
        (["build"], "squall build: missing argument 'MODULE:FUNCTION'"),
        (["kill", "wc", "-w", "abc"], "squall kill: -w/--wait must be a number (got 'abc')"),
        (["kill", "wc", "-w", "-1"], "squall kill: -w/--wait must be >= 0"),
        (["kill", "wc", "-w", "inf"], "squall kill: -w/--wait must be a finite number (got inf)"),
        (["kill", "wc", "-w", "1e12"], "squall kill: -w/--wait must be <= 86400 (got 1e12)"),
        (["run", WORDCOUNT, "--kill-wait", "86401"], "squall run: --kill-wait must be <= 86400 (got 86401)"),
        (["rebalance", "wc", "-w", "nan"], "squall rebalance: -w/--wait must be a finite number (got nan)"),
        (["rebalance", "wc", "-n", "1.5"], "squall rebalance: -n/--num-workers must be a whole number (got 1.5)"),
        (["rebalance", "wc", "-n", "1000000000"], "squall rebalance: -n/--num-workers must be <= 1000 (got 1000000000)"),
        (["rebalance", "wc", "-e"], "squall rebalance: option '-e' requires an argument"),
        (["list", "--bogus"], "squall list: no such option: --bogus"),
        (["list", "--timeout", "0"], "squall list: --timeout must be >= 0.1 (got 0)"),
        (["list", "--all-namespaces=3"], "squall list: option '--all-namespaces' does not take a value"),
        (["frobnicate"], "squall: no such command 'frobnicate'"),
        (["--bogus"], "squall: no such option: --bogus"),
        (["validate", "x.yaml", "--import-timeout", "0"], "squall validate: --import-timeout must be >= 0.1 (got 0)"),
        (["run", WORDCOUNT, "--nodes", "0"], "squall run: --nodes must be >= 1 (got 0)"),
        (["run", WORDCOUNT, "--slots", "x"], "squall run: --slots must be a whole number (got 'x')"),
        (["run", WORDCOUNT, "--nodes", "100", "--slots", "100"], "squall run: --nodes x --slots must be <= 256 (got 100 x 100)"),
        (["run", WORDCOUNT, "--metrics-port", "70000"], "squall run: --metrics-port must be <= 65535 (got 70000)"),
        (["run", WORDCOUNT, "--ui-port", "-1"], "squall run: --ui-port must be >= 0 (got -1)"),
        (["run", WORDCOUNT, "--duration", "inf"], "squall run: --duration must be a finite number (got inf)"),
        (["run", WORDCOUNT, "--kill-wait", "-3"], "squall run: --kill-wait must be >= 0"),
        (["run", WORDCOUNT, "--log-level", "bogus"],
         "squall run: --log-level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (got 'bogus')"),
        (["run", WORDCOUNT, "--zookeeper", "garbage"], "squall run: --zookeeper must be HOST:PORT"),
        (["run", WORDCOUNT, "--summary-json", "/nonexistent-dir/s.json"],
         "squall run: --summary-json '/nonexistent-dir/s.json': cannot write in '/nonexistent-dir'"),
        (["operator", "--bogus"], "squall operator: unrecognized arguments: --bogus"),
        (["operator", "--slots-per-node", "x"], "squall operator: argument --slots-per-node: invalid int value: 'x'"),
        (["list"], "where is the topology? give --zookeeper"),
        (["list", "--all-namespaces"], "--all-namespaces goes with --kubernetes"),
        (["kill", "wc", "--zookeeper", "zk"], "malformed --zookeeper 'zk'"),
        (["rebalance", "wc", "-e", "split"], "malformed -e 'split'"),
        # the debugging verbs' bad input, said before any cluster is asked (none is given here)
        (["debug", "wc", "split", "-s", "150"],
         "debug: split: the sample percentage must be a number above 0 and at most 100 (got 150.0)"),
        (["debug", "wc", "-s", "0"], "debug: the sample percentage must be a number above 0 and at most 100 (got 0.0)"),
        (["debug", "wc", "-s", "x"], "squall debug: -s/--sample must be a number (got 'x')"),
        (["debug", "wc"], "debug: give --sample PCT or --off"),
        (["set-log-level", "wc", "-l", "ROOT=LOUD"], "set-log-level: unknown log level 'LOUD'"),
        (["set-log-level", "wc", "-l", "ROOT=DEBUG:-3"], "the timeout must be above 0 and at most 604800 seconds"),
        (["dump-stacks", "wc", "--profile", "31"], "squall dump-stacks: --profile must be <= 30 (got 31)"),
        (["logs", "wc", "--tail", "-2"], "squall logs: --tail must be >= -1 (got -2)"),
    ],
)
def test_every_usage_error_is_one_line_and_exit_2(args: list[str], line: str) -> None:
    assert line in one_error_line(args)


def test_kubectl_plugin_usage_errors_are_one_line() -> None:
    assert one_error_line(["rebalance", "wc", "-n", "0"], application=kubectl_app) == \
        "error: kubectl squall rebalance: -n/--num-workers must be >= 1 (got 0)"
    assert "kubectl squall list: no such option: --bogus" in one_error_line(["list", "--bogus"], application=kubectl_app)


def test_what_the_user_typed_is_escaped() -> None:
    """An option or a value holding escape sequences or line breaks stays one line and never
    reaches the terminal raw."""
    line = one_error_line(["kill", "wc", "-w", "\x1b[2J\x1b]0;TITLE\x07\n2"])
    assert "\x1b" not in line and "\x07" not in line
    assert "\\x1b[2J" in line
    line = one_error_line(["list", "--bo\u2028gus\x1b"])
    assert "\u2028" not in line and "\x1b" not in line
    assert one_line("a\nb\rc\x00\u202e\x85") == "a\\x0ab\\x0dc\\x00\\u202e\\x85"


def test_help_and_no_arguments_are_not_errors() -> None:
    result = CliRunner().invoke(app, ["kill", "--help"])
    assert result.exit_code == 0 and "Usage" in result.stdout
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 2 and "Usage" in result.output  # the help, as typer's no_args_is_help


def test_squall_run_offers_a_slot_per_core_by_default() -> None:
    from squall_operator.local import default_slots

    assert default_slots(cores=2, nodes=2, num_workers=2) == 2  # never fewer than 2 a node
    assert default_slots(cores=16, nodes=2, num_workers=2) == 8  # a worker per core to rebalance onto
    assert default_slots(cores=15, nodes=2, num_workers=1) == 8  # rounded up
    assert default_slots(cores=2, nodes=2, num_workers=6) == 3  # the topology's workers fit anyway
