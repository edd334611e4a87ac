"""The event inspector (Storm's `storm debug` and the UI's "Debug" switch, its event logger):
which components have the tuples they emit sampled, for how long, and the sampling itself.

A topology's sampling config maps a component (or `*`: every component) to a setting, stored by
the CLI (`squall debug NAME [COMPONENT] --sample PCT`) in ZooKeeper, read by every worker:

    {"split": {"pct": 10.0, "expires": 1795803000.0}, "*": {"pct": 1.0, "expires": null}}

A component's own setting wins over `*`. A setting lapses at `expires` (Unix time; None: until
turned off). Sampling is deterministic, one tuple in round(100 / pct) per executor, so 100%
records every emit and 1% one in a hundred. What is sampled (values, stream, task, message id)
goes into a bounded buffer per worker, which the worker publishes with its heartbeat.

Off by default and cheap when off: an emit checks one attribute (`Executor.sampler is None`).

Pure: plain values and an injected time.
"""

from __future__ import annotations

import math
import reprlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "ALL",
    "KEPT",
    "MAX_SECS",
    "PUBLISHED",
    "Sampler",
    "SamplingError",
    "merge",
    "next_change",
    "parse_config",
    "pct_for",
]

ALL: Final = "*"
# sampled tuples a worker keeps (the newest), and publishes with its heartbeat
KEPT: Final = 1000
PUBLISHED: Final = 200
# a sampled value's text at most (a tuple's values are shown, not stored)
VALUE_CHARS: Final = 300
MAX_SECS: Final = 7 * 24 * 3600.0
MAX_COMPONENTS: Final = 1000

_repr = reprlib.Repr()
_repr.maxstring = VALUE_CHARS
_repr.maxother = VALUE_CHARS
_repr.maxlist = 20
_repr.maxdict = 20


class SamplingError(ValueError):
    """A sampling setting that cannot be used, with what is wrong in one line."""


def _pct(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= 100:
        raise SamplingError(f"{where}: the sample percentage must be a number above 0 and at most 100 "
                            f"(got {value!r})")
    return float(value)


def parse_config(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A stored config, checked: component -> {"pct": float, "expires": float | None}."""
    if len(raw) > MAX_COMPONENTS:
        raise SamplingError(f"the sampling config names {len(raw)} components; at most {MAX_COMPONENTS}")
    out: dict[str, dict[str, Any]] = {}
    for comp, setting in raw.items():
        if not isinstance(comp, str) or not comp:
            raise SamplingError(f"a sampling setting's component must be a name or {ALL!r} (got {comp!r})")
        if not isinstance(setting, Mapping):
            raise SamplingError(f"{comp}: a sampling setting is {{pct, expires}} (got {setting!r})")
        expires = setting.get("expires")
        if expires is not None and (isinstance(expires, bool) or not isinstance(expires, (int, float))
                                    or not math.isfinite(expires)):
            raise SamplingError(f"{comp}: expires must be a Unix time or null (got {expires!r})")
        out[comp] = {"pct": _pct(setting.get("pct"), comp),
                     "expires": None if expires is None else float(expires)}
    return out


def merge(config: Mapping[str, Mapping[str, Any]], component: str | None, pct: float | None,
          secs: float | None, now: float) -> dict[str, dict[str, Any]]:
    """`config` with one component's (None: every component's, `*`) sampling set to `pct` for
    `secs` seconds (None: until turned off), or turned off (`pct` None). Lapsed settings go."""
    key = component or ALL
    out = {c: dict(s) for c, s in config.items() if s.get("expires") is None or s["expires"] > now}
    if pct is None:
        out.pop(key, None)
        return out
    if secs is not None and (not math.isfinite(secs) or not 0 < secs <= MAX_SECS):
        raise SamplingError(f"the sampling time must be above 0 and at most {MAX_SECS:.0f} seconds (got {secs!r})")
    out[key] = {"pct": _pct(pct, key), "expires": None if secs is None else now + secs}
    return out


def pct_for(config: Mapping[str, Mapping[str, Any]], component: str, now: float) -> float:
    """The percentage of `component`'s emits sampled at `now` (0: none)."""
    for key in (component, ALL):
        s = config.get(key)
        if s is not None and (s.get("expires") is None or s["expires"] > now):
            return float(s["pct"])
    return 0.0


def next_change(config: Mapping[str, Mapping[str, Any]], now: float) -> float | None:
    """When the next setting lapses (None: none will)."""
    times = [s["expires"] for s in config.values() if s.get("expires") is not None and s["expires"] > now]
    return min(times) if times else None


class Sampler:
    """One executor's sampling: every `every`-th emit of its tasks goes into `sink` as
    (time, component, task, stream, message id, values), the values as text. Called on the
    executor's own thread; `sink` is a bounded deque shared by the worker's executors (its
    append is atomic)."""

    __slots__ = ("every", "n", "component", "sink", "clock", "pct")

    def __init__(self, pct: float, component: str, sink: deque[tuple[Any, ...]],
                 clock: Callable[[], float]) -> None:
        self.pct = pct
        self.every = max(1, round(100.0 / pct))
        self.n = 0
        self.component = component
        self.sink = sink
        self.clock = clock

    def offer(self, task: int, stream: str, values: Sequence[Any], msg_id: Any = None) -> None:
        self.n += 1
        if self.n < self.every:
            return
        self.n = 0
        self.sink.append((self.clock(), self.component, task, stream,
                          None if msg_id is None else _repr.repr(msg_id), [_repr.repr(v) for v in values]))
