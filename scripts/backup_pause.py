#!/usr/bin/env python3
"""How long a backup holds a node's loop: a node with --stored messages (1 000 000 by
default), probed before and during a backup (see docs/operations.rst, "Backup and
restore").

    scripts/backup_pause.py [--stored N] [--size BYTES] [--probe-seconds S] [--json FILE]

Two probes run side by side, each on its own thread and socket: PING on the monitor
socket, and a producer sending one message at a time (each waits for its ACK, so
it measures a whole wake: intake, write, ACK). Each probe's longest and 99th
percentile round trip is taken for --probe-seconds without a backup, then for as
long as the backup runs, and set beside the node's own figures: the longest step of
the backup on the loop's thread, in wall time and in that thread's CPU time (STATS
backup ``longest_step_ms`` and ``most_step_cpu_ms``, the beginning included).
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from pzq.bench.nodes import NodeProcess, wait_until
from pzq.bench.options import output_file, positive
from pzq.client import Producer, request_monitor
from pzq.tool_base import quiet_on_interrupt


def fill(node: NodeProcess, count: int, size: int) -> float:
    """Store ``count`` messages of ``size`` bytes; returns the seconds it took."""
    began = time.monotonic()
    with Producer(node.receive_dsn, window=20_000) as producer:
        for number in range(count):
            producer.send([b"%09d" % number + b"x" * max(0, size - 9)], topic="stored")
            if number % 10_000 == 0:
                assert all(ack.ok for ack in producer.acks())
        assert all(ack.ok for ack in producer.flush(600))
    return time.monotonic() - began


class Probe(threading.Thread):
    """Round trips of one kind, back to back, until told to stop."""

    def __init__(self, make: Callable[[zmq.Context[Any]], Callable[[], None]]) -> None:
        super().__init__(daemon=True)
        self.make = make
        self.rounds: list[float] = []
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        context: zmq.Context[Any] = zmq.Context()
        try:
            once = self.make(context)
            self.ready.set()
            while not self.stop.is_set():
                began = time.perf_counter()
                once()
                self.rounds.append(time.perf_counter() - began)
        finally:
            context.destroy(linger=0)


def ping(dsn: str) -> Callable[[zmq.Context[Any]], Callable[[], None]]:
    def make(context: zmq.Context[Any]) -> Callable[[], None]:
        return lambda: None if request_monitor(dsn, "PING", 10) == b"PONG" else None
    return make


def produce_one(dsn: str) -> Callable[[zmq.Context[Any]], Callable[[], None]]:
    def make(context: zmq.Context[Any]) -> Callable[[], None]:
        producer = Producer(dsn, window=1, context=context)

        def once() -> None:
            assert producer.produce([b"probe"], topic="probe", timeout=60).ok
        return once
    return make


def probed(node: NodeProcess, run: Callable[[], None]) -> dict[str, dict[str, float]]:
    """Both probes' figures while ``run`` runs."""
    probes = {"ping": Probe(ping(node.monitor_dsn)),
              "produce": Probe(produce_one(node.receive_dsn))}
    for probe in probes.values():
        probe.start()
        probe.ready.wait(10)
    run()
    for probe in probes.values():
        probe.stop.set()
        probe.join(60)
    return {name: figures(probe.rounds) for name, probe in probes.items()}


def figures(rounds: list[float]) -> dict[str, float]:
    ordered = sorted(rounds)
    return {"rounds": len(ordered), "median_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000, "max_ms": ordered[-1] * 1000}


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored", type=positive(int), default=1_000_000,
                        help="messages stored before the backup (default: %(default)s)")
    parser.add_argument("--size", type=positive(int), default=100,
                        help="bytes of each stored message (default: %(default)s)")
    parser.add_argument("--probe-seconds", type=positive(float), default=10.0,
                        help="the probes' run without a backup (default: %(default)s)")
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pzq-backup-pause-") as scratch:
        work = Path(scratch)
        node = NodeProcess(work / "db", "--archive-dir", str(work / "archive")).start()
        try:
            filled = fill(node, args.stored, args.size)
            baseline = probed(node, lambda: time.sleep(args.probe_seconds))
            state: dict[str, Any] = {}

            def backup() -> None:
                request_monitor(node.monitor_dsn, f"BACKUP {work / 'copy'}", 30)
                state.update(wait_until(lambda: done(node), 3600, interval=0.2))

            during = probed(node, backup)
        finally:
            node.stop()
    result = {"stored": args.stored, "size": args.size, "fill_seconds": filled,
              "backup": state, "baseline": baseline, "during": during}
    print(table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def done(node: NodeProcess) -> dict[str, Any] | None:
    status = node.stats()["backup"]
    if status["state"] == "running":
        return None
    if status["state"] != "done":
        raise SystemExit(f"the backup failed: {status['error']}")
    return dict(status)


def table(result: dict[str, Any]) -> str:
    backup = result["backup"]
    lines = [f"{result['stored']:,} messages of {result['size']} B stored "
             f"(in {result['fill_seconds']:.1f} s); backup {backup['seconds']:.2f} s, "
             f"{backup['store_keys']:,} keys, {backup['store_bytes'] / 1e6:.1f} MB",
             f"longest backup step: {backup['longest_step_ms']:.1f} ms "
             f"({backup['longest_step_phase']}); CPU of one step: at most "
             f"{backup['most_step_cpu_ms']:.1f} ms, {backup['mean_step_cpu_ms']:.2f} ms on "
             f"average over {backup['steps']:,} steps",
             f"{'probe':<10} {'':<8} {'rounds':>7} {'median':>9} {'p99':>9} {'max':>9}"]
    for name in ("ping", "produce"):
        for when in ("baseline", "during"):
            row = result[when][name]
            lines.append(f"{name:<10} {when:<8} {row['rounds']:>7} {row['median_ms']:>7.2f}ms"
                         f" {row['p99_ms']:>7.2f}ms {row['max_ms']:>7.2f}ms")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
