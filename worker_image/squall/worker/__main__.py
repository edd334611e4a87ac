import os
import sys

from squall.worker import allocator

# before anything else is imported: the allocator is fixed when the process starts, so a worker
# asked for jemalloc by name re-executes itself with it preloaded here; under `auto` it decides
# once it has read its topology (squall.worker.allocator, process.main)
try:
    if allocator.decided_early(os.environ):
        allocator.select()
except ValueError as exc:
    print(f"squall worker: {exc}", file=sys.stderr)
    sys.exit(2)

from squall.worker import debugging
from squall.worker.process import main

# `squall dump-stacks` / `squall logs` answered on a thread (and ZooKeeper session) of its own,
# beside the worker rather than inside its loop: a stuck worker still shows its stacks
debugger = debugging.serve_from_argv(sys.argv[1:])
try:
    code = main()
finally:
    if debugger is not None:
        debugger.stop()
sys.exit(code)
