"""Components for bench (b): a spout that emits as fast as it is asked, a bolt that only acks."""

from squall import Bolt, Spout


class NumberSpout(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        self.track = bool(conf.get("bench.ack", True))

    def next_tuple(self):
        self.n += 1
        if self.track:
            self.collector.emit([self.n], msg_id=self.n)
        else:
            self.collector.emit([self.n])


class AckBolt(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)
