#!/usr/bin/env python3
"""The live path's rates beside a running replay (see docs/performance.rst, "Replays
beside live traffic").

    scripts/bench_replay.py [--archived N] [--seconds S] [--rates R,R,...] [--json FILE]

For each --replay-rate in --rates a node (a daemon, archive on) archives --archived
messages of topic ``old`` (produced, then consumed and ACKed by its group ``g``).
Then live traffic runs for --seconds: a producer (window 1000) and a consumer of
group ``l`` of topic ``live`` (window 1000, ACKs of each batch), each a process of
its own, as fast as they go. It runs alone, then beside a replay of all of ``old``
to ``g`` whose consumer ACKs what it gets, --repeats times in turn (a new replay
each time), and the medians are shown: the live rates (messages a second produced
and consumed), the producer's ACK latency (median and 99th percentile of messages
sent alone, one a round, between its batches), the replay's own rate, and the
node's CPU: its share of one core, and its CPU time per message consumed (live and
replayed together). On a machine that other work shares, the rates move with that
work; the CPU per message moves much less.
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from multiprocessing import Process, Queue
from pathlib import Path
from typing import Any

from pzq.bench.cpu import cpu_seconds
from pzq.bench.nodes import NodeProcess, wait_until
from pzq.bench.options import output_file, positive
from pzq.client import GroupConsumer, Producer, request_monitor
from pzq.tool_base import interrupted_quietly, quiet_on_interrupt

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


def load(dsn: str, side: str, warmup: float, seconds: float, out: Queue) -> None:
    """One side of the live traffic (or the replay's consumer), in a process of its
    own: (messages done in the measured ``seconds``, latencies of messages sent alone)
    into ``out``."""
    counted = [0]
    latencies: list[float] = []
    began = time.monotonic()
    start, stop = began + warmup, began + warmup + seconds

    def count(done: int) -> None:
        if start <= time.monotonic() < stop:
            counted[0] += done

    if side == "produce":
        with Producer(dsn, window=1000) as producer:
            while time.monotonic() < stop:
                for _ in range(1000):
                    producer.send([BODY], topic="live")
                count(sum(ack.ok for ack in producer.flush(60)))
                sent = time.perf_counter()
                assert producer.produce([BODY], topic="live", timeout=60).ok
                if start <= time.monotonic() < stop:
                    latencies.append(time.perf_counter() - sent)
                count(1)
    else:
        topic, group = ("live", "l") if side == "consume" else ("old", "g")
        with GroupConsumer(dsn, topic, group, window=1000) as consumer:
            while time.monotonic() < stop:
                batch = consumer.receive_many(1000, timeout=0.2)
                consumer.ack_many(batch)
                count(len(batch))
    out.put((side, counted[0] / seconds, latencies))


def live(node: NodeProcess, seconds: float, replaying: bool) -> dict[str, float]:
    sides = {"produce": node.receive_dsn, "consume": node.consume_dsn}
    if replaying:
        sides["replay"] = node.consume_dsn
        request_monitor(node.monitor_dsn, "REPLAY GROUP old g from=earliest", 30)
    out: Queue = Queue()
    warmup = 1.5  # the clients joined, the pipes full
    workers = [Process(target=interrupted_quietly, args=(load, dsn, side, warmup, seconds, out))
               for side, dsn in sides.items()]
    assert node.process is not None
    for worker in workers:
        worker.start()
    time.sleep(warmup)
    cpu_before, began = cpu_seconds(node.process.pid), time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - began
    cpu = cpu_seconds(node.process.pid) - cpu_before
    answers = {side: (rate, latencies) for side, rate, latencies
               in (out.get(timeout=120) for _ in workers)}
    for worker in workers:
        worker.join(60)
    done = {side: rate for side, (rate, _) in answers.items()}
    sent_alone = sorted(answers["produce"][1])
    result = {"produced_per_s": done["produce"], "consumed_per_s": done["consume"],
              "ack_p50_ms": statistics.median(sent_alone) * 1000,
              "ack_p99_ms": sent_alone[int(len(sent_alone) * 0.99)] * 1000,
              "node_core_share": cpu / took,
              "node_cpu_us_per_message": cpu / max(1.0, (done["consume"]
                                                         + done.get("replay", 0)) * took) * 1e6}
    if replaying:
        result["replayed_per_s"] = done["replay"]
        request_monitor(node.monitor_dsn, "REPLAY CANCEL " + replay_id(node), 30)
    return result


def replay_id(node: NodeProcess) -> str:
    return request_monitor(node.monitor_dsn, "REPLAYS", 10).decode().split()[0]


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def one_rate(rate: int, archived: int, seconds: float, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pzq-bench-replay-") as scratch:
        work = Path(scratch)
        node = NodeProcess(work / "db", "--archive-dir", str(work / "archive"),
                           "--replay-rate", str(rate), consume=True).start()
        try:
            archive(node, archived)
            alone, beside = [], []
            for _ in range(repeats):
                alone.append(live(node, seconds, False))
                beside.append(live(node, seconds, True))
            return {"rate": rate, "alone": medians(alone), "beside": medians(beside),
                    "runs": {"alone": alone, "beside": beside}}
        finally:
            node.stop()


def table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'--replay-rate':>13} {'live':<7} {'produced/s':>10} {'consumed/s':>10} "
             f"{'ACK p50':>8} {'ACK p99':>8} {'replayed/s':>10} {'node CPU':>8} "
             f"{'µs/msg':>7}"]
    for result in results:
        for when in ("alone", "beside"):
            row = result[when]
            replayed = (f"{row['replayed_per_s']:>10.0f}" if "replayed_per_s" in row
                        else f"{'':>10}")
            lines.append(f"{result['rate']:>13} {when:<7} {row['produced_per_s']:>10.0f} "
                         f"{row['consumed_per_s']:>10.0f} {row['ack_p50_ms']:>6.2f}ms "
                         f"{row['ack_p99_ms']:>6.2f}ms {replayed} "
                         f"{row['node_core_share']:>7.0%} "
                         f"{row['node_cpu_us_per_message']:>7.0f}")
    return "\n".join(lines)


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archived", type=positive(int), default=50_000,
                        help="messages in the archive to replay (default: %(default)s)")
    parser.add_argument("--seconds", type=positive(float), default=10.0,
                        help="each run of live traffic (default: %(default)s)")
    parser.add_argument("--rates", default="1000,5000,20000",
                        help="the --replay-rate of each node (default: %(default)s)")
    parser.add_argument("--repeats", type=positive(int), default=3,
                        help="runs alone and beside a replay, in turn (default: %(default)s)")
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        rates = [int(rate) for rate in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates {args.rates}: whole numbers separated by ','")
    if min(rates) <= 0:  # the node refuses a --replay-rate of 0 at start
        parser.error(f"--rates {args.rates}: each rate above 0")
    results = [one_rate(rate, args.archived, args.seconds, args.repeats) for rate in rates]
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
