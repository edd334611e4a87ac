"""Prometheus metrics of nimbus and the operator (docs/operator.md#metrics).

One `NimbusMetrics` per nimbus, with a registry of its own (so tests and `squall run` do not
share prometheus_client's global one): reconcile rounds by outcome and their duration (the
operator's loop), assignment changes and the dead executors that caused moves (every nimbus),
and topologies per phase (read from the operator's resources at scrape time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["NimbusMetrics", "PHASES", "exposition"]

ROUND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# the phases a Topology's status can show (pods.build_status); each is exported, 0 included
PHASES = ("Pending", "Running", "Inactive", "Rebalancing", "Rolling", "Killing", "Failed")


class _Phases(Collector):
    def __init__(self, phases: Callable[[], Iterable[str]]) -> None:
        self.phases = phases

    def collect(self) -> Iterable[Metric]:
        counts = dict.fromkeys(PHASES, 0)
        for phase in self.phases():
            counts[phase or "Pending"] = counts.get(phase or "Pending", 0) + 1
        g = GaugeMetricFamily("squall_operator_topologies", "Topology resources by status phase.", labels=["phase"])
        for phase, n in sorted(counts.items()):
            g.add_metric([phase], n)
        yield g


class NimbusMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.rounds = Counter(
            "squall_operator_reconcile_rounds", "Reconcile rounds of the operator, by outcome "
            "(ok, failed, zookeeper_unreachable).", ["outcome"], registry=r)
        self.round_seconds = Histogram(
            "squall_operator_reconcile_round_seconds", "Duration of a reconcile round.",
            buckets=ROUND_BUCKETS, registry=r)
        self.assignment_changes = Counter(
            "squall_nimbus_assignment_changes", "Assignments nimbus wrote because placement changed.",
            ["topology"], registry=r)
        self.dead_executors = Counter(
            "squall_nimbus_dead_executors", "Executors nimbus found dead (no heartbeat within the task "
            "or launch timeout) and moved.", ["topology"], registry=r)
        self._phases: _Phases | None = None

    def watch_phases(self, phases: Callable[[], Iterable[str]]) -> None:
        """Export `squall_operator_topologies{phase}` from `phases()` (one entry per Topology)."""
        if self._phases is None:
            self._phases = _Phases(phases)
            self.registry.register(self._phases)

    def assignment_written(self, topology: str, dead: int) -> None:
        self.assignment_changes.labels(topology).inc()
        if dead:
            self.dead_executors.labels(topology).inc(dead)

    def forget(self, topology: str) -> None:
        """A removed topology's series go away."""
        for metric in (self.assignment_changes, self.dead_executors):
            try:
                metric.remove(topology)
            except KeyError:
                pass


def exposition(registry: CollectorRegistry, accept: str) -> tuple[int, str, bytes]:
    """`/metrics`' answer: (status, content type, body), in the format the scraper asked for."""
    encoder, content_type = choose_encoder(accept)
    return 200, content_type, encoder(registry)
