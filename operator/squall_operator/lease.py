"""Only one operator acts at a time: `LeaseElector` holds a coordination.k8s.io Lease, and the
process exits if it cannot renew it in time (the kubelet restarts it as a standby).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from squall_operator.health import Health
from squall_operator.kube_api import ApiConflict, KubeApi, now_micro, parse_time

log = logging.getLogger("squall.operator")


class LeaseElector:
    """A coordination.k8s.io/v1 Lease as a leader lock (client-go's leader election, simplified).

    The holder renews `spec.renewTime` every `duration / 5` seconds; another instance takes the
    Lease over only when it has not been renewed for `duration` seconds. Writes carry the Lease's
    resourceVersion, so two candidates cannot both win one round. A holder that fails to renew
    for `duration * 2 / 3` calls `on_lost` (the operator exits): it must stop acting before a
    standby may take over.
    """

    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str,
                 duration: float = 15.0, clock: Callable[[], float] = time.time,
                 health: Health | None = None) -> None:
        self.api = api
        self.health = health
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self.last_renew = 0.0

    def _body(self, resource_version: str | None, acquire_time: str, transitions: int) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, int(self.duration)),
                "acquireTime": acquire_time,
                "renewTime": now_micro(),
                "leaseTransitions": transitions,
            },
        }

    def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease; True when this instance holds it."""
        lease = self.api.get_lease(self.namespace, self.name)
        if self.health is not None:
            self.health.api_ok()
        now = self.clock()
        try:
            if lease is None:
                self.api.create_lease(self.namespace, self._body(None, now_micro(), 0))
                self.last_renew = now
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = parse_time(spec.get("renewTime")) or 0.0
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
            transitions = int(spec.get("leaseTransitions") or 0)
            rv = lease["metadata"].get("resourceVersion")
            if holder == self.identity:
                body = self._body(rv, spec.get("acquireTime") or now_micro(), transitions)
            elif not holder or renewed + duration < now:
                body = self._body(rv, now_micro(), transitions + 1)
            else:
                return False
            self.api.replace_lease(self.namespace, self.name, body)
            self.last_renew = now
            return True
        except ApiConflict:
            return False

    def acquire(self, stop: threading.Event, poll_secs: float = 2.0) -> bool:
        """Block until the Lease is held (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                if self.try_acquire():
                    log.info("leader election: %s holds lease %s/%s", self.identity, self.namespace, self.name)
                    return True
            except Exception:
                log.exception("leader election: cannot read or write lease %s/%s", self.namespace, self.name)
            stop.wait(poll_secs)
        return False

    def keep(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew until `stop`; call `on_lost` when renewal has failed for too long."""
        interval = max(0.5, self.duration / 5)
        deadline = self.duration * 2 / 3
        while not stop.wait(interval):
            try:
                if self.try_acquire():
                    continue
                log.error("leader election: lease %s taken by another instance", self.name)
                on_lost()
                return
            except Exception:
                log.exception("leader election: renewal failed")
            if self.clock() - self.last_renew > deadline:
                log.error("leader election: could not renew lease for %.0fs", deadline)
                on_lost()
                return


__all__ = ["LeaseElector"]
