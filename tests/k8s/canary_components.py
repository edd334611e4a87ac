"""A bolt for the canary test on the real nodes (test_canary_real_nodes.py): bench/chaos.py's
PassBolt that fails a share of its tuples, the share read from the worker's environment
(`CANARY_FAIL_FRACTION`, absent: none). A change of `spec.worker.env` makes a bad version of the
topology without a new image. Shipped beside chaos_components.py in one ConfigMap."""

from __future__ import annotations

import os

from chaos_components import PassBolt
from squall import Tuple


class FlakyPassBolt(PassBolt):
    """Fails every 1/fraction-th tuple it gets (its spout replays it), forwards the others."""

    def prepare(self, conf, context, collector):  # type: ignore[no-untyped-def]
        super().prepare(conf, context, collector)
        self.fraction = float(os.environ.get("CANARY_FAIL_FRACTION") or 0)
        self.seen = 0

    def execute(self, tup: Tuple) -> None:
        self.seen += 1
        if int(self.seen * self.fraction) > int((self.seen - 1) * self.fraction):
            self.collector.fail(tup)
            return
        super().execute(tup)
