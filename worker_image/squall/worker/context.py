"""Storm's TopologyContext for one task: what a component may ask about the topology, and its
own metrics (Storm's metrics v2 register calls)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from squall import usermetrics
from squall.plan import SYSTEM, SYSTEM_TASK, TopologyPlan
from squall.worker.host import WorkerHost


class Context:
    """Storm's TopologyContext for one task."""

    def __init__(self, worker: WorkerHost, plan: TopologyPlan, task: int) -> None:
        self.topology_id = plan.topology_id
        self.task_id = task
        self.component_id = plan.task_component[task]
        self.worker_port = worker.slot.port
        self._plan = plan
        self.config = worker.conf
        # the task's own metrics (squall.usermetrics), made by its first register_* call
        self.user_metrics: usermetrics.TaskMetrics | None = None

    def component_tasks(self, component: str) -> list[int]:
        return list(self._plan.component_tasks.get(component, ()))

    def task_component(self, task: int) -> str:
        return self._plan.task_component[task] if task != SYSTEM_TASK else SYSTEM

    def this_component_tasks(self) -> list[int]:
        return self.component_tasks(self.component_id)

    def output_fields(self, stream: str = "default") -> list[str]:
        """The fields this component declares on `stream` (the topology file's win over the
        class's `outputs`); [] for an undeclared stream."""
        spec = self._plan.streams.get(self.component_id, {}).get(stream)
        return list(spec.fields) if spec is not None else []

    def task_to_component(self) -> dict[int, str]:
        """Every task of the topology -> its component (Storm's getTaskToComponent), the
        system's task left out."""
        return {t: c for t, c in self._plan.task_component.items() if t >= 0}

    def this_streams(self) -> list[str]:
        """The streams this component declares (Storm's getThisStreams)."""
        return sorted(self._plan.streams.get(self.component_id, {}))

    # -- Storm's metrics v2 (registerCounter & co.), served on the worker's /metrics -----------
    def _metrics(self) -> usermetrics.TaskMetrics:
        tm = self.user_metrics
        if tm is None:
            tm = self.user_metrics = usermetrics.TaskMetrics(self.topology_id, self.component_id, self.task_id)
        return tm

    def register_counter(self, name: str) -> usermetrics.Counter:
        return self._metrics().counter(name)

    def register_gauge(self, name: str, fn: Callable[[], float]) -> usermetrics.Gauge:
        return self._metrics().gauge(name, fn)

    def register_histogram(self, name: str,
                           buckets: Sequence[float] = usermetrics.VALUE_BUCKETS) -> usermetrics.Histogram:
        return self._metrics().histogram(name, buckets)

    def register_meter(self, name: str) -> usermetrics.Meter:
        return self._metrics().meter(name)

    def register_timer(self, name: str, buckets: Sequence[float] = usermetrics.TIMER_BUCKETS) -> usermetrics.Timer:
        return self._metrics().timer(name, buckets)
