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

from squall.worker.process import main

sys.exit(main())
