"""An executor's counters and the latency buckets they fill: bumped for every tuple.

A module of its own so that setup.py compiles it with mypyc together with the executors
(`squall._native`): a compiled collector bumps `emitted` or `acked` as a field of a C struct
instead of through an interpreted object's attribute lookups, several times per tuple.
`squall.stats` re-exports all of it beside the histogram arithmetic (percentiles, merging
heartbeats), which stays plain Python. Plain Python when the hot path is not compiled.
"""

from __future__ import annotations

import math

_GROWTH = math.log(1.08)


def bucket_of(ms: float) -> int:
    # at 0.01 ms resolution, exactly like the lookup table of `Counters.latency` below 100 ms
    return int(math.log(max(int(ms * 100.0), 0) + 1.0) / _GROWTH)


# bucket of every latency below 100 ms at 0.01 ms resolution, so the hot path needs no log()
_LUT = [int(math.log(i + 1.0) / _GROWTH) for i in range(10000)]


class Counters:
    """Plain counters an executor thread bumps; the heartbeat thread reads them (racy reads of
    ints are fine: a heartbeat is a snapshot)."""

    __slots__ = ("emitted", "transferred", "executed", "acked", "failed", "dropped", "lat_sum", "lat_n", "hist")

    def __init__(self) -> None:
        self.emitted = 0
        self.transferred = 0
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.dropped = 0
        self.lat_sum = 0.0
        self.lat_n = 0
        self.hist: dict[int, int] = {}

    def latency(self, ms: float) -> None:
        self.lat_sum += ms
        self.lat_n += 1
        i = int(ms * 100.0)
        b = _LUT[i] if 0 <= i < 10000 else bucket_of(max(ms, 0.0))
        self.hist[b] = self.hist.get(b, 0) + 1


__all__ = ["Counters", "bucket_of"]
