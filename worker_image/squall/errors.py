"""Errors a user can act on: what is wrong with a topology, and where.

A `TopologyError` carries every problem found, not just the first, each pointing at a field of the
resource in its own (camelCase) naming, so one run of `squall validate` shows everything to fix:

    topology.yaml: spec.bolts[1].inputs[0].component: 'splitt' — unknown component (known: ...)
"""

from __future__ import annotations

import dataclasses
import enum
import reprlib
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["NO_VALUE", "Problem", "TopologyError", "format_value", "printable"]


class _NoValue(enum.Enum):
    """Marks a problem that has no offending value to show (a missing field, a YAML syntax error)."""

    NO_VALUE = "NO_VALUE"

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE: Final = _NoValue.NO_VALUE

_MAX_VALUE_CHARS = 80
# a name (a field, a component, a file) shown in a message: longer ones are cut
MAX_NAME_CHARS: Final = 80


def printable(text: object, limit: int | None = MAX_NAME_CHARS) -> str:
    """`text` safe to print on a terminal: every character that is not printable (control
    characters such as ESC and BEL, which would clear the screen or retitle the window, line
    breaks, bidirectional overrides) written as its Python escape (`\\x1b`, `\\u202e`), and cut
    to `limit` characters with "..." (None: not cut). Costs the same for a huge string as for
    `limit` characters."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 3, 0)]
        cut = True
    else:
        cut = False
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        if limit is not None and len(text) > limit:
            text = text[: max(limit - 3, 0)]
            cut = True
    return text + "..." if cut else text


def _bounded_repr() -> reprlib.Repr:
    # reprlib stops at a few items per container and a few levels down, so that showing a value
    # costs the same for `[1, 2]` and for a list of a million lists (a YAML alias bomb's).
    r = reprlib.Repr()
    r.maxlevel = 4
    r.maxlist = r.maxtuple = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = 8
    r.maxdict = 6
    r.maxstring = r.maxother = r.maxlong = _MAX_VALUE_CHARS
    return r


_REPR = _bounded_repr()


def format_value(value: object) -> str:
    """A value as the user wrote it, near enough: YAML spellings for null and booleans, `repr`
    for the rest, cut short when long (in time and memory too: never more than a few dozen
    items of a container are looked at)."""
    if isinstance(value, enum.Enum) and value is not NO_VALUE:
        value = value.value
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = repr(value[: _MAX_VALUE_CHARS + 1])
    elif isinstance(value, int) and value.bit_length() > 256:
        text = f"<an integer of {value.bit_length()} bits>"  # repr() refuses past 4300 digits
    else:
        text = _REPR.repr(value)
    if len(text) > _MAX_VALUE_CHARS:
        text = text[: _MAX_VALUE_CHARS - 3] + "..."
    return text


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a topology.

    `path` names the field in the resource's own naming (`spec.bolts[1].inputs[0].component`);
    it is "" for a problem with the document as a whole. `value` is the offending value, or
    `NO_VALUE` when there is none to show (a missing field).
    """

    path: str
    value: Any
    message: str

    def __str__(self) -> str:
        # names in the path and the message are escaped where they are built; printing them
        # escaped here too keeps any message (an import error's text) from writing terminal
        # escapes
        head = printable(self.path, None)
        if self.value is not NO_VALUE:
            shown = printable(format_value(self.value), None)
            head = f"{head}: {shown}" if head else shown
        message = printable(self.message, None)
        return f"{head} — {message}" if head else message


class TopologyError(ValueError):
    """A topology that cannot run, with every problem found (in document order)."""

    def __init__(self, problems: Iterable[Problem], source: str | None = None) -> None:
        self.problems: list[Problem] = list(problems)
        self.source: str | None = source
        super().__init__(str(self))

    def lines(self) -> list[str]:
        """One line per problem, prefixed with the source file name when it is known."""
        prefix = f"{printable(self.source, None)}: " if self.source else ""
        return [f"{prefix}{problem}" for problem in self.problems]

    def with_source(self, source: str | None) -> TopologyError:
        """The same problems, attributed to `source` (a file name)."""
        return TopologyError(self.problems, source)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return f"TopologyError({self.problems!r}, source={self.source!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopologyError, (self.problems, self.source))
