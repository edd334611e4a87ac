import sys

from squall.worker.runtime import main

sys.exit(main())
