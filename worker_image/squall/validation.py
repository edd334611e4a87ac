"""Reading and checking a `Topology` resource.

Two steps, both reporting every problem at once as a `TopologyError`:

- `parse_topology` / `load_topology`: YAML -> `Topology`. What a CRD's OpenAPI schema can also
  check (types, bounds, patterns) fails here, with pydantic's errors turned into messages in the
  resource's own camelCase naming (`spec.bolts[0].parallelism: 0 — must be >= 1`).
- `check_topology`: what needs the whole graph or an import: names, subscriptions, streams,
  groupings, and (optionally) the component classes themselves. Its result, `ResolvedTopology`,
  carries the imported classes and every component's declared output streams.

Both apply `squall.limits` (what a topology may ask for: the same for `squall validate`, `squall
run`, the operator and the workers; the limits over the whole topology are checked here, by
`limit_problems`, and a rebalance's by `rebalance_problem`), and build every message with names made printable
(`squall.errors.printable`) and listings cut short, so checking stays linear in the file.

Pure: imports only the standard library, pydantic, yaml and squall's models, errors, limits,
serialization (msgpack, for `topology.serializers`) and windowing, and runs no user code but
through the `squall.classload.ClassLoader` it is handed: `check_topology` resolves classes with
`squall.classload` (the topology's directory on `sys.path`, then `importlib`) unless given
another, and `squall.classcheck` runs it in a child process for the CLI. The import-linter
contract "Validation runs no user code itself" keeps `importlib` out of this module.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from squall import classload, serialization, windowing
from squall.components import WindowedBolt
from squall.errors import NO_VALUE, Problem, TopologyError, printable
from squall.limits import (
    FIELD_LIMITS,
    MAX_COMPONENTS,
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_EXECUTORS,
    MAX_KEY_CHARS,
    MAX_NODES,
    MAX_TASKS,
    MAX_TOPOLOGY_BYTES,
    MAX_WORKERS,
    config_value_problem,
    key_repr,
    string_json_bytes,
)
from squall.models.v1alpha1 import (
    API_VERSION,
    CLASS_PATH,
    DNS_LABEL,
    KIND,
    STREAM_NAME,
    BoltSpec,
    ComponentSpec,
    Grouping,
    InputSpec,
    StreamSpec,
    Topology,
)

__all__ = [
    "DEFAULT_STREAM",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_NODES",
    "RESERVED_PREFIX",
    "ResolvedTopology",
    "check_topology",
    "declared_streams",
    "limit_problems",
    "load_topology",
    "normalize_outputs",
    "parse_topology",
    "rebalance_problem",
    "resolve_class",
    "validate_file",
]

DEFAULT_STREAM = "default"
# Component and stream names starting with this are Squall's own (`__acker`, `__system`, `__tick`).
RESERVED_PREFIX = "__"
_FIELD_GROUPINGS = frozenset({Grouping.FIELDS, Grouping.PARTIAL_KEY})


# --------------------------------------------------------------------------------------------
# YAML -> Topology
# --------------------------------------------------------------------------------------------


# Bounds on what is read, so that any input is refused in bounded time and memory
# (squall.limits; docs/reliability.md, "Hostile input"): MAX_DOCUMENT_BYTES of text, MAX_DEPTH
# levels of nesting, MAX_NODES values (each alias counting as the whole value it stands for: a
# "billion laughs" document is refused at the alias that crosses this), MAX_TOPOLOGY_BYTES of
# JSON once aliases are expanded.


class _LimitError(yaml.MarkedYAMLError):
    """A document past one of the bounds above; reported without the "invalid YAML" prefix."""


class _Bounded(yaml.composer.Composer, yaml.constructor.SafeConstructor):
    """Safe YAML that refuses a key given twice in one mapping (PyYAML keeps the last silently),
    and documents nested deeper than `MAX_DEPTH` or larger than `MAX_NODES` once aliases are
    expanded, while composing: before anything builds the expanded value."""

    def _start_bounds(self) -> None:
        # per open collection, the height of its tallest child so far
        self._open: list[int] = []
        self._nodes = 0
        # anchor -> (expanded size, height) of the node it names, once composed
        self._anchored: dict[str, tuple[int, int]] = {}

    if TYPE_CHECKING:  # given by the parser the loaders below mix in

        def peek_event(self) -> Any: ...

        def dispose(self) -> None: ...

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            known = self._anchored.get(str(event.anchor))
            if known is None:  # the alias sits inside the node it names
                raise _LimitError(
                    None, None, f"alias '*{event.anchor}' is recursive (it refers to a value "
                    "that contains it)", mark)
            self._add(*known, mark, f"alias '*{event.anchor}'")
            return node
        if len(self._open) >= MAX_DEPTH:
            raise _LimitError(None, None, f"the document nests deeper than {MAX_DEPTH} levels",
                              mark)
        before = self._nodes
        self._open.append(0)
        node = super().compose_node(parent, index)
        height = self._open.pop() + 1
        self._add(1, height, mark, "this value")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._anchored[anchor] = (self._nodes - before, height)
        return node

    def _add(self, size: int, height: int, mark: Any, what: str) -> None:
        self._nodes += size
        if self._nodes > MAX_NODES:
            raise _LimitError(None, None, f"{what} expands the document past {MAX_NODES} nodes "
                              "(values, aliases counted as what they stand for)", mark)
        if len(self._open) + height > MAX_DEPTH:
            raise _LimitError(None, None, f"{what} nests the document deeper than {MAX_DEPTH} "
                              "levels", mark)
        if self._open and self._open[-1] < height:
            self._open[-1] = height

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:
            # what PyYAML's constructors cannot build: an integer of 5000 digits, the 30th of
            # February, an empty `!!int` (an IndexError in PyYAML)
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this {node.tag.rpartition(':')[2]}: {exc}",
                node.start_mark) from None


def _construct_mapping(loader: _Bounded, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: let the stock constructor report it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=True)


class _PyLoader(_Bounded, yaml.SafeLoader):
    """PyYAML's own scanner and parser, in Python: several times slower than libyaml's."""

    def __init__(self, stream: str) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self._start_bounds()


_Loader: Callable[[str], _Bounded] = _PyLoader
try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml
    pass
else:

    class _CLoader(_Bounded, CParser, yaml.resolver.Resolver):
        """libyaml scans and parses (a MiB in a fraction of a second); composing and
        constructing stay in Python, under `_Bounded`'s bounds. `_Bounded` (a Composer) comes
        before `CParser` so that CParser's own composer in C is not used."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self._start_bounds()

    _Loader = _CLoader

