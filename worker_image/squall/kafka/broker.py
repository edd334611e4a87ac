"""A real Apache Kafka broker (KRaft mode) for local runs, examples and tests.

Squall's Kafka connectors are tested against the real thing, never a mock: this module runs Apache
Kafka 4.x (``kafka.Kafka`` from the jars that ``scripts/setup`` copies from Maven Central into
``~/.cache/squall-kafka/<version>``, see ``scripts/kafka/pom.xml``) as a child JVM, in the shape
of ``squall.zkserver``: one node that is both controller and broker (no ZooKeeper of its own), a
temp dir with a generated ``server.properties``, storage formatted with ``kafka.tools.StorageTool``,
free ``127.0.0.1`` ports, internal topics with one replica, and ``auto.create.topics.enable``
off unless asked (a topic that does not exist stays missing, as on a production cluster).

The child JVM's machinery is `squall.jvm`'s ``JvmServer``, as the embedded ZooKeeper's: it dies
with the thread that started it (``PR_SET_PDEATHSIG``); ``stop()`` sends SIGTERM (a clean shutdown), then SIGKILL, and deletes the temp dir;
``stop(keep_data=True)`` keeps the dir and the ports and a later ``start()`` brings the same
broker back with its topics and committed offsets (tests restart the broker mid-run with it).

Optionally a second listener speaks SASL/PLAIN (``sasl_users={"alice": "secret"}``) for tests of
credentials; the plain listener stays for the tests' own admin calls.

    with EmbeddedKafka() as kafka:
        print(kafka.bootstrap_servers)      # 127.0.0.1:PORT
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from squall.jvm import LOG4J2_CONSOLE, JvmServer, free_port

__all__ = [
    "KAFKA_VERSION", "LOG4J2_CONFIG", "EmbeddedKafka", "KafkaBrokerError", "kafka_jars", "kafka_jars_dir",
]

# Must equal <kafka.version> in scripts/kafka/pom.xml (tests/unit/test_kafka_broker.py checks it).
KAFKA_VERSION = "4.1.1"
JARS_ENV = "SQUALL_KAFKA_JARS"
_READY_LINE = b"Kafka Server started"
# the broker's log4j2 configuration (also the k8s test image's, tests/k8s/images/kafka.py)
LOG4J2_CONFIG = LOG4J2_CONSOLE + """\
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


class KafkaBrokerError(RuntimeError):
    """The broker cannot be started (no java, no jars, or it did not come up)."""


def kafka_jars_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the broker's jars are: ``$SQUALL_KAFKA_JARS``, else
    ``~/.cache/squall-kafka/<KAFKA_VERSION>`` (filled by ``scripts/setup``)."""
    env = os.environ if env is None else env
    if env.get(JARS_ENV):
        return Path(env[JARS_ENV])
    return Path(env.get("HOME", str(Path.home())), ".cache", "squall-kafka", KAFKA_VERSION)


def kafka_jars(env: Mapping[str, str] | None = None) -> list[str]:
    """The jars to run the broker with; a `KafkaBrokerError` saying how to get them if absent."""
    folder = kafka_jars_dir(env)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any(os.path.basename(j).startswith("kafka_2.13-") for j in jars):
        raise KafkaBrokerError(
            f"no Apache Kafka jars in {folder} (kafka_2.13-{KAFKA_VERSION}.jar and its "
            f"dependencies): run scripts/setup, which copies them from Maven Central, or point "
            f"${JARS_ENV} at a folder holding them"
        )
    return jars


def _cluster_id(new: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """A Kafka cluster id: a UUID in URL-safe base64 without padding (StorageTool random-uuid).
    Never one that starts with "-" (about one in 64 would): `kafka-storage format -t -...` reads
    it as an option and fails; Kafka's own Uuid.randomUuid draws again in that case too."""
    while True:
        got = base64.urlsafe_b64encode(new().bytes).rstrip(b"=").decode("ascii")
        if not got.startswith("-"):
            return got


