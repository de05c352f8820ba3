#!/usr/bin/env python3
"""The benchmark (pzq-bench): see docs/performance.rst. Example: scripts/bench.py --quick"""

import sys

from pzq.cli.bench import main

if __name__ == "__main__":  # load generators are spawned processes that import this file
    sys.exit(main())