_Bounded.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping  # type: ignore[type-var]
)


def _at(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(exc: yaml.YAMLError, text: str) -> Problem:
    if isinstance(exc, _LimitError) and exc.problem_mark is not None:
        return Problem(_at(exc.problem_mark), NO_VALUE, str(exc.problem))
    if isinstance(exc, yaml.reader.ReaderError):
        # PyYAML names an offset (libyaml's in bytes of UTF-8); say the line instead
        if _Loader is _PyLoader:
            before = text[: exc.position]
        else:
            before = text.encode("utf-8", "surrogatepass")[: exc.position].decode("utf-8", "replace")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        return Problem(f"line {line}, column {column}", NO_VALUE,
                       f"invalid YAML: unacceptable character {char} ({exc.reason})")
    if isinstance(exc, yaml.MarkedYAMLError):
        what = exc.problem or "invalid YAML"
        problem, context = exc.problem_mark, exc.context_mark
        if context is not None and problem is not None and (
            (context.line, context.column) != (problem.line, problem.column)
        ):
            # where the construct began (an unclosed bracket, a quote) is where the fix is
            started = f"{exc.context} that starts here" if exc.context else "it starts here"
            return Problem(_at(context), NO_VALUE,
                           f"invalid YAML: {what} at {_at(problem)} ({started})")
        mark = problem or context
        if exc.context:
            what = f"{what} ({exc.context})"
        return Problem(_at(mark) if mark is not None else "", NO_VALUE, f"invalid YAML: {what}")
    return Problem("", NO_VALUE, f"invalid YAML: {exc}")


def _too_large(size: int) -> Problem:
    return Problem("", NO_VALUE, f"the file is larger than {MAX_DOCUMENT_BYTES >> 20} MiB "
                   f"({MAX_DOCUMENT_BYTES} bytes), the most a topology may be")


def _decode(data: bytes) -> str:
    """UTF-8 text (a leading byte-order mark dropped); an undecodable byte is named by line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TopologyError([Problem(
            f"line {line}, column {column}", NO_VALUE,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} ({exc.reason})")]) from None


# what a value that JSON cannot hold is, by its Python type (YAML builds them)
_NOT_JSON = {"date": "a date (YAML reads 2020-01-31 as one: quote it)",
             "datetime": "a timestamp (quote it)", "bytes": "binary data (!!binary)",
             "set": "a set (!!set): use a list", "complex": "a complex number"}


def _shape_problems(data: object) -> list[Problem]:
    """What the document's shape must satisfy, walked once without recursion and without
    copying anything, for YAML read by `_Loader` and for an already-parsed document (the
    operator's, read from the API server as JSON, or one built in Python) alike: depth
    (`MAX_DEPTH`) and values (`MAX_NODES`, each alias counted where it stands), values JSON can
    hold (the topology is stored as JSON: no infinity or NaN, which would come back as null, no
    dates, sets or bytes, string keys), and the size of the JSON form with aliases expanded
    (`MAX_TOPOLOGY_BYTES`; a string aliased many times counts each time, measured once)."""
    stack: list[tuple[object, tuple[int | str, ...]]] = [(data, ())]
    nodes = 0
    size = 0
    measured: dict[int, int] = {}  # id(str) -> its JSON bytes: an aliased string is measured once

    def json_bytes(text: str) -> int:
        n = measured.get(id(text))
        if n is None:
            n = measured[id(text)] = (
                len(text) + 2 if len(text) > MAX_TOPOLOGY_BYTES else string_json_bytes(text))
        return n

    problems: list[Problem] = []
    while stack:
        value, loc = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            return [Problem("", NO_VALUE, f"the document holds more than {MAX_NODES} values")]
        if isinstance(value, str):
            size += json_bytes(value)
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(_format_loc(loc), value,
                                    "must be a finite number: the topology is stored as JSON, "
                                    "which has no infinity or NaN"))
        elif value is None or isinstance(value, bool):
            size += 5
        elif isinstance(value, int):
            bits = value.bit_length()
            size += len(str(value)) if bits < 64 else bits * 3 // 10 + 2  # str() refuses 4300 digits
        elif isinstance(value, (float, enum.Enum)):
            size += len(repr(value)) if isinstance(value, float) else 8
        elif not isinstance(value, (Mapping, list, tuple)):
            what = _NOT_JSON.get(type(value).__name__, type(value).__name__)
            problems.append(Problem(_format_loc(loc), value, f"not a JSON value: {what}"))
        if size > MAX_TOPOLOGY_BYTES:
            return [Problem(_format_loc(loc), NO_VALUE,
                            f"the topology's JSON form passes {MAX_TOPOLOGY_BYTES} bytes here (YAML "
                            "aliases expanded), over the limit of a topology: it is stored in one "
                            "ZooKeeper node")]
        if isinstance(value, Mapping):
            children: Iterable[tuple[object, object]] = value.items()
        elif isinstance(value, (list, tuple)):
            children = enumerate(value)
        else:
            continue
        if len(loc) >= MAX_DEPTH:
            return [Problem(_format_loc(loc), NO_VALUE,
                            f"the document nests deeper than {MAX_DEPTH} levels")]
        size += 2
        inside: list[tuple[object, tuple[int | str, ...]]] = []
        for key, child in children:
            if isinstance(value, Mapping):
                if isinstance(key, str):
                    size += json_bytes(key)
                else:
                    problems.append(Problem(_format_loc((*loc, repr(key))), key,
                                            "keys must be strings (JSON's are): quote it"))
            size += 1
            inside.append((child, (*loc, key if isinstance(key, (int, str)) else repr(key))))
        stack.extend(reversed(inside))  # popped in document order
    return problems


def parse_topology(data: Mapping[str, Any] | str | bytes, source: str = "<string>") -> Topology:
    """A `Topology` from YAML text or an already-parsed mapping.

    Raises `TopologyError` listing every problem: a YAML syntax error, a wrong `apiVersion` or
    `kind`, and every schema violation, with paths in the resource's camelCase naming. `source`
    (a file name) prefixes each problem line; the default "<string>" means none. Input past the
    bounds above (`MAX_DOCUMENT_BYTES`, `MAX_DEPTH`, `MAX_NODES`) is refused before it is built.
    """
    src = None if source == "<string>" else source
    if isinstance(data, (str, bytes)):
        if len(data) > MAX_DOCUMENT_BYTES:
            raise TopologyError([_too_large(len(data))], src)
        try:
            text = _decode(data) if isinstance(data, bytes) else data
        except TopologyError as exc:
            raise exc.with_source(src) from None
        loader = _Loader(text)  # a SafeConstructor: plain data only
        try:
            data = loader.get_single_data()
        except yaml.YAMLError as exc:
            raise TopologyError([_yaml_problem(exc, text)], src) from None
        finally:
            loader.dispose()
    if (shape := _shape_problems(data)):
        raise TopologyError(shape, src)
    if data is None:
        raise TopologyError(
            [Problem("", NO_VALUE, "the document is empty; expected a Topology resource")], src
        )
    if not isinstance(data, Mapping):
        raise TopologyError(
            [Problem("", data, "expected a mapping (a Topology resource), not a "
                     f"{_yaml_type(data)}")],
            src,
        )
    header = _header_problems(data)
    if header:  # not a Squall topology at all: the rest would only be noise
        raise TopologyError(header, src)
    try:
        topology = Topology.model_validate(dict(data))
    except ValidationError as exc:
        raise TopologyError([_problem_from_pydantic(e) for e in exc.errors()], src) from None
    if (over := limit_problems(topology)):
        raise TopologyError(over, src)
    return topology


def load_topology(path: str | Path) -> Topology:
    """`parse_topology` on a file; problems are prefixed with the path as given. At most
    `MAX_DOCUMENT_BYTES` (+1, to tell a larger file) are read."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise TopologyError([Problem("", NO_VALUE, f"cannot read the file: {reason}")], source)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise TopologyError([_too_large(len(data))], source)
    return parse_topology(data, source=source)


def _yaml_type(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _header_problems(data: Mapping[str, Any]) -> list[Problem]:
    problems = []
    if "apiVersion" in data and data["apiVersion"] != API_VERSION:
        problems.append(
            Problem(
                "apiVersion",
                data["apiVersion"],
                f"unsupported apiVersion; this Squall reads '{API_VERSION}'",
            )
        )
    if "kind" in data and data["kind"] != KIND:
        problems.append(
            Problem("kind", data["kind"], f"not a Squall topology; expected kind '{KIND}'")
        )
    return problems


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for item in loc:
        if isinstance(item, int):
            out += f"[{item}]"
        elif len(item) <= MAX_KEY_CHARS and _IDENTIFIER.match(item):
            out += f".{item}" if out else item
        else:
            out += f"[{key_repr(item)}]"
    return out


_PATTERN_MESSAGES = {
    DNS_LABEL: "must be a DNS label (lowercase letters, digits, '-'; starting and ending with a "
    "letter or digit; at most 63 characters)",
    CLASS_PATH: "must be a class path 'module:Class' (for example 'wordcount.bolts:SplitBolt')",
    STREAM_NAME: "must be a stream name (a letter or '_', then letters, digits, '_', '.', '-')",
}

_TYPE_MESSAGES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number: the topology is stored as JSON, which has no "
    "infinity or NaN",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


def _problem_from_pydantic(err: Mapping[str, Any]) -> Problem:
    loc: tuple[int | str, ...] = tuple(err["loc"])
    kind: str = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value: Any = err.get("input", NO_VALUE)
    path = _format_loc(loc)
    last = loc[-1] if loc else None

    if kind == "missing":
        return Problem(path, NO_VALUE, "required field missing")
    if kind == "extra_forbidden":
        if len(loc) == 4 and loc[:2] == ("spec", "spouts") and last == "inputs":
            return Problem(
                path, value, "spouts take no inputs; only bolts subscribe to streams"
            )
        return Problem(path, value, "unknown field" + _did_you_mean(loc))
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        message = _PATTERN_MESSAGES.get(pattern, f"must match the pattern {pattern}")
        return Problem(path, value, message)
    if kind == "less_than_equal" and isinstance(last, str) and last in FIELD_LIMITS:
        bound = ctx.get("le")
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)  # a float field's limit, as written in squall.limits
        return Problem(path, value, f"is over the limit of {bound} {FIELD_LIMITS[last]}")
    if kind == "too_long" and isinstance(last, str) and last in FIELD_LIMITS:
        n = ctx.get("actual_length")
        return Problem(path, NO_VALUE, f"{n} given, over the limit of {ctx.get('max_length')} "
                       f"{FIELD_LIMITS[last]}")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound, op = {
            "greater_than_equal": ("ge", ">="),
            "greater_than": ("gt", ">"),
            "less_than_equal": ("le", "<="),
            "less_than": ("lt", "<"),
        }[kind]
        return Problem(path, value, f"must be {op} {ctx.get(bound)}")
    if kind == "too_short":
        if loc == ("spec", "spouts"):
            return Problem(path, value, "a topology needs at least one spout")
        n = ctx.get("min_length")
        return Problem(path, value, f"must have at least {n} item{'s' if n != 1 else ''}")
    if kind == "string_too_long":
        return Problem(path, value, f"must be at most {ctx.get('max_length')} characters")
    if kind == "enum" and last == "grouping":
        known = ", ".join(g.value for g in Grouping)
        return Problem(path, value, f"unknown grouping (one of: {known})")
    if kind == "enum":
        return Problem(path, value, f"must be one of {ctx.get('expected')}")
    if kind == "literal_error":
        return Problem(path, value, f"must be {ctx.get('expected')}")
    if kind == "list_type" and last == "outputs":
        return Problem(
            path,
            value,
            "must be a list of streams, for example [{stream: default, fields: [word]}]",
        )
    if kind in _TYPE_MESSAGES:
        return Problem(path, value, _TYPE_MESSAGES[kind])
    message = str(err.get("msg", kind))
    message = message.replace("Input should be", "must be").replace("Value error, ", "")
    return Problem(path, value, message[:1].lower() + message[1:])


def _did_you_mean(loc: Sequence[int | str]) -> str:
    key = loc[-1] if loc else None
    model = _model_at(loc[:-1])
    if model is None or not isinstance(key, str):
        return ""
    names = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unwrap_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class of the object at `loc` inside a Topology, if the path leads to one."""
    tp: Any = Topology
    for item in loc:
        tp = _unwrap_optional(tp)
        if isinstance(item, int):
            if get_origin(tp) is not list:
                return None
            tp = get_args(tp)[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            for name, field in tp.model_fields.items():
                if item in (name, field.alias):
                    tp = field.annotation
                    break
            else:
                return None
        else:
            return None
    tp = _unwrap_optional(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


# --------------------------------------------------------------------------------------------
# Limits over the whole topology (the per-field ones sit in the models' fields)
# --------------------------------------------------------------------------------------------


def _config_path(base: str, key: str) -> str:
    return f"{base}.config[{key_repr(key)}]"


def limit_problems(topology: Topology) -> list[Problem]:
    """The limits no single field carries: components, executors and tasks of the whole
    topology, and the config keys Squall reads. Pure and linear in the topology's size; called
    before anything plans or allocates for the topology."""
    spec = topology.spec
    problems: list[Problem] = []
    located = [*((f"spec.spouts[{i}]", c) for i, c in enumerate(spec.spouts)),
               *((f"spec.bolts[{i}]", c) for i, c in enumerate(spec.bolts))]
    if len(located) > MAX_COMPONENTS:
        problems.append(Problem("spec.bolts", len(located),
                                f"spouts and bolts together are over the limit of {MAX_COMPONENTS} "
                                "components per topology"))
        return problems  # the totals below would only repeat it
    executors, tasks = spec.ackers, spec.ackers
    over_executors = over_tasks = False
    for base, component in located:
        executors += component.parallelism
        tasks += component.tasks
        if executors > MAX_EXECUTORS and not over_executors:
            over_executors = True
            problems.append(Problem(f"{base}.parallelism", component.parallelism,
                                    f"brings the topology to {executors} executors (ackers "
                                    f"included), over the limit of {MAX_EXECUTORS} per topology"))
        if tasks > MAX_TASKS and not over_tasks:
            over_tasks = True
            field = "numTasks" if component.num_tasks is not None else "parallelism"
            problems.append(Problem(f"{base}.{field}", component.tasks,
                                    f"brings the topology to {tasks} tasks (ackers included), "
                                    f"over the limit of {MAX_TASKS} per topology"))
    for base, config in [("spec", spec.config), *((b, c.config) for b, c in located)]:
        for key, value in config.items():
            message = config_value_problem(key, value)
            if message is not None:
                problems.append(Problem(_config_path(base, key), value, message))
    return problems




def rebalance_problem(topology: Topology, num_workers: int | None,
                      executors: Mapping[str, int] | None) -> str | None:
    """Why a rebalance of `topology` to `num_workers` workers and `executors` per component
    would take it past the limits a submitted topology keeps, or None. Ackers follow the worker
    count unless `numAckers` fixes them, so a rebalance can grow the executors without naming
    one. Every place that accepts a rebalance (the CLI verbs, the UI, nimbus's requests) asks
    this, so no path plans what a file could not ask for."""
    spec = topology.spec
    if num_workers is not None and not 1 <= num_workers <= MAX_WORKERS:
        return f"{num_workers} workers is outside 1..{MAX_WORKERS}"
    workers = num_workers if num_workers is not None else spec.num_workers
    total = spec.num_ackers if spec.num_ackers is not None else workers
    wanted = dict(executors or {})
    for component in spec.components:
        total += wanted.get(component.name, component.parallelism)
    if total > MAX_EXECUTORS:
        return (f"it would run {total} executors (ackers included), over the limit of "
                f"{MAX_EXECUTORS} per topology")
    return None


# --------------------------------------------------------------------------------------------
# Output streams
# --------------------------------------------------------------------------------------------


def normalize_outputs(declaration: object) -> list[StreamSpec]:
    """Output streams from a declaration in any of the accepted forms.

    - `None`, or an empty list or dict: no streams;
    - a list of field names: the "default" stream with those fields;
    - a dict stream name -> list of field names (or -> `StreamSpec`, or -> a mapping with
      `fields` and `direct`): one stream per entry;
    - a list of `StreamSpec` (or of mappings shaped like one).

    Raises `ValueError` (or `TypeError`) saying what is wrong with any other shape.
    """
    if declaration is None:
        return []
    if isinstance(declaration, (str, bytes)):
        raise TypeError(
            f"outputs must be a list of field names or a dict stream -> fields, "
            f"not the string {declaration!r}"
        )
    try:
        if isinstance(declaration, Mapping):
            return [_stream_entry(name, entry) for name, entry in declaration.items()]
        if not isinstance(declaration, (list, tuple)):
            raise TypeError(
                "outputs must be a list of field names or a dict stream -> fields, "
                f"not {type(declaration).__name__}"
            )
        items = list(declaration)
        if not items:
            return []
        if all(isinstance(i, str) for i in items):
            return [StreamSpec(stream=DEFAULT_STREAM, fields=items)]
        if all(isinstance(i, (StreamSpec, Mapping)) for i in items):
            return [i if isinstance(i, StreamSpec) else StreamSpec.model_validate(i) for i in items]
        raise TypeError(
            "outputs must be a list of field names (all strings) or a list of streams, "
            f"not {declaration!r}"
        )
    except ValidationError as exc:
        raise ValueError(
            "; ".join(str(_problem_from_pydantic(e)) for e in exc.errors())
        ) from None


def _stream_entry(name: object, entry: object) -> StreamSpec:
    if not isinstance(name, str):
        raise TypeError(f"stream names must be strings, not {name!r}")
    if isinstance(entry, StreamSpec):
        return entry if entry.stream == name else entry.model_copy(update={"stream": name})
    if isinstance(entry, Mapping):
        return StreamSpec.model_validate({**entry, "stream": name})
    if isinstance(entry, (list, tuple)) and all(isinstance(f, str) for f in entry):
        return StreamSpec(stream=name, fields=list(entry))
    raise TypeError(f"stream {name!r}: expected a list of field names, not {entry!r}")


def declared_streams(
    component: ComponentSpec, cls: type | None = None
) -> dict[str, StreamSpec]:
    """Every output stream a component declares, by name.

    The class's `outputs` attribute first (if a class is given), then the spec's `outputs`, a
    spec stream replacing the class's stream of the same name. Raises `ValueError`/`TypeError`
    for a malformed class declaration.
    """
    streams: dict[str, StreamSpec] = {}
    if cls is not None:
        for stream in normalize_outputs(getattr(cls, "outputs", None)):
            streams[stream.stream] = stream
    for stream in component.outputs or ():
        streams[stream.stream] = stream
    return streams


# --------------------------------------------------------------------------------------------
# Class resolution
# --------------------------------------------------------------------------------------------


def resolve_class(
    class_path: str, role: str | None = None, *, search_paths: Iterable[str | Path] = ()
) -> type:
    """Import `module:Class`, with `search_paths` on `sys.path` for the duration.

    `role` is "spout" (the class must have `next_tuple`), "bolt" (it must have `execute`),
    "custom grouping" (it must have `choose_tasks`) or None (any class). Raises `ImportError`
    with a message fit for a user.
    """
    with classload.importing(search_paths) as loader:
        return _resolve(loader, class_path, role)


# What each kind of class must have (duck typing: no base class required).
_ROLE_METHOD = {"spout": "next_tuple", "bolt": "execute", "custom grouping": "choose_tasks"}


def _resolve(loader: classload.ClassLoader, class_path: str, role: str | None) -> type:
    """`loader`'s object at `class_path`, if it is a class fit for `role` (see `resolve_class`);
    else `ImportError`."""
    obj = loader.load(class_path)
    if not isinstance(obj, type):
        raise ImportError(f"'{class_path}' is not a class (it is a {type(obj).__name__})")
    if role is not None:
        method = _ROLE_METHOD[role]
        if not callable(getattr(obj, method, None)):
            hint = ""
            for other, other_method in _ROLE_METHOD.items():
                if other != role and callable(getattr(obj, other_method, None)):
                    hint = f"; it looks like a {other}"
            raise ImportError(
                f"not a {role}: {obj.__name__} has no {method}() method{hint}"
            )
    return obj


# --------------------------------------------------------------------------------------------
# The whole-graph check
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ResolvedTopology:
    """A topology that passed `check_topology`.

    `classes`: component name -> its imported class (empty when classes were not resolved).
    `streams`: component name -> stream name -> `StreamSpec`, every declared output stream after
    merging the class's and the spec's declarations (the spec's alone when classes were not
    resolved).
    `serializers`: the user types of `topology.serializers` with their encoders and decoders,
    imported but not registered (the worker registers them).
    """

    topology: Topology
    classes: dict[str, type]
    streams: dict[str, dict[str, StreamSpec]]
    # `topology.serializers`, imported (empty when classes were not resolved)
    serializers: list[serialization.Registration] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return self.topology.name

    @property
    def components(self) -> dict[str, ComponentSpec]:
        return {c.name: c for c in self.topology.spec.components}


def check_topology(
    topo: Topology,
    *,
    resolve_classes: bool = True,
    search_paths: Iterable[str | Path] = (),
    source: str | None = None,
    before_import: Callable[[str, str], None] | None = None,
    loader: classload.ClassLoader | None = None,
) -> ResolvedTopology:
    """Check what the schema cannot: the graph, the groupings and the component classes.

    Raises `TopologyError` with every problem found (prefixed with `source` when given). With
    `resolve_classes`, each `class` (and each custom grouping's `customClass`) is loaded with
    `loader`, by default imported in this process with `search_paths` (typically the directory
    holding the topology file) put on `sys.path` first (`squall.classload`);
    `before_import(field_path, class_path)` is called before each. See `squall.classcheck` for
    the same check with the imports in a child process under a time limit.
    """
    # the limits first (squall.limits): nothing below runs for a topology past them
    if (over := limit_problems(topo)):
        raise TopologyError(over, source)
    if not resolve_classes:
        return _Checker(topo, None, before_import).run(source)
    if loader is not None:
        return _Checker(topo, loader, before_import).run(source)
    with classload.importing(search_paths) as imported:
        return _Checker(topo, imported, before_import).run(source)


class _Checker:
    def __init__(self, topo: Topology, loader: classload.ClassLoader | None,
                 before_import: Callable[[str, str], None] | None = None) -> None:
        self.topo = topo
        self.loader = loader
        self.resolve = loader is not None
        self.before_import = before_import
        self.problems: list[Problem] = []
        self.specs: dict[str, ComponentSpec] = {}
        self.classes: dict[str, type] = {}
        self.streams: dict[str, dict[str, StreamSpec]] = {}
        # Components whose declared streams are fully known: their class resolved. For the
        # others only the spec's streams are known, so a missing stream is not an error.
        self.complete: set[str] = set()

    def add(self, path: str, value: object, message: str) -> None:
        self.problems.append(Problem(path, value, message))

    def run(self, source: str | None) -> ResolvedTopology:
        spec = self.topo.spec
        first_use: dict[str, str] = {}
        located: list[tuple[str, ComponentSpec, str]] = [
            *((f"spec.spouts[{i}]", s, "spout") for i, s in enumerate(spec.spouts)),
            *((f"spec.bolts[{i}]", b, "bolt") for i, b in enumerate(spec.bolts)),
        ]
        for base, component, role in located:
            self.check_component(base, component, role, first_use)
        for i, bolt in enumerate(spec.bolts):
            self.check_window(f"spec.bolts[{i}]", bolt)
        for i, bolt in enumerate(spec.bolts):
            self.check_inputs(f"spec.bolts[{i}]", bolt)
        serializers = self.check_serializers()
        self.check_stateful(located)
        self.check_shell(located)
        self.check_reporters()
        for base, component, _role in located:
            if serialization.CONFIG_KEY in component.config:
                self.add(
                    f"{base}.config" + _format_loc([serialization.CONFIG_KEY]),
                    component.config[serialization.CONFIG_KEY],
                    "serializers are topology-wide: set them in spec.config",
                )
        if self.problems:
            raise TopologyError(self.problems, source)
        return ResolvedTopology(self.topo, self.classes, self.streams, serializers)

    def check_serializers(self) -> list[serialization.Registration]:
        """`topology.serializers`: its shape always; with `resolve`, its imports too."""
        config = self.topo.spec.config
        if serialization.CONFIG_KEY not in config:
            return []
        value = config[serialization.CONFIG_KEY]
        base = ["spec", "config", serialization.CONFIG_KEY]
        problems = serialization.check_config(value)
        for key, message in problems:
            path = [*base, key] if key else base
            self.add(_format_loc(path), value.get(key, NO_VALUE) if key and isinstance(value, Mapping) else value, message)
        if problems or not self.resolve:
            return []
        out: list[serialization.Registration] = []
        for key, spec in value.items():
            try:
                out.extend(serialization.resolve_config({key: spec}, self.loader))
            except serialization.SerializationError as exc:
                self.add(_format_loc([*base, key]), spec, str(exc).removeprefix(f"{key}: "))
        return out

    def check_stateful(self, located: list[tuple[str, ComponentSpec, str]]) -> None:
        """Stateful components (squall.checkpoint): `stateful` agrees with the class, the
        checkpoints need ackers, the state provider settings make sense."""
        from squall import statebackend
        from squall.components import StatefulBolt, StatefulSpout, StatefulWindowedBolt

        for base, component, role in located:
            cls = self.classes.get(component.name)
            if cls is None:
                continue
            want: type = StatefulSpout if role == "spout" else StatefulBolt
            if role == "bolt" and issubclass(cls, StatefulWindowedBolt):
                want = StatefulWindowedBolt
            is_stateful = issubclass(cls, want)
            if is_stateful and not component.stateful:
                self.add(f"{base}.stateful", NO_VALUE,
                         f"{cls.__name__} is a {want.__name__}: declare the component `stateful: true`")
            elif component.stateful and not is_stateful:
                self.add(f"{base}.stateful", True,
                         f"{cls.__name__} is not a {want.__name__} (squall.{want.__name__})")
        spec = self.topo.spec
        if not any(c.stateful for c in spec.components):
            return
        if spec.ackers == 0:
            self.add("spec.numAckers", 0, "stateful components need ackers: checkpoints are tuple trees")
        config = spec.config
        for key, message in statebackend.config_problems(config):
            top = key if key in config else next((k for k in config if key.startswith(k + ".")), key)
            rest = key[len(top) + 1:].split(".") if key != top else []
            self.add(_format_loc(["spec", "config", top, *rest]), config.get(top, NO_VALUE), message)

    def check_reporters(self) -> None:
        """`topology.metrics.reporters` (squall.metricreporters): Storm's reporter list."""
        from squall import metricreporters

        config = self.topo.spec.config
        if metricreporters.CONFIG_KEY not in config:
            return
        value = config[metricreporters.CONFIG_KEY]
        for key, message in metricreporters.parse(value)[1]:
            self.add("spec.config" + _format_loc([metricreporters.CONFIG_KEY]) + key, value, message)

    def check_shell(self, located: list[tuple[str, ComponentSpec, str]]) -> None:
        """Shell components (squall.multilang): the multilang settings, and with `resolve` a
        class that is a ShellBolt / ShellSpout and files the workers will find."""
        from squall.multilang import serializers as ml_serializers
        from squall.multilang.shell import TIMEOUT_CONFIG, ShellBolt, ShellSpout, find_file

        def settings(config: Mapping[str, Any], prefix: str) -> None:
            if ml_serializers.CONFIG_KEY in config:
                try:
                    ml_serializers.serializer_for(config[ml_serializers.CONFIG_KEY])
                except ValueError as exc:
                    self.add(prefix + _format_loc([ml_serializers.CONFIG_KEY]), config[ml_serializers.CONFIG_KEY],
                             str(exc).split(": ", 1)[1])
            raw = config.get(TIMEOUT_CONFIG)
            if raw is not None and (isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw > 0
                                    or raw == float("inf")):
                self.add(prefix + _format_loc([TIMEOUT_CONFIG]), raw, "expected a positive number of seconds")

        settings(self.topo.spec.config, "spec.config")
        for base, component, role in located:
            if component.shell is None:
                continue
            settings(component.config, f"{base}.config")
            cls = self.classes.get(component.name)
            want: type = ShellSpout if role == "spout" else ShellBolt
            if cls is not None and not issubclass(cls, want):
                self.add(f"{base}.class", component.class_name,
                         f"a component with `shell` runs squall.multilang:{want.__name__} or a subclass of it")
            if not self.resolve:
                continue
            for k, name in enumerate(component.shell.files):
                if find_file(name) is None:
                    self.add(f"{base}.shell.files[{k}]", name,
                             "not found in the topology's directory or the code directories (sys.path)")

    # -- components ---------------------------------------------------------------------------

    def check_component(
        self, base: str, component: ComponentSpec, role: str, first_use: dict[str, str]
    ) -> None:
        name = component.name
        if name.startswith(RESERVED_PREFIX):
            self.add(
                f"{base}.name",
                name,
                f"names starting with '{RESERVED_PREFIX}' are reserved for system components",
            )
        elif name in first_use:
            self.add(
                f"{base}.name",
                name,
                f"duplicate component name (first used at {first_use[name]}); "
                "spouts and bolts share one namespace",
            )
        else:
            first_use[name] = f"{base}.name"
            self.specs[name] = component

        if component.num_tasks is not None and component.parallelism > component.num_tasks:
            self.add(
                f"{base}.numTasks",
                component.num_tasks,
                f"parallelism {component.parallelism} > numTasks {component.num_tasks}; "
                "every executor needs at least one task",
            )

        self.check_spec_outputs(base, component)

        cls: type | None = None
        if self.loader is not None:
            try:
                if self.before_import is not None:
                    self.before_import(f"{base}.class", component.class_name)
                cls = _resolve(self.loader, component.class_name, role)
            except ImportError as exc:
                self.add(f"{base}.class", component.class_name, str(exc))
        if name not in self.specs or self.specs[name] is not component:
            return  # a duplicate or reserved name: its streams would shadow the first one's
        try:
            streams = declared_streams(component, cls)
        except (TypeError, ValueError) as exc:
            self.add(f"{base}.class", component.class_name, f"invalid outputs declaration: {exc}")
            streams = declared_streams(component, None)
            cls = None
        if cls is not None:
            self.classes[name] = cls
            self.complete.add(name)
            self.check_class_outputs(base, component, cls)
        self.streams[name] = streams

    def check_spec_outputs(self, base: str, component: ComponentSpec) -> None:
        seen: set[str] = set()
        for k, stream in enumerate(component.outputs or ()):
            path = f"{base}.outputs[{k}]"
            if stream.stream.startswith(RESERVED_PREFIX):
                self.add(
                    f"{path}.stream",
                    stream.stream,
                    f"stream names starting with '{RESERVED_PREFIX}' are reserved for system "
                    "streams",
                )
            elif stream.stream in seen:
                self.add(f"{path}.stream", stream.stream, "stream declared twice")
            seen.add(stream.stream)
            self.check_fields_unique(path, stream)

    def check_class_outputs(self, base: str, component: ComponentSpec, cls: type) -> None:
        overridden = {s.stream for s in component.outputs or ()}
        for stream in normalize_outputs(getattr(cls, "outputs", None)):
            if stream.stream in overridden:
                continue
            where = f"{base}.class"
            if stream.stream.startswith(RESERVED_PREFIX):
                self.add(
                    where,
                    component.class_name,
                    f"declares stream '{stream.stream}'; stream names starting with "
                    f"'{RESERVED_PREFIX}' are reserved for system streams",
                )
            dupes = _duplicates(stream.fields)
            if dupes:
                self.add(
                    where,
                    component.class_name,
                    f"stream '{stream.stream}' declares field(s) twice: {_listing(dupes)}",
                )

    def check_fields_unique(self, path: str, stream: StreamSpec) -> None:
        seen: set[str] = set()
        for m, field in enumerate(stream.fields):
            if field in seen:
                self.add(f"{path}.fields[{m}]", field, f"field declared twice in stream "
                         f"'{stream.stream}'")
            seen.add(field)

    # -- windows (squall.windowing) ----------------------------------------------------------

    def check_window(self, base: str, bolt: BoltSpec) -> None:
        """A windowed bolt's `window`: present exactly for WindowedBolt classes, sizes that make
        sense, a timestamp field every input declares, a window the message timeout outlasts.
        Declares the late stream (fields tuple, reason) on the bolt."""
        cls = self.classes.get(bolt.name) if self.specs.get(bolt.name) is bolt else None
        windowed = cls is not None and issubclass(cls, WindowedBolt)
        window = bolt.window
        path = f"{base}.window"
        if window is None:
            if windowed:
                self.add(path, NO_VALUE, f"{bolt.class_name} is a WindowedBolt: declare its window "
                         "(window.windowLength, optionally slidingInterval, timestampField, ...)")
            return
        if cls is not None and not windowed:
            self.add(path, window.model_dump(by_alias=True, exclude_none=True),
                     f"{bolt.class_name} is not a WindowedBolt; only windowed bolts take a window")
        fields = window.model_dump(by_alias=True, exclude_none=True)
        bad = False
        for field, value in fields.items():
            try:
                if field in ("windowLength", "slidingInterval"):
                    windowing.Size.of(value)
                elif field in ("lag", "watermarkInterval"):
                    windowing.parse_duration(value, allow_zero=field == "lag")
            except ValueError as exc:
                self.add(f"{path}.{field}", value, str(exc))
                bad = True
        if bad:
            return
        config = windowing.WindowConfig.from_spec(fields)
        length, sliding = config.length, config.sliding
        if window.sliding_interval is not None and length.count == sliding.count and sliding.value > length.value:
            self.add(f"{path}.slidingInterval", window.sliding_interval,
                     f"the sliding interval ({sliding}) is longer than the window ({length}); "
                     "tuples between windows would be in none")
        if not config.event_time:
            for field, value in (("lag", window.lag), ("watermarkInterval", window.watermark_interval),
                                 ("lateStream", window.late_stream)):
                if value is not None:
                    self.add(f"{path}.{field}", value,
                             f"{field} applies to event-time windows only: set timestampField")
        spec = self.topo.spec
        hold = config.max_hold_secs()
        if hold is not None and hold >= spec.message_timeout_secs:
            parts = "windowLength + slidingInterval"
            if config.event_time:
                parts += " + lag + watermarkInterval"
            self.add(f"{path}.windowLength", window.window_length,
                     f"a tuple can stay {hold:g}s in this window ({parts}), not less than "
                     f"spec.messageTimeoutSecs ({spec.message_timeout_secs:g}s): it would time out "
                     "and be replayed; raise messageTimeoutSecs or shorten the window")
        counts = sum(int(s.value) for s in (length, sliding) if s.count)
        if counts and spec.max_spout_pending is not None:
            pending = spec.max_spout_pending * sum(s.tasks for s in spec.spouts)
            if counts > pending:
                self.add(f"{path}.windowLength", window.window_length,
                         f"the window waits for {counts} tuples (length + sliding interval), more "
                         f"than the spouts may have pending (maxSpoutPending x spout tasks = "
                         f"{pending}): it would never fill")
        if config.timestamp_field is not None:
            for j, inp in enumerate(bolt.inputs):
                stream = self.streams.get(inp.component, {}).get(inp.stream)
                if stream is not None and config.timestamp_field not in stream.fields:
                    self.add(f"{path}.timestampField", config.timestamp_field,
                             f"inputs[{j}] (stream '{inp.stream}' of '{inp.component}') has no field "
                             f"'{printable(config.timestamp_field)}' (fields: {_listing(stream.fields)})")
        late = config.late_stream
        if late is not None and late.startswith(RESERVED_PREFIX):
            self.add(f"{path}.lateStream", late,
                     f"stream names starting with '{RESERVED_PREFIX}' are reserved for system streams")
        elif late is not None and self.specs.get(bolt.name) is bolt:
            streams = self.streams.setdefault(bolt.name, {})
            declared = streams.get(late)
            if declared is None:
                streams[late] = StreamSpec(stream=late, fields=list(windowing.LATE_FIELDS))
            elif tuple(declared.fields) != windowing.LATE_FIELDS or declared.direct:
                self.add(f"{path}.lateStream", late,
                         f"'{bolt.name}' declares stream '{late}' with fields "
                         f"{_listing(declared.fields)}; a late stream carries "
                         f"{', '.join(windowing.LATE_FIELDS)} (leave it undeclared)")

    # -- inputs -------------------------------------------------------------------------------

    def check_inputs(self, base: str, bolt: BoltSpec) -> None:
        subscribed: dict[tuple[str, str], int] = {}
        for j, inp in enumerate(bolt.inputs):
            path = f"{base}.inputs[{j}]"
            self.check_grouping_args(path, inp)
            if inp.component not in self.specs:
                known = _listing(sorted(self.specs))
                self.add(f"{path}.component", inp.component, f"unknown component (known: {known})")
                continue
            key = (inp.component, inp.stream)
            if key in subscribed:
                self.add(
                    f"{path}.stream",
                    inp.stream,
                    f"'{bolt.name}' already subscribes to stream '{inp.stream}' of "
                    f"'{inp.component}' (inputs[{subscribed[key]}]); subscribe once per stream",
                )
                continue
            subscribed[key] = j
            self.check_stream(path, inp)

    def check_grouping_args(self, path: str, inp: InputSpec) -> None:
        grouping = inp.grouping
        if grouping in _FIELD_GROUPINGS:
            if not inp.fields:
                self.add(
                    f"{path}.fields",
                    inp.fields,
                    f"{grouping.value} grouping needs fields (the fields to group by)",
                )
        elif inp.fields is not None:
            self.add(
                f"{path}.fields",
                inp.fields,
                f"{grouping.value} grouping takes no fields; only fields and partialKey "
                "groupings do",
            )
        if grouping is Grouping.CUSTOM:
            if inp.custom_class is None:
                self.add(
                    f"{path}.customClass",
                    NO_VALUE,
                    "custom grouping needs customClass ('module:Class')",
                )
            elif self.loader is not None:
                try:
                    if self.before_import is not None:
                        self.before_import(f"{path}.customClass", inp.custom_class)
                    _resolve(self.loader, inp.custom_class, "custom grouping")
                except ImportError as exc:
                    self.add(f"{path}.customClass", inp.custom_class, str(exc))
        elif inp.custom_class is not None:
            self.add(
                f"{path}.customClass",
                inp.custom_class,
                f"only custom grouping takes customClass (this input's grouping is "
                f"{grouping.value})",
            )

    def check_stream(self, path: str, inp: InputSpec) -> None:
        source = inp.component
        streams = self.streams.get(source, {})
        stream = streams.get(inp.stream)
        if stream is None:
            if source in self.complete:
                declared = _listing(sorted(streams), "")
                what = f"declared: {declared}" if declared else "it declares no output streams"
                self.add(
                    f"{path}.stream",
                    inp.stream,
                    f"'{source}' declares no stream '{inp.stream}' ({what})",
                )
            return
        if inp.grouping in _FIELD_GROUPINGS and inp.fields:
            # a set, and a bounded list in each message: time and memory stay linear in the
            # fields however many are named and declared (before: every problem joined every
            # declared field, 511 MB for 5,000 x 5,000)
            declared_fields = set(stream.fields)
            available = _listing(stream.fields)
            suggest = len(stream.fields) <= _SUGGEST_AMONG
            for k, field in enumerate(inp.fields):
                if field not in declared_fields:
                    close = difflib.get_close_matches(field, stream.fields, n=1) if suggest else []
                    hint = f"; did you mean '{printable(close[0])}'?" if close else ""
                    self.add(
                        f"{path}.fields[{k}]",
                        field,
                        f"stream '{inp.stream}' of '{source}' has no field '{printable(field)}' "
                        f"(fields: {available}){hint}",
                    )
        if inp.grouping is Grouping.DIRECT and not stream.direct:
            self.add(
                f"{path}.grouping",
                inp.grouping,
                f"stream '{inp.stream}' of '{source}' is not declared direct; direct grouping "
                "needs a direct stream",
            )
        elif inp.grouping is not Grouping.DIRECT and stream.direct:
            self.add(
                f"{path}.grouping",
                inp.grouping,
                f"stream '{inp.stream}' of '{source}' is direct; subscribe to it with direct "
                "grouping",
            )


# names listed in one message (fields, streams, components); the rest are counted
_LISTED = 10
# a close match is suggested among at most this many names (difflib compares each)
_SUGGEST_AMONG = 100


def _listing(names: Sequence[str], empty: str = "none") -> str:
    """At most `_LISTED` names, printable and cut short, then how many more: a message costs
    the same however many names there are."""
    shown = ", ".join(printable(name, 40) for name in names[:_LISTED]) or empty
    more = len(names) - _LISTED
    return f"{shown}, ... ({more} more)" if more > 0 else shown


def _duplicates(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    dupes: dict[str, None] = {}  # in order, each once
    for item in items:
        if item in seen:
            dupes[item] = None
        seen.add(item)
    return list(dupes)


def validate_file(path: str | Path, *, resolve_classes: bool = True) -> ResolvedTopology:
    """Load and check a topology file, importing classes from the file's directory."""
    topo = load_topology(path)
    return check_topology(
        topo,
        resolve_classes=resolve_classes,
        search_paths=(Path(path).parent,),
        source=str(path),
    )
