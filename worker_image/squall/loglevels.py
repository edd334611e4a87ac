"""Dynamic log levels (Storm's `storm set_log_level`): a topology's log config, and what a worker
makes of it.

The log config of a topology is a mapping logger -> setting, stored by the CLI (directly in
ZooKeeper on a local cluster; through an annotation the operator copies on Kubernetes) and
applied by every worker of the topology when it changes:

    {"ROOT": {"level": "DEBUG", "expires": 1795803000.0},
     "squall.executor": {"level": "INFO", "expires": null}}

`ROOT` is the root logger (Storm's name for it; Python's is ""). A level is one of Storm's (log4j)
names, which map to Python's levels (`TRACE` is 5, `OFF` is above `CRITICAL`); `expires` is when
the setting lapses (Unix time): the worker then gives the logger back the level it had before the
first setting, as Storm's `reset_log_level` does. A setting removed from the config (`-r LOGGER`)
resets its logger at once.

Pure: plain values and an injected time, no logging calls. The worker's side (squall.worker
.runtime) hands `plan` the config, the time and the levels it changed, and applies what comes back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "LEVELS",
    "MAX_LOGGERS",
    "MAX_TIMEOUT_SECS",
    "ROOT",
    "LogLevelError",
    "Plan",
    "merge",
    "parse_config",
    "parse_setting",
    "plan",
    "python_level",
]

ROOT: Final = "ROOT"
# Storm's (log4j's) level names -> Python's levels; Python's own names are accepted too
LEVELS: Final[Mapping[str, int]] = {
    "ALL": 1, "TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "WARNING": 30, "ERROR": 40,
    "FATAL": 50, "CRITICAL": 50, "OFF": 100,
}
MAX_LOGGERS: Final = 100  # settings per topology
MAX_TIMEOUT_SECS: Final = 7 * 86400
_LOGGER = re.compile(r"^[A-Za-z_][\w.\-]{0,199}$")


class LogLevelError(ValueError):
    """A setting or a stored config that cannot be used, said in one line."""


def python_level(name: str) -> int:
    try:
        return LEVELS[name.upper()]
    except KeyError:
        raise LogLevelError(f"unknown log level {name!r} (one of {', '.join(LEVELS)})") from None


def _logger(name: str) -> str:
    if name != ROOT and not _LOGGER.match(name):
        raise LogLevelError(f"{name!r} is not a logger name (ROOT, or a dotted name like squall.executor)")
    return name


def parse_setting(text: str) -> tuple[str, str, float | None]:
    """`LOGGER=LEVEL[:TIMEOUT_SECS]` (Storm's `-l` syntax, e.g. `ROOT=DEBUG:30`) -> (logger, level,
    timeout or None)."""
    logger, sep, rest = text.partition("=")
    if not sep or not logger or not rest:
        raise LogLevelError(f"{text!r}: expected LOGGER=LEVEL[:TIMEOUT_SECS], e.g. ROOT=DEBUG:30")
    level, colon, timeout = rest.partition(":")
    python_level(level)
    secs: float | None = None
    if colon:
        try:
            secs = float(timeout)
        except ValueError:
            raise LogLevelError(f"{text!r}: the timeout {timeout!r} is not a number of seconds") from None
        if not (math.isfinite(secs) and 0 < secs <= MAX_TIMEOUT_SECS):
            raise LogLevelError(f"{text!r}: the timeout must be above 0 and at most {MAX_TIMEOUT_SECS} seconds")
    return _logger(logger), level.upper(), secs


def parse_config(raw: Any) -> dict[str, dict[str, Any]]:
    """A stored config, checked: logger -> {"level": NAME, "expires": float | None}."""
    if not isinstance(raw, Mapping):
        raise LogLevelError("a log config is an object of logger -> {level, expires}")
    if len(raw) > MAX_LOGGERS:
        raise LogLevelError(f"a log config holds at most {MAX_LOGGERS} loggers, not {len(raw)}")
    out: dict[str, dict[str, Any]] = {}
    for logger, setting in raw.items():
        if not isinstance(logger, str) or not isinstance(setting, Mapping):
            raise LogLevelError(f"log config entry {logger!r}: expected an object with level and expires")
        level = setting.get("level")
        expires = setting.get("expires")
        if not isinstance(level, str):
            raise LogLevelError(f"log config entry {logger!r}: no level")
        python_level(level)
        if expires is not None and (isinstance(expires, bool) or not isinstance(expires, (int, float))
                                    or not math.isfinite(expires)):
            raise LogLevelError(f"log config entry {logger!r}: expires must be a time or null")
        out[_logger(logger)] = {"level": level.upper(), "expires": None if expires is None else float(expires)}
    return out


def merge(config: Mapping[str, Mapping[str, Any]], settings: list[tuple[str, str, float | None]],
          remove: list[str], now: float) -> dict[str, dict[str, Any]]:
    """The config after `settings` (from `parse_setting`, timeouts counted from `now`) and the
    removal of `remove`'s loggers; settings that already expired are dropped."""
    out = {k: dict(v) for k, v in parse_config(config).items()
           if v.get("expires") is None or v["expires"] > now}
    for logger in remove:
        out.pop(_logger(logger), None)
    for logger, level, timeout in settings:
        out[logger] = {"level": level, "expires": None if timeout is None else now + timeout}
    if len(out) > MAX_LOGGERS:
        raise LogLevelError(f"a log config holds at most {MAX_LOGGERS} loggers")
    return out


@dataclass(frozen=True)
class Plan:
    """What a worker does now: loggers to set (logger -> Python level), loggers to give back
    their level from before (logger -> that level), and when to look again (Unix time; None:
    only when the config changes)."""

    set: dict[str, int]
    reset: dict[str, int]
    next_check: float | None


def plan(config: Mapping[str, Mapping[str, Any]], now: float, originals: Mapping[str, int],
         current: Mapping[str, int]) -> Plan:
    """Given the stored config, the time, the levels the worker's loggers had before it first
    changed them (`originals`) and their levels now (`current`, of every logger in the config or
    in `originals`): what to set and what to reset. A setting in force whose logger already has
    its level is not set again; one that expired or left the config resets its logger."""
    to_set: dict[str, int] = {}
    reset: dict[str, int] = {}
    next_check: float | None = None
    live: set[str] = set()
    for logger, setting in config.items():
        expires = setting.get("expires")
        if expires is not None and expires <= now:
            continue
        live.add(logger)
        level = python_level(str(setting["level"]))
        if current.get(logger) != level:
            to_set[logger] = level
        if expires is not None:
            next_check = expires if next_check is None else min(next_check, expires)
    for logger, original in originals.items():
        if logger not in live:
            reset[logger] = original
    return Plan(to_set, reset, next_check)
