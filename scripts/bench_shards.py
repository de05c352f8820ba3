#!/usr/bin/env python3
"""Shards on one host: the same keyed load through ``pzq --shards 2`` and through one node.

    .venv/bin/python scripts/bench_shards.py             # about two minutes
    .venv/bin/python scripts/bench_shards.py --count 40000 --repeats 5 --json shards.json

(``pzq-bench --shards 2`` runs the same.) A topic of 16 partitions; ``--workers``
routing producers (RoutedProducer, 256 keys each, window 100, 100 B) and as many
routing group consumers (RoutedGroupConsumer, receive_many and ack_many of up to 100).
Three figures per run: produce (messages stored and ACKed per second), drain (the
stored backlog delivered and ACKed per second), and end to end (produce and consume
at once: rate, p50 and p99 from send to delivery). Node CPU per message is all
shards' together. One node and the shards run one after the other, on fresh stores,
``--repeats`` times; each ratio is taken within a repeat, and the table gives the
median and the range.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pzq.bench.options import output_file, positive  # noqa: E402
from pzq.bench.shards import compare_shards  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402


@quiet_on_interrupt
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=positive(int), default=20_000,
                        help="messages per figure")
    parser.add_argument("--workers", type=positive(int), default=2,
                        help="producers, and consumers, each a process of its own")
    parser.add_argument("--shards", type=positive(int), default=2,
                        help="shards against one node")
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--replicas", type=int, default=0,
                        help="copies on other shards before each ACK (one node has none)")
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args()
    if not 0 <= args.replicas < args.shards:
        parser.error("--replicas must be 0 or more and below --shards (copies go to the other "
                     "shards)")
    compare_shards(args.shards, args.count, args.workers, args.repeats, args.json,
                   args.replicas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
