#!/usr/bin/env python3
"""The live path's rates beside a running replay (see docs/performance.rst, "Replays
beside live traffic").

    scripts/bench_replay.py [--archived N] [--seconds S] [--rates R,R,...] [--json FILE]

For each --replay-rate in --rates a node (a daemon, archive on) archives --archived
messages of topic ``old`` (produced, then consumed and ACKed by its group ``g``).
Then live traffic runs for --seconds: a producer (window 1000) and a consumer of
group ``l`` of topic ``live`` (window 1000, ACKs of each batch), each on its own
thread, as fast as they go. It runs twice: alone, then beside a replay of all of
``old`` to ``g``, whose consumer ACKs what it gets. The table gives the live rates
(messages a second produced and consumed), the producer's ACK latency (median and
99th percentile of the messages sent alone, one a round, between the batches) and
the replay's own rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pzq.bench.nodes import NodeProcess, wait_until
from pzq.bench.options import positive
from pzq.client import GroupConsumer, Producer, request_monitor

BODY = b"x" * 100


def archive(node: NodeProcess, count: int) -> None:
    """``count`` messages of topic old, consumed and ACKed by g: in the archive only."""
    for command in ("DECLARE TOPIC old", "DECLARE GROUP old g", "DECLARE TOPIC live",
                    "DECLARE GROUP live l"):
        request_monitor(node.monitor_dsn, command, 10)
    with Producer(node.receive_dsn, window=5000) as producer:
        for number in range(count):
            producer.send([b"%09d" % number, BODY], topic="old")
        assert all(ack.ok for ack in producer.flush(600))
    with GroupConsumer(node.consume_dsn, "old", "g", window=2000) as group:
        taken = 0
        while taken < count:
            batch = group.receive_many(2000, timeout=30)
            assert batch, f"only {taken} of {count} delivered"
            group.ack_many(batch)
            taken += len(batch)
    wait_until(lambda: node.stats()["archive"]["archived"] >= count
               and node.stats()["messages"] == 0, 600, interval=0.2)


class Load(threading.Thread):
    """One side of the live traffic, until told to stop: ``count`` messages done."""

    def __init__(self, node: NodeProcess, side: str) -> None:
        super().__init__(daemon=True)
        self.node, self.side = node, side
        self.count = 0
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        if self.side == "produce":
            self._produce()
        else:
            self._consume()

    def _produce(self) -> None:
        with Producer(self.node.receive_dsn, window=1000) as producer:
            while not self.stop.is_set():
                for _ in range(1000):
                    producer.send([BODY], topic="live")
                self.count += sum(ack.ok for ack in producer.flush(60))
                began = time.perf_counter()
                assert producer.produce([BODY], topic="live", timeout=60).ok
                self.latencies.append(time.perf_counter() - began)
                self.count += 1

    def _consume(self) -> None:
        topic, group = ("live", "l") if self.side == "consume" else ("old", "g")
        with GroupConsumer(self.node.consume_dsn, topic, group, window=1000) as consumer:
            while not self.stop.is_set():
                batch = consumer.receive_many(1000, timeout=0.2)
                consumer.ack_many(batch)
                self.count += len(batch)


def live(node: NodeProcess, seconds: float, replaying: bool) -> dict[str, float]:
    sides = ["produce", "consume"] + (["replay"] if replaying else [])
    loads = {side: Load(node, side) for side in sides}
    if replaying:
        request_monitor(node.monitor_dsn, "REPLAY GROUP old g from=earliest", 30)
    for load in loads.values():
        load.start()
    time.sleep(1.0)  # the clients joined, the pipes full
    counts = {side: load.count for side, load in loads.items()}
    latencies = len(loads["produce"].latencies)
    began = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - began
    done = {side: (load.count - counts[side]) / took for side, load in loads.items()}
    sent_alone = loads["produce"].latencies[latencies:]
    for load in loads.values():
        load.stop.set()
        load.join(60)
    result = {"produced_per_s": done["produce"], "consumed_per_s": done["consume"],
              "ack_p50_ms": statistics.median(sent_alone) * 1000,
              "ack_p99_ms": sorted(sent_alone)[int(len(sent_alone) * 0.99)] * 1000}
    if replaying:
        result["replayed_per_s"] = done["replay"]
    return result


def one_rate(rate: int, archived: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pzq-bench-replay-") as scratch:
        work = Path(scratch)
        node = NodeProcess(work / "db", "--archive-dir", str(work / "archive"),
                           "--replay-rate", str(rate), consume=True).start()
        try:
            archive(node, archived)
            return {"rate": rate, "alone": live(node, seconds, False),
                    "beside": live(node, seconds, True)}
        finally:
            node.stop()


def table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'--replay-rate':>13} {'live':<7} {'produced/s':>10} {'consumed/s':>10} "
             f"{'ACK p50':>8} {'ACK p99':>8} {'replayed/s':>10}"]
    for result in results:
        for when in ("alone", "beside"):
            row = result[when]
            replayed = f"{row['replayed_per_s']:>10.0f}" if "replayed_per_s" in row else ""
            lines.append(f"{result['rate']:>13} {when:<7} {row['produced_per_s']:>10.0f} "
                         f"{row['consumed_per_s']:>10.0f} {row['ack_p50_ms']:>6.2f}ms "
                         f"{row['ack_p99_ms']:>6.2f}ms {replayed}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archived", type=positive(int), default=50_000,
                        help="messages in the archive to replay (default: %(default)s)")
    parser.add_argument("--seconds", type=positive(float), default=10.0,
                        help="each run of live traffic (default: %(default)s)")
    parser.add_argument("--rates", default="1000,5000,20000",
                        help="the --replay-rate of each node (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        rates = [int(rate) for rate in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates {args.rates}: whole numbers separated by ','")
    results = [one_rate(rate, args.archived, args.seconds) for rate in rates]
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
