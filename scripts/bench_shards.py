#!/usr/bin/env python3
"""Shards on one host: the same keyed load through ``pzq --shards 2`` and through one node.

    .venv/bin/python scripts/bench_shards.py             # about two minutes
    .venv/bin/python scripts/bench_shards.py --count 40000 --repeats 5 --json shards.json

A topic of 16 partitions; ``--workers`` routing producers (RoutedProducer, 256 keys
each, window 100, 100 B) and as many routing group consumers (RoutedGroupConsumer,
receive_many and ack_many of up to 100). Three figures per run: produce (messages
stored and ACKed per second), drain (the stored backlog delivered and ACKed per
second), and end to end (produce and consume at once: rate, p50 and p99 from send to
delivery). Node CPU per message is all shards' together. One node and the shards run
one after the other, on fresh stores, ``--repeats`` times; each ratio is taken within a
repeat, and the table gives the median and the range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pzq.bench.options import positive  # noqa: E402
from pzq.bench.shards import ShardFigures, Shards, cores, free_base_port, measure_shards  # noqa: E402

FIGURES = (("produce", "produce_rate", "msg/s", True), ("drain", "drain_rate", "msg/s", True),
           ("end to end", "end_to_end_rate", "msg/s", True),
           ("end to end p50", "p50_ms", "ms", False), ("end to end p99", "p99_ms", "ms", False),
           ("node CPU, produce", "node_us_produce", "µs/msg", False),
           ("node CPU, drain", "node_us_drain", "µs/msg", False))


def run_once(shards: int, directory: Path, args: argparse.Namespace) -> ShardFigures:
    running = Shards(shards, directory / f"shards-{shards}", free_base_port(shards)).start()
    try:
        running.declare()
        return measure_shards(running, args.count, args.workers, 100, 100)
    finally:
        running.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=positive(int), default=20_000, help="messages per figure")
    parser.add_argument("--workers", type=positive(int), default=2,
                        help="producers, and consumers, each a process of its own")
    parser.add_argument("--shards", type=positive(int), default=2, help="shards against one node")
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    print(f"{cores()} cores; {args.count} messages of 100 B per figure, {args.workers} "
          f"producers and {args.workers} consumers, {args.repeats} repeats", flush=True)
    runs: list[tuple[ShardFigures, ShardFigures]] = []
    with tempfile.TemporaryDirectory(prefix="pzq-bench-shards-") as folder:
        for repeat in range(args.repeats):
            one = run_once(1, Path(folder) / f"r{repeat}", args)
            many = run_once(args.shards, Path(folder) / f"r{repeat}", args)
            runs.append((one, many))
            print(f"repeat {repeat + 1}: produce {one.produce_rate:,.0f} -> "
                  f"{many.produce_rate:,.0f} msg/s, drain {one.drain_rate:,.0f} -> "
                  f"{many.drain_rate:,.0f} msg/s", flush=True)
    print(f"\n{'figure':<20}{'1 node':>14}{f'{args.shards} shards':>14}{'ratio':>8}"
          f"{'range':>14}")
    table = {}
    for label, name, unit, _ in FIGURES:
        singles = [getattr(one, name) for one, _ in runs]
        shards = [getattr(many, name) for _, many in runs]
        ratios = [b / a if a else 0.0 for a, b in zip(singles, shards, strict=True)]
        table[label] = {"one": statistics.median(singles), "shards": statistics.median(shards),
                        "ratio": statistics.median(ratios), "unit": unit}
        print(f"{label:<20}{statistics.median(singles):>10,.1f} {unit:<3}"
              f"{statistics.median(shards):>10,.1f} {unit:<3}{statistics.median(ratios):>8.2f}"
              f"{f'{min(ratios):.2f}-{max(ratios):.2f}':>14}")
    if args.json:
        args.json.write_text(json.dumps({"figures": table, "runs": [
            {"one": asdict(one), "shards": asdict(many)} for one, many in runs]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
