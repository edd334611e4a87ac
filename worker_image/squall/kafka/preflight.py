"""Before a topology starts: can its Kafka components be used at all?

A spout whose brokers cannot be reached waits for them and reports it (a broker may come back);
before anything starts, though, `squall run` and `squall kafka check` can say at once, in one line
per component naming the bootstrap servers, that a topology cannot read or write Kafka: bad
settings, an unset password variable, no broker answering, a refused login. Components are found
by their config (`kafka.spout` on a spout, `kafka.bolt` on a bolt), so subclasses count too.
A subscribed topic that does not exist is not a problem here: the spout waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.errors import NO_VALUE, Problem
from squall.kafka.config import (
    BOLT_KEY,
    SPOUT_KEY,
    KafkaConfigError,
    client_props,
    parse_spout_config,
)
from squall.kafka.txn import parse_txn_bolt_config
from squall.models.v1alpha1 import Topology

__all__ = ["kafka_problems"]


def kafka_problems(topo: Topology, *, timeout: float = 5.0, env: Mapping[str, str] | None = None) -> list[Problem]:
    """One problem per Kafka component that cannot be used (each cluster is asked once)."""
    from squall.kafka.admin import ClientErrors, KafkaUnavailable, client_config, fetch_metadata

    from confluent_kafka.admin import AdminClient

    problems: list[Problem] = []
    answers: dict[str, str | None] = {}  # the client props, as a key -> the problem (None: fine)
    spec = topo.spec
    checks: list[tuple[str, str, Mapping[str, Any]]] = []
    for i, s in enumerate(spec.spouts):
        spout_conf = {**spec.config, **s.config}
        if SPOUT_KEY in spout_conf:
            checks.append((f"spec.spouts[{i}].config['{SPOUT_KEY}']", SPOUT_KEY, spout_conf))
    for i, b in enumerate(spec.bolts):
        bolt_conf = {**spec.config, **b.config}
        if BOLT_KEY in bolt_conf:
            checks.append((f"spec.bolts[{i}].config['{BOLT_KEY}']", BOLT_KEY, bolt_conf))
    for path, key, conf in checks:
        try:
            # a bolt's settings as the transactional sink's, a superset of KafkaBolt's (the class
            # is not known here; KafkaBolt itself refuses the sink's keys when it starts)
            cfg: Any = parse_spout_config(conf) if key == SPOUT_KEY else parse_txn_bolt_config(conf)
            props = client_props(cfg, key, env)
        except KafkaConfigError as exc:
            problems.append(Problem(path, NO_VALUE, str(exc)))
            continue
        ident = repr(sorted(props.items()))
        if ident not in answers:
            errors = ClientErrors()
            try:
                fetch_metadata(AdminClient(client_config(props, errors)), cfg.bootstrapServers, timeout, errors)
                answers[ident] = None
            except KafkaUnavailable as exc:
                answers[ident] = str(exc)
        if answers[ident] is not None:
            problems.append(Problem(path, NO_VALUE, str(answers[ident])))
    return problems
