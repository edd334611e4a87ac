"""When a worker asked to stop (SIGTERM) actually leaves: the hand-over of its slot to the next
worker, as a pure decision.

On Kubernetes a deleted worker pod gets SIGTERM while the operator already creates the slot's
next pod; that pod needs seconds (sandbox, container, interpreter, imports, ZooKeeper) before it
takes a tuple. A worker that stopped at once left its slot empty all that time: every tree
through it stalled, and the ack rate with them. With a hand-over window (`handover_secs`, the
operator sets it on its pods, `SQUALL_HANDOVER_SECS`) the old worker keeps running its executors
until its successor has registered the slot's endpoint in ZooKeeper (peers then send to the new
worker), and leaves then: the slot is served by one worker or the other throughout. It leaves at
once when there is nothing to hand over (the slot left the assignment, or no window was asked
for), when it cannot see a successor come (ZooKeeper away), and at the end of the window in any
case (the pod's grace period is longer).

A successor whose slot port is still held by this worker (pods sharing the node's network)
removes the slot's endpoint to say so (`Worker._bind`); that counts as the successor's arrival.
"""

from __future__ import annotations

from dataclasses import dataclass

# asked to stop while executors that moved away still finish: at most this long
DRAIN_SECS = 3.0


@dataclass(frozen=True)
class Leaving:
    """What the main loop knows when deciding whether to leave (all plain values)."""

    now: float  # monotonic
    stop_requested: float | None  # when SIGTERM came (monotonic), None: not asked to stop
    handover_secs: float  # 0: no hand-over window
    assigned: bool  # the current assignment gives this worker's slot executors
    successor: bool  # ZooKeeper's endpoint of the slot is no longer this worker's
    zk_ready: bool  # connected to ZooKeeper with the endpoint registered in this session
    retiring: bool  # executors that a hot update removed are still finishing


def should_leave(s: Leaving) -> bool:
    """Whether the worker stops now."""
    if s.stop_requested is None:
        return False
    waited = s.now - s.stop_requested
    if (s.handover_secs > 0 and s.assigned and s.zk_ready and not s.successor
            and waited < s.handover_secs):
        return False  # still serving the slot until its next worker is there
    return not s.retiring or waited > DRAIN_SECS
