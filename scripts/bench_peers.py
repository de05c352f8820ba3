#!/usr/bin/env python3
"""pzq beside Redis Streams and NATS JetStream, in one run: see docs/performance.rst.
Example: scripts/bench_peers.py --count 2000 --repeats 1"""

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import sys

from pzq.bench.peers import main

if __name__ == "__main__":  # load generators are spawned processes that import this file
    sys.exit(main())
