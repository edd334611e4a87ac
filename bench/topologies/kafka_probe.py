"""bench/kafka_where.py --probe: a KafkaSpout that logs, every 2 s, its next_tuple calls, its polls
of the client's prefetch queue and how many came back empty, the records they got, and its calls
made at maxSpoutPending (a warning line "PROBE ..." in the worker's log)."""

import logging
import time

from squall.kafka.spout import KafkaSpout

log = logging.getLogger("squall.kprobe")


class ProbeSpout(KafkaSpout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.p_calls = self.p_polls = self.p_empty = self.p_full = self.p_got = 0
        self.p_nobuf = 0
        self.p_t = time.monotonic()
        self.p_room0 = 0

    def _poll(self):
        self.p_polls += 1
        n = len(self.buffer)
        super()._poll()
        got = len(self.buffer) - n
        self.p_got += got
        if got == 0:
            self.p_empty += 1

    def next_tuple(self):
        self.p_calls += 1
        if self.max_pending is not None and len(self.in_flight) >= self.max_pending:
            self.p_full += 1
        super().next_tuple()
        now = time.monotonic()
        if now - self.p_t > 2:
            log.warning("PROBE %.1fs calls=%d polls=%d empty=%d got=%d at_pending=%d inflight=%d buf=%d",
                        now - self.p_t, self.p_calls, self.p_polls, self.p_empty, self.p_got, self.p_full,
                        len(self.in_flight), len(self.buffer))
            self.p_calls = self.p_polls = self.p_empty = self.p_full = self.p_got = 0
            self.p_t = now
