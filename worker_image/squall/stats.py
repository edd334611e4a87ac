"""Executor counters and a latency histogram that merges across executors and heartbeats.

Latencies go into geometric buckets (8% wide), so percentiles of a whole topology can be computed
from the workers' heartbeats without shipping samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

# the per-tuple part (counters, the bucket of a latency) is compiled with the hot path
from squall.counters import _GROWTH, Counters as Counters, bucket_of as bucket_of

__all__ = ["Counters", "bucket_of", "bucket_upper_ms", "merge", "percentile"]


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
