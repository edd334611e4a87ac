"""Admin calls the connectors, the CLI and the tests share: topics, and the reachability check.

A connector that cannot reach its brokers must say so in one line that names the bootstrap
servers (librdkafka's own errors name a broker's internal id, or nothing at all); this module
turns the client's errors into such lines.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata
from confluent_kafka.cimpl import NewTopic

__all__ = [
    "ClientErrors",
    "KafkaUnavailable",
    "client_config",
    "create_topics",
    "describe_error",
    "fetch_metadata",
]

# librdkafka's own log lines (a refused connection, each retry of it); the commands silence it
client_log = logging.getLogger("squall.kafka.client")
_AUTH_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class KafkaUnavailable(RuntimeError):
    """The brokers cannot be reached or refuse us (credentials); the message is one line."""


class ClientErrors:
    """The client's asynchronous errors (librdkafka reports a refused login or a broker that is
    down through ``error_cb``, not through the call that failed): the latest one is kept so that
    a failed call can say why. Thread-safe: librdkafka calls back from the polling thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last: KafkaError | None = None
        self.auth: KafkaError | None = None  # a refused login outranks what follows from it

    def __call__(self, err: KafkaError) -> None:
        with self._lock:
            self.last = err
            if err.code() in _AUTH_CODES:
                self.auth = err

    def take(self) -> KafkaError | None:
        """The latest authentication error, else the latest error; both are then forgotten."""
        with self._lock:
            err = self.auth or self.last
            self.auth = self.last = None
            return err


def client_config(props: Mapping[str, Any], errors: ClientErrors | None = None) -> dict[str, Any]:
    """``props`` with the client's log routed to Python logging (not raw stderr) and its errors
    to ``errors``."""
    conf = dict(props)
    conf.setdefault("logger", client_log)
    if errors is not None:
        conf["error_cb"] = errors
    return conf


def describe_error(exc: BaseException | KafkaError, bootstrap: str, errors: ClientErrors | None = None) -> str:
    """One line for a client error, naming the bootstrap servers; an authentication error
    reported asynchronously to ``errors`` wins over the call's vaguer one."""
    err: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    late = errors.take() if errors is not None else None
    if late is not None and late.code() in _AUTH_CODES:
        err = late
    if isinstance(err, KafkaError):
        code = err.code()
        if code in _AUTH_CODES:
            return f"Kafka at {bootstrap} refused the credentials: {err.str()}"
        if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
            return f"no Kafka broker reachable at {bootstrap} ({err.str()})"
        return f"Kafka at {bootstrap}: {err.str()}"
    return f"Kafka at {bootstrap}: {exc}"


def fetch_metadata(admin: Any, bootstrap: str, timeout: float,
                   errors: ClientErrors | None = None) -> ClusterMetadata:
    """The cluster's metadata (topics, partitions); `KafkaUnavailable` in one line otherwise.

    ``admin``: an AdminClient (or a Consumer/Producer: all have ``list_topics``).
    """
    try:
        md: ClusterMetadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        if errors is not None and hasattr(admin, "poll"):
            admin.poll(0)  # serves error_cb: why the brokers were not usable
        raise KafkaUnavailable(describe_error(exc, bootstrap, errors)) from None
    return md


def create_topics(
    conf: Mapping[str, Any] | str,
    topics: Mapping[str, int],
    *,
    topic_config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Create each topic (name -> partitions, the broker's default replication factor)
    that does not exist yet; returns the names created. ``conf``: client properties or the
    bootstrap servers."""
    props = {"bootstrap.servers": conf} if isinstance(conf, str) else dict(conf)
    bootstrap = str(props.get("bootstrap.servers", "?"))
    errors = ClientErrors()
    admin = AdminClient(client_config(props, errors))
    existing = set(fetch_metadata(admin, bootstrap, timeout, errors).topics)
    wanted = [
        NewTopic(name, num_partitions=n, replication_factor=-1, config=dict(topic_config or {}))
        for name, n in topics.items()
        if name not in existing
    ]
    if not wanted:
        return []
    created: list[str] = []
    for name, future in admin.create_topics(wanted, request_timeout=timeout).items():
        try:
            future.result(timeout)
            created.append(name)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise KafkaUnavailable(
                f"creating topic {name!r}: {describe_error(exc, bootstrap, errors)}"
            ) from None
    return created
