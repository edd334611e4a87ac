"""A spout in Python on Storm's own adapter (storm.py): emits ids 0..test.count-1 with their id
as message id, replays an id when it fails, writes mlspout-<task>.json (the ids acked) once every
id is acked (tests/integration/test_multilang.py)."""

import collections
import json
import os

import storm


class IdSpout(storm.Spout):
    def initialize(self, conf, context):
        self.count = int(conf["test.count"])
        self.out = conf["test.out"]
        self.task = context["taskid"]
        self.todo = collections.deque(range(self.count))
        self.acked = set()
        self.failed = 0
        self.written = False

    def nextTuple(self):
        if self.todo:
            i = self.todo.popleft()
            storm.emit([i], id=i)

    def ack(self, id):
        self.acked.add(id)
        if len(self.acked) == self.count and not self.written:
            self.written = True
            path = os.path.join(self.out, "mlspout-%d.json" % self.task)
            with open(path + ".tmp", "w") as f:
                json.dump({"acked": sorted(self.acked), "failed": self.failed}, f)
            os.rename(path + ".tmp", path)

    def fail(self, id):
        self.failed += 1
        if id not in self.acked:
            self.todo.append(id)


IdSpout().run()
