"""The local nimbus's side of the CLI verbs: answer the requests written under
``<root>/requests`` (`squall activate|deactivate|rebalance|kill NAME --zookeeper ...`, `squall update
FILE --zookeeper ...`).

Storm's CLI reaches nimbus over Thrift; a local Squall cluster's nimbus lives inside the
`squall run` process, so the verbs write a `NimbusRequest` node and this nimbus runs it through
the same lifecycle table as every other action (`Nimbus.act`, under its lock: no second writer of
the StormBase), then writes the outcome into the node. The asker reads it and deletes the node;
an answer nobody collected is removed after `STALE_ANSWER_SECS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from squall import specchange
from squall.models.cluster import NimbusRequest
from squall.models.v1alpha1 import Topology
from squall.stateviews import ForNimbus
from squall.topology_keys import TopologyKey
from squall_operator.nimbus import Nimbus, NimbusError

__all__ = ["ACTIONS", "STALE_ANSWER_SECS", "perform", "serve_pending"]

log = logging.getLogger("squall.requests")

ACTIONS = ("activate", "deactivate", "rebalance", "kill", "update")
# an answered request whose asker has gone (killed while waiting) is removed after this long
STALE_ANSWER_SECS = 60.0


def perform(nimbus: Nimbus, req: NimbusRequest) -> str:
    """Run one request through nimbus; returns what was done. Raises NimbusError / ValueError
    with a message for the asker when it is refused (nothing changed then)."""
    name = TopologyKey(req.topology)  # the key the verb was given (squall_operator.verbs._key)
    if req.action == "activate":
        nimbus.activate(name)
        return f"activated topology {name}"
    if req.action == "deactivate":
        nimbus.deactivate(name)
        return f"deactivated topology {name}"
    if req.action == "rebalance":
        nimbus.rebalance(name, req.num_workers, req.executors, req.wait_secs)
        return f"topology {name} is rebalancing"
    if req.action == "kill":
        nimbus.kill(name, req.wait_secs)
        return f"killed topology {name}"
    if req.action == "update":
        if req.resource is None:
            raise ValueError("update: the request carries no topology")
        change = nimbus.update(name, Topology.model_validate(req.resource), req.wait_secs)
        if change.kind is specchange.Kind.UPGRADE:
            after = "rebalanceWaitSecs" if req.wait_secs is None else f"{req.wait_secs:g}s"
            return (f"topology {name}: upgrading ({'; '.join(change.upgrade)}): spouts deactivated; the new graph "
                    f"is launched once nothing is pending, after {after} at the most")
        return f"topology {name}: {change.describe()}"
    raise ValueError(f"unknown action {req.action!r} (expected one of {', '.join(ACTIONS)})")


def serve_pending(state: ForNimbus, nimbus: Nimbus, now: float,
                  watch: Callable[[], None] | None = None) -> int:
    """Answer every unanswered request, oldest first; returns how many were answered."""
    answered = 0
    for rid in state.request_ids(watch=watch):
        try:
            req = state.get_request(rid)
        except Exception as exc:  # unreadable payload: say so rather than loop on it
            log.warning("request %s is unreadable (%s); removing it", rid, exc)
            state.remove_request(rid)
            continue
        if req is None:
            continue
        if req.answered:
            if req.answered_at is not None and now - req.answered_at > STALE_ANSWER_SECS:
                state.remove_request(rid)
            continue
        try:
            message, ok = perform(nimbus, req), True
        except (NimbusError, ValueError) as exc:
            message, ok = str(exc), False
        log.info("request %s (%s %s): %s", rid, req.action, req.topology, message)
        state.answer_request(rid, req.model_copy(update={
            "answered": True, "ok": ok, "message": message, "answered_at": now}))
        answered += 1
    return answered
