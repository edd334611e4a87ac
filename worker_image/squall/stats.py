"""Executor counters and a latency histogram that merges across executors and heartbeats.

Latencies go into geometric buckets (8% wide), so percentiles of a whole topology can be computed
from the workers' heartbeats without shipping samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

_GROWTH = math.log(1.08)


def bucket_of(ms: float) -> int:
    # at 0.01 ms resolution, exactly like the lookup table of `Counters.latency` below 100 ms
    return int(math.log(max(int(ms * 100.0), 0) + 1.0) / _GROWTH)


def bucket_upper_ms(bucket: int) -> float:
    return (math.exp((bucket + 1) * _GROWTH) - 1.0) / 100.0


def percentile(hist: Mapping[int, int], q: float) -> float:
    total = sum(hist.values())
    if total == 0:
        return 0.0
    rank = q * total
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return bucket_upper_ms(b)
    return bucket_upper_ms(max(hist))


def merge(hists: Iterable[Mapping[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hists:
        for b, n in h.items():
            out[int(b)] = out.get(int(b), 0) + n
    return out


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
