#!/usr/bin/env python3
"""Capacity figures for planning a deployment (see docs/deploying.rst, "Capacity"):
a node's disk per stored message, its memory per message in flight, and the
archive's disk per million messages, for bodies of each --sizes.

    scripts/capacity.py [--count N] [--sizes 100,1000] [--json FILE]

For each size, --count messages of random (incompressible) bytes on one topic, with
no header but TOPIC:
- stored: a node (the archive on) stores them; its store directory's bytes on disk
  per message as written, in LevelDB's log (measured once the log holds half of
  its limit, or all of them if fewer), and after the node is restarted (a restart
  writes the log as tables);
- archive: a consumer of a group takes a tenth of them and acks them, and the
  archive's bytes per million messages acked;
- waiting and in flight: the node's state, built as the daemon builds it
  (pzq.node.state), on a store of its own in this process, stores every message
  (waiting: what stays allocated per message stored and not yet delivered), then
  sends every one to a consumer that takes them all and acks none (--inflight-size
  out of the way); tracemalloc counts what stays allocated per delivery (in flight:
  the record it keeps and its bookkeeping). (A process's resident memory says
  little here: LevelDB's caches and the allocator's free lists move it by more
  than the deliveries do.)
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import gc
import json
import os
import tempfile
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pzq.bench.nodes import NodeProcess
from pzq.bench.options import output_file, positive
from pzq.client import GroupConsumer, Producer, request_monitor
from pzq.clock import Now
from pzq.node.options import build_config
from pzq.node.state import NodeState
from pzq.store import record
from pzq.store.leveldb import WRITE_BUFFER
from pzq.store.store import Store
from pzq.tool_base import quiet_on_interrupt

ACKED_AT_ONCE = 1000  # keys in one ACK, each ACK confirmed before the next


def messages_in_one_log(size: int) -> int:
    """Messages of ``size`` bytes that fill half of LevelDB's write buffer, the log's
    limit (a record's key, headers and the memtable's own bytes: under 200 B)."""
    return WRITE_BUFFER // 2 // (size + 200)


def disk_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def stored_and_archived(work: Path, count: int, size: int) -> dict[str, float]:
    node = NodeProcess(work / "db", "--archive-dir", str(work / "archive"), consume=True).start()
    try:
        for command in ("DECLARE TOPIC capacity", "DECLARE GROUP capacity hold"):
            request_monitor(node.monitor_dsn, command, 10)
        with Producer(node.receive_dsn, window=10_000) as producer:
            # as written: no more than the log holds before LevelDB writes it as a table
            # in the background (the directory then holds both for a while, so a count
            # past it measured 1 092 or 1 737 B a 1 000 B message from run to run)
            in_log = min(count, messages_in_one_log(size))
            for sent in range(count):
                producer.send([os.urandom(size)], topic="capacity")
                if sent + 1 == in_log:
                    assert all(ack.ok for ack in producer.flush(600))
                    stored = disk_bytes(work / "db")
            assert all(ack.ok for ack in producer.flush(600))
        node.stop()
        node.restart()
        restarted = disk_bytes(work / "db")
        acked = 0
        with GroupConsumer(node.consume_dsn, "capacity", "hold", window=ACKED_AT_ONCE,
                           confirm=True) as consumer:
            while acked < count // 10:
                got = consumer.receive_many(ACKED_AT_ONCE, timeout=60)
                if not got:
                    raise SystemExit(f"{acked} delivered and acked, then none for 60 s")
                consumer.ack_confirmed(got, timeout=120)
                acked += len(got)
        archive = node.stats()["archive"]["topics"]["capacity"]["bytes"]
    finally:
        node.stop()
    return {"store_bytes_per_message": stored / in_log, "store_messages_as_written": in_log,
            "store_bytes_per_message_restarted": restarted / count,
            "archive_bytes_per_million": archive / acked * 1_000_000}


def node_memory(work: Path, count: int, size: int) -> dict[str, float]:
    """Bytes that stay allocated in the node's process per message stored and
    waiting, and per delivery in flight (LevelDB's own memory is not Python's: its
    write buffer and caches are bounded by their settings, not by the messages)."""
    config = build_config({"database": str(work / "db"), "inflight_size": 1 << 40,
                           "prefetch": count}, None)
    store = Store.open(work / "db")
    try:
        node = NodeState(config, store, Now.read())
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        batch = store.begin()
        for number in range(count):
            value = record.encode(b"%d" % number, (b"TOPIC:capacity",), (os.urandom(size),),
                                  stored_us=Now.read().wall_us)
            node.requeued(batch, batch.add_message(value), value)  # into its topic
            if number % 5_000 == 4_999:
                store.commit(batch)
                batch = store.begin()
        store.commit(batch)
        del batch, value
        gc.collect()
        stored = tracemalloc.get_traced_memory()[0]
        sent = node.delivery.deliver(lambda frames: True, Now.read().wall_us, count)
        gc.collect()
        in_flight = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert sent == count == len(node.delivery.inflight), (sent, count)
        return {"waiting_bytes_per_message": (stored - before) / count,
                "inflight_bytes_per_message": (in_flight - stored) / count}
    finally:
        store.close()


def sizes(text: str) -> list[int]:
    found = [int(part) for part in text.split(",") if part.strip()]
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text}: give sizes in bytes, e.g. 100,1000")
    return found


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=positive(int), default=100_000,
                        help="messages per size (default: %(default)s)")
    parser.add_argument("--sizes", type=sizes, default=[100, 1000],
                        help="body sizes in bytes, comma-separated (default: 100,1000)")
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="pzq-capacity-") as scratch:
            work = Path(scratch)
            row: dict[str, Any] = {"size": size, "count": args.count,
                                   **stored_and_archived(work / "node", args.count, size)}
            row.update(node_memory(work / "state", args.count, size))
            rows.append(row)
    print(f"{'body':>7} {'stored B/msg':>13} {'restarted B/msg':>16} {'waiting, memory B/msg':>22} "
          f"{'in flight B/msg':>16} {'archive MB/million':>19}")
    for row in rows:
        print(f"{row['size']:>5} B {row['store_bytes_per_message']:>13.0f} "
              f"{row['store_bytes_per_message_restarted']:>16.0f} "
              f"{row['waiting_bytes_per_message']:>22.2f} "
              f"{row['inflight_bytes_per_message']:>16.0f} "
              f"{row['archive_bytes_per_million'] / 1e6:>19.0f}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
