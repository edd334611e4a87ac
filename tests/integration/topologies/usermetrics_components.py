"""A bolt that registers one metric of every kind (squall.usermetrics, Storm's metrics v2), for
tests/integration/test_usermetrics_live.py. Per tuple (an integer id): the counter `tuples`
+1, the meter `ids` +2, the histogram `id_mod` gets id % 10, the timer `process` times the
emit; the gauge `last_id` is the last id seen, the gauge `broken` always raises."""

from __future__ import annotations

from squall import BasicBolt, Tuple


class MeteredBolt(BasicBolt):
    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.last = -1
        self.tuples = context.register_counter("tuples")
        self.ids = context.register_meter("ids")
        self.id_mod = context.register_histogram("id_mod", buckets=[4, 9])
        self.timer = context.register_timer("process")
        context.register_gauge("last_id", lambda: self.last)
        context.register_gauge("broken", self._broken)

    def _broken(self) -> float:
        raise RuntimeError("this gauge always fails")

    def process(self, tup: Tuple) -> None:
        i = tup.values[0]
        with self.timer.time():
            self.tuples.inc()
            self.ids.mark(2)
            self.id_mod.update(i % 10)
            self.last = i
            self.collector.emit([i])
