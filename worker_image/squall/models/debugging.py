"""The debugging channel's payloads (`squall dump-stacks`, `squall logs`; squall.worker.debugging).

Pure data, stored by `squall.state` as versioned JSON like the cluster state's other payloads:

    <root>/debug/<topo>           DebugRequest   what the verb asks of the topology's workers
    <root>/debug/<topo>/<slot>    WorkerDebug    a worker's card (pid, host, log file) and its
                                                 answer to the last request it answered
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from squall.models.cluster import PAYLOAD_VERSION

__all__ = ["DebugAction", "DebugRequest", "WorkerDebug"]

# stacks: every thread's stack (Storm UI's "JStack"); profile: where the threads spent a few
# seconds, sampled (Storm UI's "Profile"); metrics: the metrics its components registered, as
# JSON (the UI's component page)
DebugAction = Literal["stacks", "profile", "metrics"]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = PAYLOAD_VERSION


class DebugRequest(_Payload):
    """A question for some workers of a topology; the last one asked replaces the one before."""

    id: str
    action: DebugAction
    # slot keys ("node-port") that should answer; empty: every worker of the topology
    slots: list[str] = Field(default_factory=list)
    # when it was asked, Unix time: a worker that starts later does not answer an old question
    time_secs: float
    # profile: how long to sample
    seconds: float = 0.0


class WorkerDebug(_Payload):
    """A worker's card, written when it starts and with each answer."""

    slot: str
    pid: int
    host: str
    # the file the worker's output goes to (locally); None when it goes elsewhere (a pod's log)
    log_path: str | None = None
    started_secs: float
    # the request it answered last (None: none yet), what it answered and when
    answer_id: str | None = None
    answer: str = ""
    answered_secs: float | None = None
