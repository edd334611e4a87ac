"""A bolt speaking Storm's multilang JSON by hand (tests/integration/test_multilang.py): forwards
every id, anchored, and acks it; its first process hangs on the first heartbeat that comes alone
(the bolt idle, between tuples), later ones answer it. Each start leaves a marker file."""

import json
import os
import sys
import time


def read():
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        if line == "end\n":
            return json.loads("".join(lines))
        lines.append(line)


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\nend\n")
    sys.stdout.flush()


setup = read()
open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
out, task = setup["conf"]["test.out"], setup["context"]["taskid"]
first = not any(f.startswith("mlidle-%d-" % task) for f in os.listdir(out))
open(os.path.join(out, "mlidle-%d-%d" % (task, os.getpid())), "w").close()
send({"pid": os.getpid()})
after_tuple = False
while True:
    m = read()
    if isinstance(m, list):
        continue
    if m["stream"] == "__heartbeat":
        if first and not after_tuple:
            time.sleep(3600)
        after_tuple = False
        send({"command": "sync"})
        continue
    after_tuple = True
    send({"command": "emit", "anchors": [m["id"]], "tuple": m["tuple"], "need_task_ids": False})
    send({"command": "ack", "id": m["id"]})
