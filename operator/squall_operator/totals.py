"""Per-executor counters summed over every worker incarnation that ran the executor (`Totals`).

Both `squall run`'s progress (run.py) and the web UI (ui/data.py) keep these; they sit here,
below both, so neither imports the other.
"""

from __future__ import annotations

from squall.models.cluster import ExecutorStats, WorkerHeartbeat, WorkerSlot

_COUNTERS = ("emitted", "transferred", "executed", "acked", "failed", "dropped", "latency_samples")


class Totals:
    """Per-executor counters summed over every worker incarnation that ran the executor.

    A heartbeat holds the counters of one worker process since it started. When a worker is
    replaced (same slot, counters start again) or an executor moves (its old slot stops
    reporting it), the last counts seen of the old incarnation are kept, so totals never go
    back. A new incarnation shows as a counter or the uptime going down.
    """

    def __init__(self) -> None:
        # (slot, executor) -> (worker uptime, latest stats) of the incarnation running now
        self.latest: dict[tuple[WorkerSlot, str], tuple[float, ExecutorStats]] = {}
        # final stats of incarnations that ended
        self.ended: list[ExecutorStats] = []
        self.current: set[tuple[WorkerSlot, str]] = set()

    def update(self, beats: dict[WorkerSlot, WorkerHeartbeat]) -> None:
        self.current = set()
        for slot, beat in beats.items():
            for key, ex in beat.executors.items():
                k = (slot, key)
                self.current.add(k)
                prev = self.latest.get(k)
                if prev is not None and (
                    beat.uptime_secs < prev[0]
                    or any(getattr(ex, c) < getattr(prev[1], c) for c in _COUNTERS)
                ):
                    self.ended.append(prev[1])
                self.latest[k] = (beat.uptime_secs, ex)

    def executor_stats(self) -> list[tuple[ExecutorStats, bool]]:
        """Every incarnation's stats, with whether it is running now (pending counts only then)."""
        out = [(ex, False) for ex in self.ended]
        out += [(ex, k in self.current) for k, (_, ex) in self.latest.items()]
        return out


__all__ = ["Totals"]