def server_properties(
    *,
    data_dir: str,
    port: int,
    controller_port: int,
    sasl_port: int | None = None,
    sasl_users: Mapping[str, str] | None = None,
    auto_create_topics: bool = False,
    num_partitions: int = 1,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``server.properties`` of a one-node KRaft cluster on loopback (pure)."""
    listeners = [f"PLAINTEXT://127.0.0.1:{port}", f"CONTROLLER://127.0.0.1:{controller_port}"]
    advertised = [f"PLAINTEXT://127.0.0.1:{port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": data_dir,
        # one node: internal topics with one replica, few partitions (fast to create)
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true" if auto_create_topics else "false",
        "num.partitions": str(num_partitions),
        "log.retention.hours": "24",
    }
    if sasl_port is not None:
        users = dict(sasl_users or {})
        if not users:
            raise KafkaBrokerError("a SASL/PLAIN listener needs at least one user")
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}")
        advertised.append(f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}")
        protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
        jaas_users = " ".join(f'user_{u}="{p}"' for u, p in sorted(users.items()))
        props["sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {jaas_users};"
        )
    props["listeners"] = ",".join(listeners)
    props["advertised.listeners"] = ",".join(advertised)
    props["listener.security.protocol.map"] = ",".join(protocols)
    props.update(extra or {})
    return props


class EmbeddedKafka(JvmServer):
    """A one-node Apache Kafka (KRaft) in a child JVM on free ``127.0.0.1`` ports.

    Start it with ``start()`` or ``with``; ``stop()`` is idempotent and also runs at interpreter
    exit. ``data_dir``: keep the broker's data there (``squall kafka up --data-dir``) instead of
    a temp dir that ``stop()`` deletes. Not thread-safe: one owner starts and stops it.
    """

    error = KafkaBrokerError
    name = "the Kafka broker"
    log_name = "kafka"
    stop_timeout_s = 20.0  # SIGTERM: a controlled shutdown

    def __init__(
        self,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_port: int | None = None,
        auto_create_topics: bool = False,
        num_partitions: int = 1,
        data_dir: str | None = None,
        heap: str = "512m",
        startup_timeout_s: float = 90.0,
        extra_properties: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, env=env)
        self._requested = (port, controller_port, sasl_port)
        self.sasl_users = dict(sasl_users or {})
        self.auto_create_topics = auto_create_topics
        self.num_partitions = num_partitions
        self._user_dir = data_dir
        self.heap = heap
        self.extra_properties = dict(extra_properties or {})
        self._ports: tuple[int, int, int | None] | None = None

    # --- properties -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._ports is None:
            raise KafkaBrokerError("the embedded Kafka broker is not started")
        return self._ports[0]

    @property
    def controller_port(self) -> int:
        if self._ports is None:
            raise KafkaBrokerError("the embedded Kafka broker is not started")
        return self._ports[1]

    @property
    def bootstrap_servers(self) -> str:
        """The plain (PLAINTEXT) listener: ``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL/PLAIN listener (only with ``sasl_users``)."""
        if self._ports is None or self._ports[2] is None:
            raise KafkaBrokerError("the embedded Kafka broker has no SASL listener")
        return f"127.0.0.1:{self._ports[2]}"

    @property
    def workdir(self) -> str | None:
        """The dir holding server.properties, the log and (unless ``data_dir``) the data."""
        return self._dir

    def _forget_ports(self) -> None:
        self._ports = None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> EmbeddedKafka:
        """Start the broker: fresh, or after ``stop(keep_data=True)`` with the same data."""
        if self._proc is not None:
            raise KafkaBrokerError("the embedded Kafka broker is already started")
        java = self._java(
            "the Kafka broker needs a Java runtime, 17 or newer "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
        jars = kafka_jars(self._env)
        if self._dir is not None:  # a restart after stop(keep_data=True)
            self._launch(java, jars)
            return self
        fixed = self._requested[0] is not None
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            try:
                self._prepare(java, jars)
                self._launch(java, jars)
            except KafkaBrokerError as exc:
                if attempt + 1 < attempts and "Address already in use" in str(exc):
                    continue  # a free port was taken before the broker bound it
                raise
            atexit.register(self.stop)
            return self
        raise AssertionError("unreachable")

    def _prepare(self, java: str, jars: list[str]) -> None:
        port, cport, sport = self._requested
        plain, controller = port or free_port(), cport or free_port()
        sasl = (sport or free_port()) if self.sasl_users else None
        for _ in range(10):  # free ports found one by one may coincide
            if controller != plain and sasl not in (plain, controller):
                break
            controller = cport if cport and cport != plain else free_port()
            sasl = (sport if sport and sport not in (plain, controller) else free_port()) if self.sasl_users else None
        else:
            raise KafkaBrokerError(f"the broker's ports must differ: {plain}, {controller}, {sasl}")
        ports = (plain, controller, sasl)
        self._ports = ports
        self._dir = tempfile.mkdtemp(prefix="squall-kafka-")
        data = self._user_dir or os.path.join(self._dir, "data")
        props = server_properties(
            data_dir=data,
            port=ports[0],
            controller_port=ports[1],
            sasl_port=ports[2],
            sasl_users=self.sasl_users,
            auto_create_topics=self.auto_create_topics,
            num_partitions=self.num_partitions,
            extra=self.extra_properties,
        )
        cfg = Path(self._dir, "server.properties")
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        Path(self._dir, "log4j2.properties").write_text(LOG4J2_CONFIG)
        if Path(data, "meta.properties").exists():
            return  # a kept --data-dir: formatted already
        fmt = subprocess.run(
            [*self._java_cmd(java, jars, "256m"), "kafka.tools.StorageTool", "format",
             "--ignore-formatted", "-t", _cluster_id(), "-c", str(cfg)],
            stdin=subprocess.DEVNULL, capture_output=True, cwd=self._dir, env=self._env,
            timeout=self.startup_timeout_s, check=False,
        )
        if fmt.returncode != 0:
            out = (fmt.stdout + fmt.stderr).decode("utf-8", "replace")[-3000:]
            self._cleanup()
            raise KafkaBrokerError(f"formatting the Kafka storage failed ({fmt.returncode}):\n{out}")

    def _java_cmd(self, java: str, jars: list[str], heap: str) -> list[str]:
        assert self._dir is not None
        return [
            java,
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={os.path.join(self._dir, 'log4j2.properties')}",
            "-cp",
            os.pathsep.join(jars),
        ]

    def _launch(self, java: str, jars: list[str]) -> None:
        assert self._dir is not None and self.log_path is not None
        log_path = self.log_path

        def started(log_offset: int) -> bool:
            with open(log_path, "rb") as f:
                f.seek(log_offset)
                if _READY_LINE not in f.read():
                    return False
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=0.5
            ):
                return True
            return False

        self._run(
            [*self._java_cmd(java, jars, self.heap), "kafka.Kafka",
             os.path.join(self._dir, "server.properties")],
            started,
            f"the Kafka broker did not start on 127.0.0.1:{self.port} "
            f"within {self.startup_timeout_s:.0f}s",
        )
