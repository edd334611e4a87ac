"""The worker process's one SparkSession, its batch directory, and the topology config's Spark
keys: every Spark component of a worker shares the session, created on first use from the
topology config and stopped when the process exits."""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from squall.components import DEFAULT_STREAM

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger("squall.spark")

DEFAULT_MASTER = "local[*]"

# Spark settings applied unless the topology config sets them (spark.conf.<key>): micro-batches
# are small, so few shuffle partitions and no adaptive execution (re-planning each query
# stage cost 0.05-0.1 s of JVM CPU per batch, docs/performance.md "Spark"); no UI port per
# worker; Arrow for a transform's own toPandas / createDataFrame(pandas) too (the bolts use
# Arrow whatever this says).
SESSION_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

# -- the per-process SparkSession -----------------------------------------------------------
_session_lock = threading.Lock()
_session: SparkSession | None = None


def spark_settings(conf: Mapping[str, Any]) -> dict[str, str]:
    """The Spark settings a config asks for: defaults, then every `spark.conf.<key>: value`."""
    out = {**SESSION_DEFAULTS, "spark.pyspark.python": sys.executable}
    for key, value in conf.items():
        if key.startswith("spark.conf."):
            out[key[len("spark.conf."):]] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def get_spark(conf: Mapping[str, Any] | None = None) -> SparkSession:
    """The SparkSession of this process, created on first use from `conf` (the topology config).

    Later calls return the same session whatever their conf: put Spark keys in the topology's
    `spec.config` so every component of a worker agrees. A session created before (by a test or
    a driver program) is reused."""
    global _session
    with _session_lock:
        if _session is not None and _session.sparkContext._jsc is not None:  # not stopped
            return _session
        from pyspark.sql import SparkSession

        conf = conf or {}
        name = conf.get("spark.app.name") or f"squall-{conf.get('topology.name', 'local')}"
        builder = SparkSession.builder.appName(str(name))
        active = SparkSession.getActiveSession()
        if active is None:
            builder = builder.master(str(conf.get("spark.master", DEFAULT_MASTER)))
            for key, value in spark_settings(conf).items():
                builder = builder.config(key, value)
        t0 = time.monotonic()
        _session = builder.getOrCreate()
        # Stopped when the process exits: a worker's executors share the session, so no one of
        # them may stop it. atexit runs last-registered first, so this runs before PySpark's own
        # hook kills the JVM.
        atexit.unregister(stop_spark)
        atexit.register(stop_spark)
        log.info("SparkSession ready in %.1fs (master %s)", time.monotonic() - t0, _session.sparkContext.master)
        return _session


_batch_dir: str | None = None


def batch_dir() -> str:
    """This process's directory for batch files (SparkBatchBolt's way into Spark), created on
    first use under the system's temp directory and removed when the process exits."""
    global _batch_dir
    with _session_lock:
        if _batch_dir is None or not os.path.isdir(_batch_dir):
            _batch_dir = tempfile.mkdtemp(prefix="squall-spark-batches-")
            atexit.register(shutil.rmtree, _batch_dir, True)
        return _batch_dir


def stop_spark() -> None:
    """Stop this process's session: at process exit (registered by get_spark), or by tests and
    benchmarks; the next get_spark starts a new one."""
    global _session
    with _session_lock:
        if _session is not None:
            session, _session = _session, None
            try:
                session.stop()
            except Exception:  # at exit the JVM may already be gone: nothing left to stop
                log.debug("stopping the SparkSession failed", exc_info=True)


def load_function(ref: str) -> Callable[..., Any]:
    """`module:function` (dots allowed after the colon) -> the callable."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ValueError(f"expected module:function, got {ref!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    return obj  # type: ignore[no-any-return]


def _conf_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _prefixed(conf: Mapping[str, Any], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: str(v) for k, v in conf.items() if k.startswith(prefix)}


def declared_fields(component: Any, stream: str = DEFAULT_STREAM) -> list[str]:
    """The fields `component` (a spout or bolt, opened) declares for `stream`: the topology file's
    outputs (through its context) win over the class's `outputs`."""
    declared = getattr(component.context, "output_fields", None)
    if declared is not None:
        fields = list(declared(stream))
        if fields:
            return fields
    outputs = type(component).outputs
    if isinstance(outputs, Mapping):
        return list(outputs.get(stream, []))
    return list(outputs or []) if stream == DEFAULT_STREAM else []
