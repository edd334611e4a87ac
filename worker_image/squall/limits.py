"""What a topology may ask for: the one set of limits `squall validate`, `squall run`, `squall
build`, the operator and the CRD apply (docs/topology.md, "Limits").

Storm bounds a topology when it is submitted (`nimbus.executors.perTopology`, the Thrift frame
that carries it, the type of each config key it reads: `ConfigValidation`); Squall does it where
the topology is read, so that a file `squall validate` accepts is one `squall run` and the
operator can start, and a file past a limit is refused with its field path and the limit before
anything is planned, stored or started. Storm has no defaults for most of these; the values here
are what one worker process and one ZooKeeper node can hold, with room to spare:

- the per-field limits sit in the models' fields (`squall.models.v1alpha1`), so the CRD generated
  from them carries them (`maximum`, `maxItems`) and `kubectl apply` refuses too;
- the rest are checked on a validated `Topology` by `squall.validation.limit_problems` (totals
  over the topology and the types of the config keys Squall reads, with `config_value_problem`)
  and `squall.validation.rebalance_problem`; the size of the topology's JSON form and the
  JSON-ness of every value are checked by `parse_topology` on the document itself, before
  pydantic builds anything.

Constants, not settings: a limit that one process could raise would let `squall validate`
accept what the operator refuses. Pure: imports nothing of Squall but its errors, so the models
can carry these limits in their fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final

from squall.errors import printable

__all__ = [
    "CONFIG_KEYS",
    "FIELD_LIMITS",
    "MAX_COMPONENTS",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_EXECUTORS",
    "MAX_FIELDS_PER_STREAM",
    "MAX_KEY_CHARS",
    "MAX_NODES",
    "MAX_SECONDS",
    "MAX_SPOUT_PENDING",
    "MAX_STREAMS_PER_COMPONENT",
    "MAX_TASKS",
    "MAX_TASKS_PER_COMPONENT",
    "MAX_TOPOLOGY_BYTES",
    "MAX_WORKERS",
    "config_value_problem",
    "key_repr",
    "string_json_bytes",
]

# --- the document -----------------------------------------------------------------------------

# A Topology is a Kubernetes object, and the API server keeps at most about 1.5 MiB per object.
MAX_DOCUMENT_BYTES: Final = 1 << 20
# Collections inside collections; YAML aliases count with what they stand for.
MAX_DEPTH: Final = 100
# Values (scalars and collections), each YAML alias counting as the whole value it stands for.
MAX_NODES: Final = 100_000
# The topology's JSON form (what nimbus stores in ZooKeeper, aliases expanded): ZooKeeper keeps
# at most 1 MiB per node (`jute.maxbuffer`), and the node also holds nimbus's own fields.
MAX_TOPOLOGY_BYTES: Final = 768 << 10

# --- the topology's size ----------------------------------------------------------------------

# spouts and bolts together. A worker's routing grows with components x executors (measured:
# 1.9 GB resident at 5,000 components); at 500 it stays near 20 MB.
MAX_COMPONENTS: Final = 500
# `numTasks` (or `parallelism` without it) of one component: each task is an instance of the
# component's class with its context and collector in some worker.
MAX_TASKS_PER_COMPONENT: Final = 10_000
# every task of the topology, the ackers' included
MAX_TASKS: Final = 20_000
# executors (threads) of the whole topology, ackers included: every executor is a thread, an
# entry of the assignment and of its worker's heartbeat (a ZooKeeper node of at most 1 MiB each).
# It also bounds one component's `parallelism` and `numAckers`. Storm: `nimbus.executors.perTopology`.
MAX_EXECUTORS: Final = 1_000
# `numWorkers` (Storm: `nimbus.slots.perTopology`)
MAX_WORKERS: Final = 1_000
# output streams one component declares
MAX_STREAMS_PER_COMPONENT: Final = 100
# fields of one stream, and fields one grouping names
MAX_FIELDS_PER_STREAM: Final = 1_000
# `maxSpoutPending`: tuples in flight per spout task, each held in memory until acked
MAX_SPOUT_PENDING: Final = 1_000_000
# every duration in seconds (messageTimeoutSecs, killWaitSecs, ..., the config's *.secs): a day
MAX_SECONDS: Final = 86_400

# what a refusal of each bounded field says: the field's name (its alias, the last part of the
# path) -> the unit of its limit ("over the limit of 10000 tasks per component")
FIELD_LIMITS: Final[Mapping[str, str]] = {
    "numTasks": "tasks per component",
    "parallelism": "executors per component (and per topology, ackers included)",
    "numAckers": "ackers (executors)",
    "numWorkers": "workers",
    "maxSpoutPending": "pending tuples per spout task",
    "messageTimeoutSecs": "seconds",
    "tickTupleFreqSecs": "seconds",
    "killWaitSecs": "seconds",
    "rebalanceWaitSecs": "seconds",
    "spouts": "components (spouts and bolts together)",
    "bolts": "components (spouts and bolts together)",
    "outputs": "streams per component",
    "fields": "fields per stream",
}


# --- config keys Squall reads -------------------------------------------------------------------


def _finite(value: object) -> float | None:
    """`value` as a finite number, or None if it is not one (a bool, a string, inf, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None


def _seconds(value: object) -> str | None:
    number = _finite(value)
    if number is None or number <= 0:
        return "must be a positive number of seconds (like 1 or 0.5, not a string)"
    if number > MAX_SECONDS:
        return f"is over the limit of {MAX_SECONDS} seconds"
    return None


def _seconds_or_null(value: object) -> str | None:
    return None if value is None else _seconds(value)


def _boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _ratio(value: object) -> str | None:
    number = _finite(value)
    return "must be a number, at least 0" if number is None or number < 0 else None


def _count(limit: int, *, null: bool = False) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return "must be a positive integer" + (" or null" if null else "")
        if value > limit:
            return f"is over the limit of {limit}"
        return None

    return check


def _string(value: object) -> str | None:
    return None if isinstance(value, str) else "must be a string"


# The config keys the runtime reads (docs/topology.md, "Config keys the runtime reads"), in
# `spec.config` or a component's `config`, each with its check: Storm's `ConfigValidation`. A
# value of the wrong type would otherwise pass `squall validate` and stop every worker at its
# start (`topology.tick.tuple.freq.secs: 1s`). `topology.serializers` and `topology.state.*`
# have their own checks (squall.serialization, squall.statebackend).
CONFIG_KEYS: Final[Mapping[str, Callable[[object], str | None]]] = {
    # null: no tick tuples
    "topology.tick.tuple.freq.secs": _seconds_or_null,
    "worker.heartbeat.frequency.secs": _seconds,
    "task.refresh.poll.secs": _seconds,
    "worker.switch.interval.secs": _seconds,
    "worker.loop.warn.secs": _seconds,
    # 0: never move a slow executor to a thread of its own
    "worker.loop.isolate.secs": _ratio,
    "squall.executor.isolated": _boolean,
    "topology.message.timeout.secs": _seconds,
    "topology.disable.loadaware.messaging": _boolean,
    "topology.localityaware.higher.bound": _ratio,
    "topology.localityaware.lower.bound": _ratio,
    "topology.localityaware.cpu": _boolean,
    "topology.localityaware.trace": _boolean,
    "topology.max.spout.pending": _count(MAX_SPOUT_PENDING, null=True),
    "topology.workers": _count(MAX_WORKERS),
    "topology.name": _string,
}


def config_value_problem(key: str, value: object) -> str | None:
    """What is wrong with `value` for the config key `key`, or None (also for keys Squall does
    not read: those are the components' own)."""
    check = CONFIG_KEYS.get(key)
    return None if check is None else check(value)


# --- totals -----------------------------------------------------------------------------------


# a mapping key shown in a field path: longer ones are cut
MAX_KEY_CHARS: Final = 80


def key_repr(key: str) -> str:
    """A mapping key as a path shows it (`'topology.tick.tuple.freq.secs'`): quoted, escaped,
    and cut after `MAX_KEY_CHARS` characters, whatever its length."""
    if len(key) > MAX_KEY_CHARS:
        return printable(repr(key[:MAX_KEY_CHARS]), None) + "..."
    return printable(repr(key), None)


def string_json_bytes(value: str) -> int:
    """Bytes of a string as pydantic's `model_dump_json` writes it (UTF-8, control characters,
    quotes and backslashes escaped), the quotes included; no copy of an ASCII string is made."""
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return len(value) + 2
    extra = sum(value.count(c) for c in '"\\')
    extra += sum(5 for c in value if c < " ")
    return len(value.encode("utf-8", "surrogatepass")) + extra + 2
