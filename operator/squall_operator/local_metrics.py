"""`squall run --metrics-port N`: the local cluster's Prometheus metrics on one loopback port.

Each worker serves its own `/metrics` on a free loopback port that it publishes in its endpoint
node (`Endpoint.metrics_port`); this collector reads those endpoints, scrapes every worker of
the topology at scrape time, and merges their families (the workers' series never collide:
per-task series carry the task, per-worker ones the worker) with nimbus's own metrics. A worker
that does not answer within `WORKER_TIMEOUT_SECS` is left out of that scrape and counted in
`squall_local_scrape_errors_total`; while ZooKeeper is away the last known endpoints are used.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from squall.models.cluster import WorkerSlot
from squall.state import CONNECTION_ERRORS, TopologyKey
from squall_operator.local import LocalCluster

log = logging.getLogger("squall.run.metrics")

WORKER_TIMEOUT_SECS = 2.0


class LocalClusterCollector(Collector):
    def __init__(self, cluster: LocalCluster, topology: TopologyKey) -> None:
        self.cluster = cluster
        self.topology = topology
        self.ports: dict[WorkerSlot, int] = {}
        self.own = CollectorRegistry()
        self.errors = Counter("squall_local_scrape_errors", "Worker /metrics that did not answer a scrape.",
                              ["worker"], registry=self.own)

    def _worker_ports(self) -> dict[WorkerSlot, int]:
        try:
            if getattr(self.cluster, "state", None) is not None and self.cluster.state.ready:
                eps = self.cluster.state.get_endpoints(self.topology)
                self.ports = {slot: ep.metrics_port for slot, ep in eps.items() if ep.metrics_port}
        except CONNECTION_ERRORS:
            pass  # ZooKeeper away: the workers are where they were
        return dict(self.ports)

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}

        def add(families: Iterable[Metric]) -> None:
            for fam in families:
                have = merged.get(fam.name)
                if have is None:
                    merged[fam.name] = fam
                else:
                    have.samples.extend(fam.samples)

        for slot, port in sorted(self._worker_ports().items(), key=lambda kv: kv[0].key()):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WORKER_TIMEOUT_SECS) as resp:
                    text = resp.read().decode()
                add(text_string_to_metric_families(text))
            except (OSError, ValueError) as exc:
                self.errors.labels(slot.key()).inc()
                log.debug("worker %s: /metrics did not answer: %s", slot.key(), exc)
        nimbus = getattr(self.cluster, "nimbus", None)  # None until the cluster started
        if nimbus is not None:
            add(nimbus.metrics.registry.collect())
        add(self.own.collect())
        return list(merged.values())


class LocalMetricsServer:
    """Serves the merged metrics on 127.0.0.1:`port` (every path answers with them)."""

    def __init__(self, cluster: LocalCluster, topology: TopologyKey, port: int) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(LocalClusterCollector(cluster, topology))
        self.server: Any
        self.thread: threading.Thread
        self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self.port: int = self.server.server_port

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
