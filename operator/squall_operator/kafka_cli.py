"""`squall kafka ...`: a real Apache Kafka broker on this machine, and its topics.

    squall kafka up [--port 9092] [--topic clicks:3 ...] [--sasl-user alice:secret] [--data-dir DIR]
    squall kafka create-topic NAME [--partitions 3] [--bootstrap-servers HOST:PORT]
    squall kafka check topology.yaml        its Kafka components' settings and brokers, now

`up` runs the broker of `squall.kafka.broker` (Apache Kafka 4.x in KRaft mode, from the jars that
scripts/setup fetched) in the foreground until Ctrl-C, so that a topology run with `squall run`
can read and write Kafka on a laptop with one more command.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Annotated

import typer

__all__ = ["add_kafka", "kafka_app"]

kafka_app = typer.Typer(
    name="kafka",
    help="A local Apache Kafka broker (KRaft) for topologies that read or write Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _quiet_client() -> None:
    # the client's own lines (each refused connection) would bury the one-line answer
    logging.getLogger("squall.kafka.client").setLevel(logging.CRITICAL)


def _parse_topic(text: str) -> tuple[str, int]:
    name, _, parts = text.partition(":")
    if not name:
        raise typer.BadParameter(f"{text!r}: expected NAME or NAME:PARTITIONS")
    try:
        n = int(parts) if parts else 1
    except ValueError:
        raise typer.BadParameter(f"{text!r}: the partitions after ':' must be a number") from None
    if n < 1:
        raise typer.BadParameter(f"{text!r}: at least one partition")
    return name, n


def _parse_user(text: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not user or not sep or not password:
        raise typer.BadParameter(f"{text!r}: expected USER:PASSWORD")
    return user, password


@kafka_app.command("up")
def up(
    port: Annotated[int, typer.Option(help="the PLAINTEXT listener's port on 127.0.0.1 (0: a free one)")] = 9092,
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", "-t", metavar="NAME[:PARTITIONS]", help="create this topic (repeatable)")] = None,
    sasl_user: Annotated[list[str] | None, typer.Option(
        "--sasl-user", metavar="USER:PASSWORD",
        help="add a SASL/PLAIN listener (on a free port) that accepts this user (repeatable)")] = None,
    data_dir: Annotated[str | None, typer.Option(
        help="keep the broker's data in this folder (default: a temp dir deleted at exit)")] = None,
    auto_create_topics: Annotated[bool, typer.Option(
        help="let the broker create a topic when a client first uses it")] = False,
    partitions: Annotated[int, typer.Option(help="partitions of auto-created topics")] = 1,
) -> None:
    """Run Apache Kafka (one KRaft node) on 127.0.0.1 until Ctrl-C."""
    from squall_operator.cli_usage import CliError, user_errors

    _quiet_client()
    with user_errors():
        from squall.kafka.broker import EmbeddedKafka, KafkaBrokerError

        topics = dict(_parse_topic(t) for t in topic or [])
        users = dict(_parse_user(u) for u in sasl_user or [])
        broker = EmbeddedKafka(port=port or None, sasl_users=users, data_dir=data_dir,
                               auto_create_topics=auto_create_topics, num_partitions=partitions)
        try:
            broker.start()
        except KafkaBrokerError as exc:
            raise CliError(str(exc)) from None
        try:
            if topics:
                from squall.kafka.admin import KafkaUnavailable, create_topics

                try:
                    create_topics(broker.bootstrap_servers, topics)
                except KafkaUnavailable as exc:
                    raise CliError(str(exc)) from None
            typer.echo(f"kafka: bootstrap servers {broker.bootstrap_servers}")
            if users:
                typer.echo(f"kafka: SASL/PLAIN (SASL_PLAINTEXT) on {broker.sasl_bootstrap_servers}")
            for name, n in topics.items():
                typer.echo(f"kafka: topic {name} ({n} partition{'' if n == 1 else 's'})")
            typer.echo(f"kafka: log {broker.log_path}; Ctrl-C stops it", err=True)
            done = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: done.set())
            while not done.wait(0.5):
                if not broker.running:
                    raise CliError(f"the Kafka broker exited; its log: {broker.log_path}")
        finally:
            broker.stop()


@kafka_app.command("create-topic")
def create_topic(
    name: Annotated[str, typer.Argument(help="the topic")],
    partitions: Annotated[int, typer.Option(min=1)] = 1,
    bootstrap_servers: Annotated[str, typer.Option(
        envvar="SQUALL_KAFKA_BOOTSTRAP", help="HOST:PORT[,HOST:PORT...]")] = "127.0.0.1:9092",
) -> None:
    """Create a topic (nothing happens when it exists already)."""
    from squall_operator.cli_usage import CliError, user_errors

    _quiet_client()
    with user_errors():
        from squall.kafka.admin import KafkaUnavailable, create_topics

        try:
            created = create_topics(bootstrap_servers, {name: partitions}, timeout=15)
        except KafkaUnavailable as exc:
            raise CliError(str(exc)) from None
        typer.echo(f"topic {name}: {'created' if created else 'exists already'}")


@kafka_app.command("check")
def check(
    file: Annotated[str, typer.Argument(metavar="FILE", help="a topology file")],
    timeout: Annotated[float, typer.Option(min=0.1, max=300, help="seconds to wait for each cluster")] = 5.0,
) -> None:
    """Check that a topology's Kafka spouts and bolts can reach their brokers (one line each)."""
    from squall_operator.cli_usage import user_errors

    _quiet_client()
    with user_errors():
        from squall.errors import TopologyError
        from squall.kafka.preflight import kafka_problems
        from squall.validation import load_topology

        topo = load_topology(file)
        problems = kafka_problems(topo, timeout=timeout)
        if problems:
            raise TopologyError(problems, source=file)
        typer.echo(f"{file}: Kafka components reach their brokers")


def add_kafka(app: typer.Typer) -> None:
    """Register `squall kafka ...` on the `squall` command."""
    app.add_typer(kafka_app, name="kafka")
