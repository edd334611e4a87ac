"""One line on stderr for every usage error of `squall` and `kubectl squall`.

typer (through its click) answers a malformed command line (an unknown option or command, a
missing argument, a value out of range or of the wrong type) with a usage panel of six lines or
more. `OneLineUsageGroup` replaces it with one line naming the command, the option and the value,
and exit code 2, as the verbs' own refusals are one line:

    error: squall rebalance: -n/--num-workers must be >= 1 (got 0)

`one_line` escapes what the user typed (control characters, line separators), so an error stays
one line and never reaches the terminal as raw escape sequences.
"""

from __future__ import annotations

import math
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from typer import Abort, Exit
from typer._click.exceptions import (  # typer vendors click as typer._click
    BadParameter,
    ClickException,
    NoArgsIsHelpError,
    UsageError,
)
from typer.core import TyperGroup

from squall.errors import TopologyError

__all__ = [
    "EXIT_INVALID",
    "EXIT_USAGE",
    "MAX_SECONDS",
    "MAX_SHOWN_PROBLEMS",
    "CliError",
    "OneLineUsageGroup",
    "one_line",
    "print_error",
    "report_topology_error",
    "stderr_console",
    "usage_line",
    "user_errors",
]

# Exit status of a malformed command line (click's, and the verbs' EXIT_USAGE)
EXIT_USAGE = 2

# The longest wait or timeout any option takes, in seconds: Storm's (a Thrift i32, about 68
# years). It keeps `inf` out, which a topology's state stored as JSON could not hold.
MAX_SECONDS = 2**31 - 1

# str.splitlines() breaks at these (besides the control characters): escape them too
_BREAKS = {"Zl", "Zp"}


def one_line(text: str) -> str:
    """`text` with control characters, format characters and line separators escaped."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf") or cat in _BREAKS:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def print_error(message: str) -> None:
    """`error: MESSAGE` as one line on stderr (red on a terminal), escaped."""
    Console(stderr=True, highlight=False, soft_wrap=True, emoji=False).print(
        f"error: {one_line(message)}", style="red", markup=False, emoji=False, highlight=False)


# pydantic's error types (typer checks option values with pydantic) -> our wording
_LIMITS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
           "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
_TYPES = {"int_parsing": "must be a whole number", "int_from_float": "must be a whole number",
          "float_parsing": "must be a number", "finite_number": "must be a finite number",
          "bool_parsing": "must be true or false", "float_type": "must be a number",
          "int_type": "must be a whole number"}


def _param_name(param: Any) -> str:
    opts = sorted([*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())], key=len)
    if opts and all(o.startswith("-") for o in opts):
        return "/".join(opts)
    return str(getattr(param, "human_readable_name", None) or param.name).upper()


def _shown(value: Any) -> str:
    text = str(value)
    try:
        float(text)
    except ValueError:
        return repr(value)
    return text if text.strip() == text and text else repr(value)


def _finite(value: Any) -> bool:
    """False for 'inf', 'nan' and the like (a number no wait or timeout can be)."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        return True  # not a number at all: the type's message says so


def _bad_parameter(exc: BadParameter) -> str:
    name = _param_name(exc.param) if exc.param is not None else (exc.param_hint or "a value")
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
        except (IndexError, TypeError, ValueError):
            first = None
        if isinstance(first, dict) and "input" in first:
            kind = str(first.get("type", ""))
            limits = first.get("ctx") or {}
            if not _finite(first["input"]):
                what = "must be a finite number"
            elif kind in _LIMITS and _LIMITS[kind][1] in limits:
                sign, key = _LIMITS[kind]
                limit = limits[key]
                if isinstance(limit, float) and limit.is_integer():
                    limit = int(limit)
                what = f"must be {sign} {limit}"
            else:
                what = _TYPES.get(kind) or f"is invalid: {str(first.get('msg', '')).lower()}"
            return f"{name} {what} (got {_shown(first['input'])})"
    return _sentence(exc.format_message())


def _sentence(message: str) -> str:
    """click's 'Missing argument 'NAME'.' as 'missing argument 'NAME''."""
    message = " ".join(message.split())
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    return message.rstrip(".")


def usage_line(exc: ClickException, where: str = "squall") -> str:
    """The one line (without 'error: ') for a usage error of the command line; `where` names
    the command when the error carries no context."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else where
    text = _bad_parameter(exc) if isinstance(exc, BadParameter) else _sentence(exc.format_message())
    return f"{where}: {text}"


class OneLineUsageGroup(TyperGroup):
    """typer's group whose usage errors are one line on stderr (exit 2), not a panel."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
            code = rv if isinstance(rv, int) else 0
        except NoArgsIsHelpError as exc:  # `squall` alone: the help, as before
            if exc.format_message().strip():  # else typer's rich help printed it already
                exc.show()
            code = exc.exit_code
        except UsageError as exc:
            print_error(usage_line(exc, self._command_path(args, prog_name)))
            code = EXIT_USAGE
        except ClickException as exc:
            print_error(_sentence(exc.format_message()))
            code = exc.exit_code
        except Abort:
            print_error("aborted")
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code)

    def _command_path(self, args: Sequence[str] | None, prog_name: str | None) -> str:
        """'squall kill' for a usage error that click raised without its context."""
        prog = prog_name or self.name or "squall"
        words = list(sys.argv[1:] if args is None else args)
        command = next((w for w in words if not w.startswith("-")), None)
        return f"{prog} {command}" if command in self.commands else prog


# --- a user's error, from any verb: one line (or a topology's problem report) and an exit code ---

# Exit status for a topology (or an argument) that cannot be used; click's usage errors use it too.
EXIT_INVALID = 2


class CliError(Exception):
    """A problem the user can fix, reported as one line on stderr (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.code = code


def stderr_console() -> Console:
    # Created per use so that the current sys.stderr is used (test runners swap it).
    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


# Problems printed at most: a hostile file can hold a hundred thousand, and printing each through
# rich takes about a millisecond.
MAX_SHOWN_PROBLEMS = 50


def report_topology_error(exc: TopologyError, console: Console | None = None) -> None:
    console = console or stderr_console()
    lines = exc.lines()
    for line in lines[:MAX_SHOWN_PROBLEMS]:
        console.print(line, style="red", markup=False)
    n = len(exc.problems)
    if n > MAX_SHOWN_PROBLEMS:
        console.print(f"... and {n - MAX_SHOWN_PROBLEMS} more", style="red", markup=False)
    console.print(
        f"invalid topology: {n} problem{'' if n == 1 else 's'}", style="bold red", markup=False
    )


@contextmanager
def user_errors() -> Iterator[None]:
    """Report `TopologyError` / `CliError` on stderr and exit with their code, no traceback."""
    try:
        yield
    except TopologyError as exc:
        report_topology_error(exc)
        raise Exit(EXIT_INVALID) from None
    except CliError as exc:
        print_error(str(exc))
        raise Exit(exc.code) from None
