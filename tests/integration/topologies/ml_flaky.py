"""A bolt in Python on Storm's own adapter (storm.py) that misbehaves once per task: its first
process exits (code 3) after test.after tuples, its second hangs there; later ones forward every
id, anchored, and ack (tests/integration/test_multilang.py). Each start leaves a marker file."""

import os
import time

import storm


class FlakyBolt(storm.BasicBolt):
    def initialize(self, conf, context):
        self.after = int(conf["test.after"])
        out, task = conf["test.out"], context["taskid"]
        starts = [f for f in os.listdir(out) if f.startswith("mlflaky-%d-" % task)]
        self.start = len(starts) + 1
        open(os.path.join(out, "mlflaky-%d-%d" % (task, os.getpid())), "w").close()
        self.seen = 0

    def process(self, tup):
        self.seen += 1
        if self.seen > self.after:
            if self.start == 1:
                os._exit(3)
            if self.start == 2:
                time.sleep(3600)
        storm.emit([tup.values[0]])


FlakyBolt().run()
