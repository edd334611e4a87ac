"""Components that raise on every call, for the error-throttle tests
(tests/integration/test_error_throttle_live.py)."""

from __future__ import annotations

from squall import BasicBolt, Spout, Tuple


class RaisingSpout(Spout):
    """`next_tuple` raises every time it is called."""

    outputs = ["id"]

    def next_tuple(self) -> None:
        raise ValueError("the source is broken (RaisingSpout)")


class RaisingBolt(BasicBolt):
    """`process` raises on every tuple."""

    outputs = ["id"]

    def process(self, tup: Tuple) -> None:
        raise ValueError(f"cannot process {tup.values[0]} (RaisingBolt)")
