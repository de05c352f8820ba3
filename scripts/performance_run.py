#!/usr/bin/env python3
"""The performance page's tables from one run of every benchmark (docs/performance.rst,
"How the page is made"). Example: scripts/performance_run.py --quick --out /tmp/figures"""

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import sys

from pzq.bench.performance_run import main

if __name__ == "__main__":
    sys.exit(main())
