"""Dynamic log levels in a worker (`squall set-log-level`): the topology's log config read from
ZooKeeper and applied to its loggers, each setting given back when it lapses
(squall.loglevels decides). Functions of the worker's state.
"""

from __future__ import annotations

import logging
import time

from squall import loglevels
from squall.worker.workerstate import WorkerState

log = logging.getLogger("squall.worker")


def read_log_config(w: WorkerState) -> None:
    """The topology's dynamic log levels from ZooKeeper (watched), applied at once."""
    stored = w.state.get_log_config(w.topology_id, watch=w.watch)
    raw = {} if stored is None else {k: v.model_dump() for k, v in stored.loggers.items()}
    try:
        w.log_config = loglevels.parse_config(raw)
        w.log_config_problem = None
    except loglevels.LogLevelError as exc:
        if w.log_config_problem != str(exc):
            w.log_config_problem = str(exc)
            log.warning("worker %s: the topology's log config is not used: %s", w.slot.key(), exc)
        return
    apply_log_levels(w, time.time())


def apply_log_levels(w: WorkerState, now: float) -> None:
    """Set the loggers the log config names; give back their own level to those whose
    setting lapsed or left it (`now`: Unix time)."""
    def logger(name: str) -> logging.Logger:
        return logging.getLogger(None if name == loglevels.ROOT else name)

    names = set(w.log_config) | set(w.log_originals)
    plan = loglevels.plan(w.log_config, now, w.log_originals,
                          {name: logger(name).level for name in names})
    for name, level in plan.set.items():
        lg = logger(name)
        w.log_originals.setdefault(name, lg.level)
        lg.setLevel(level)
        log.warning("worker %s: logger %s set to %s (dynamic log level%s)", w.slot.key(), name,
                    logging.getLevelName(level), lapse(w, name))
    for name, level in plan.reset.items():
        logger(name).setLevel(level)
        del w.log_originals[name]
        log.warning("worker %s: logger %s back to %s (its dynamic log level lapsed or was removed)",
                    w.slot.key(), name, logging.getLevelName(level))
    w.log_next_check = plan.next_check


def lapse(w: WorkerState, name: str) -> str:
    expires = w.log_config.get(name, {}).get("expires")
    return "" if expires is None else f", for {max(0.0, expires - time.time()):.0f}s"
