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


class GreedyBolt(BasicBolt):
    """Registers a metric per name for 10^6 names on its first tuple (a metric per user id, say):
    the task's bound refuses the 1001st with a MetricError, which the executor reports as the
    component's error; it then counts its tuples and passes them on."""

    outputs = ["id"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.context = context
        self.greedy = True
        self.seen = context.register_counter("seen")

    def process(self, tup: Tuple) -> None:
        if self.greedy:
            self.greedy = False
            for i in range(10**6):
                self.context.register_counter(f"user_{i}")
        self.seen.inc()
        self.collector.emit([tup.values[0]])
