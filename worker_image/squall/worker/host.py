"""What an executor needs from the worker that hosts it, as Protocols.

`executor.py` types its worker with `WorkerHost` instead of importing `runtime.Worker`, so the
worker's modules import downward only (runtime -> executor -> host, routing, transport): the
import-linter contract "The worker's modules import downward only" in pyproject.toml checks it.
`runtime.Worker` satisfies `WorkerHost` structurally (mypy checks that where it passes itself).
"""

from __future__ import annotations

from typing import Any, Protocol

from squall.models.cluster import WorkerSlot
from squall.models.v1alpha1 import TopologySpec
from squall.worker.errorlog import ErrorThrottle
from squall.worker.routing import Routing
from squall.worker.transport import DirectSender


class ExecutorOutput(Protocol):
    """The part of an executor's output buffers the worker writes to (acker messages)."""

    control: list[list[int]]


class HostedExecutor(Protocol):
    """What the worker reads of the executor that calls it."""

    @property
    def kind(self) -> str: ...
    @property
    def tasks(self) -> list[int]: ...
    @property
    def out(self) -> ExecutorOutput: ...


class WorkerHost(Protocol):
    """The worker as its executors see it."""

    @property
    def slot(self) -> WorkerSlot: ...
    @property
    def spec(self) -> TopologySpec: ...
    @property
    def routing(self) -> Routing: ...
    @property
    def active(self) -> bool: ...

    conf: dict[str, Any]
    # the rate of its components' error logs and reports
    error_throttle: ErrorThrottle
    # remote task -> until when it is backpressured (monotonic)
    remote_bp: dict[int, float]
    # every worker of the assignment listens (spouts start only then; squall.worker.refresh)
    peers_ready: bool
    # a graph upgrade launched the topology again while this worker ran the old launch
    relaunched: bool

    def init_trees(self, inits: list[tuple[int, int, int]], spill: list[list[int]]) -> list[list[int]]: ...
    def handle_control(
        self, items: list[list[int]], caller: HostedExecutor | None, trusted: bool = True
    ) -> list[list[int]]: ...
    def report_error(self, component: str, task: int, text: str) -> None: ...
    def executor_died(self, ex: Any, exc: BaseException) -> None: ...
    def direct_sender(self) -> DirectSender: ...


__all__ = ["ExecutorOutput", "HostedExecutor", "WorkerHost"]
