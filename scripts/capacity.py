#!/usr/bin/env python3
"""Capacity figures for planning a deployment (see docs/deploying.rst, "Capacity"):
a node's disk per stored message, its memory per message in flight, and the
archive's disk per million messages, for bodies of each --sizes.

    scripts/capacity.py [--count N] [--inflight N] [--sizes 100,1000] [--json FILE]

For each size a fresh node (the archive on) stores --count messages of random
(incompressible) bytes on one topic, with no header but TOPIC; then:
- stored: the store directory's bytes on disk (LevelDB's tables and log) per message,
  before and after the node is restarted (a restart writes the log as tables);
- in flight: a consumer of a group (declared before the messages came) takes
  --inflight messages without acking them, then a second consumer as many, and the
  node's anonymous resident memory grows by this much per message of the second lot
  (RssAnon from /proc: LevelDB maps its tables, whose pages would count in VmRSS
  as they are read; the first lot fills what the allocator had free already);
- archive: the consumer acks them all, and the archive's bytes per million messages.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pzq.bench.nodes import NodeProcess
from pzq.bench.options import positive
from pzq.client import GroupConsumer, Message, Producer, request_monitor

ACKED_AT_ONCE = 1000  # keys in one ACK, each ACK confirmed before the next


def disk_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def resident_bytes(node: NodeProcess) -> int:
    assert node.process is not None
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc")


def consumer_of(node: NodeProcess, window: int) -> GroupConsumer:
    return GroupConsumer(node.consume_dsn, "capacity", "hold", window=window, confirm=True)


def take(consumer: GroupConsumer, wanted: int) -> list[Message]:
    """``wanted`` deliveries, held unacked; then a second for the node to settle (its
    last deliveries sent)."""
    held: list[Message] = []
    while len(held) < wanted:
        got = consumer.receive_many(wanted - len(held), timeout=60)
        if not got:
            raise SystemExit(f"{len(held)} of {wanted} delivered, then none for 60 s")
        held += got
    time.sleep(1)
    return held


def ack(consumer: GroupConsumer, held: list[Message]) -> None:
    for first in range(0, len(held), ACKED_AT_ONCE):
        consumer.ack_confirmed(held[first:first + ACKED_AT_ONCE], timeout=120)


def measure(work: Path, count: int, size: int, holding: int) -> dict[str, Any]:
    node = NodeProcess(work / "db", "--archive-dir", str(work / "archive"),
                       "--ack-timeout", "10m", consume=True).start()
    try:
        for command in ("DECLARE TOPIC capacity", "DECLARE GROUP capacity hold"):
            request_monitor(node.monitor_dsn, command, 10)
        with Producer(node.receive_dsn, window=10_000) as producer:
            for _ in range(count):
                producer.send([os.urandom(size)], topic="capacity")
            assert all(ack.ok for ack in producer.flush(600))
        stored = disk_bytes(work / "db")
        node.stop()
        node.restart()
        restarted = disk_bytes(work / "db")
        with consumer_of(node, holding) as first, consumer_of(node, holding) as second:
            held = take(first, holding)
            first_lot = resident_bytes(node)
            held_too = take(second, holding)
            inflight = resident_bytes(node) - first_lot
            ack(first, held)
            ack(second, held_too)
            while node.stats()["messages"]:
                ack(first, first.receive_many(ACKED_AT_ONCE, timeout=60))
        archive = node.stats()["archive"]["topics"]["capacity"]["bytes"]
    finally:
        node.stop()
    return {"size": size, "count": count, "store_bytes_per_message": stored / count,
            "store_bytes_per_message_restarted": restarted / count,
            "inflight": holding, "inflight_bytes_per_message": inflight / holding,
            "archive_bytes_per_million": archive / count * 1_000_000}


def sizes(text: str) -> list[int]:
    found = [int(part) for part in text.split(",") if part.strip()]
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text}: give sizes in bytes, e.g. 100,1000")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=positive(int), default=100_000,
                        help="messages stored per size (default: %(default)s)")
    parser.add_argument("--inflight", type=positive(int), default=20_000,
                        help="of those, held in flight in each of two lots, at most "
                             "half of --count (default: %(default)s)")
    parser.add_argument("--sizes", type=sizes, default=[100, 1000],
                        help="body sizes in bytes, comma-separated (default: 100,1000)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if 2 * args.inflight > args.count or args.inflight > 100_000:
        parser.error("--inflight: at most half of --count, and 100000 (a consumer's "
                     "window)")
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="pzq-capacity-") as scratch:
            rows.append(measure(Path(scratch), args.count, size, args.inflight))
    print(f"{'body':>7} {'stored B/msg':>13} {'after restart':>14} {'in flight B/msg':>16} "
          f"{'archive MB/million':>19}")
    for row in rows:
        print(f"{row['size']:>5} B {row['store_bytes_per_message']:>13.0f} "
              f"{row['store_bytes_per_message_restarted']:>14.0f} "
              f"{row['inflight_bytes_per_message']:>16.0f} "
              f"{row['archive_bytes_per_million'] / 1e6:>19.0f}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
