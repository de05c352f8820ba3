#!/usr/bin/env python3
"""The benchmark (pzq-bench): see docs/performance.rst. Example: scripts/bench.py --quick"""

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import sys

from pzq.cli.bench import main

if __name__ == "__main__":  # load generators are spawned processes that import this file
    sys.exit(main())
