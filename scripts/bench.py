#!/usr/bin/env python3
"""The benchmark: see pzq/bench.py. Example: scripts/bench.py --quick --json bench.json"""

import sys

from pzq.bench import main

if __name__ == "__main__":  # load generators are spawned processes that import this file
    sys.exit(main())
