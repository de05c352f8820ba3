#!/usr/bin/env python3
"""A crash soak: producers and consumers run while nodes are SIGKILLed and restarted.

At the end every message a producer got an ACK "1" for must have been consumed at
least once. The report gives produced, acked, consumed, lost (must be 0),
duplicates and the restarts survived. ``--nodes 3`` soaks a cluster with
``--replicas 1``. Run it with the project's environment:

    .venv/bin/python scripts/chaos.py --seconds 600 --kills 100
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import zmq

from pzq.bench.nodes import NodeProcess, wait_until
from pzq.client import Consumer, Producer
from pzq.errors import ExitCode

EXIT_LOST = ExitCode.FAILURE  # some ACKed message was never consumed


@dataclass
class Report:
    nodes: int
    seconds: float
    produced: int = 0
    acked: int = 0
    replication_failed: int = 0
    consumed: int = 0
    lost: int = 0
    duplicates: int = 0
    restarts: int = 0


def start_nodes(directory: Path, count: int) -> list[NodeProcess]:
    args = ["--ack-timeout", "1000000", "--reaper-frequency", "200000"]
    if count == 1:
        return [NodeProcess(directory / "node0", *args).start()]
    endpoints = [f"ipc://{directory}/node{i}.cluster" for i in range(count)]
    nodes = []
    for index, endpoint in enumerate(endpoints):
        others = ",".join(e for e in endpoints if e != endpoint)
        nodes.append(NodeProcess(directory / f"node{index}", *args, "--broadcast-dsn", endpoint,
                                 "--nodes", others, "--replicas", "1",
                                 "--timeout-nodes", "1000000").start())
    return nodes


class Consuming(threading.Thread):
    """Consumes and ACKs from every node until told to stop; counts each body."""

    def __init__(self, endpoints: list[str]) -> None:
        super().__init__(daemon=True)
        self.endpoints = endpoints
        self.seen: dict[bytes, int] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        context = zmq.Context()
        with Consumer(self.endpoints, context=context) as consumer:
            while not self.stopping.is_set():
                message = consumer.receive(0.1)
                if message is not None:
                    self.seen[message.parts[0]] = self.seen.get(message.parts[0], 0) + 1
                    message.ack()
        context.destroy(linger=0)


def produce_for(nodes: list[NodeProcess], seconds: float, kills: int, report: Report,
                acked: set[bytes], rng: random.Random) -> None:
    """Send windowed streams to random nodes; SIGKILL and restart one now and then."""
    context = zmq.Context()
    kill_times = sorted(rng.uniform(0.1, 0.9) * seconds for _ in range(kills))
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        node = rng.choice(nodes)
        with Producer(node.receive_dsn, window=100, context=context) as producer:
            for _ in range(rng.randint(50, 500)):
                body = producer.next_msg_id()
                try:
                    producer.send([body], msg_id=body, timeout=2.0)
                except TimeoutError:
                    break  # the node died under us: start over on another one
                report.produced += 1
                _count_acks(producer.acks(), report, acked)
                if kill_times and time.monotonic() - started >= kill_times[0]:
                    kill_times.pop(0)
                    _kill_and_restart(rng.choice(nodes), report)
            try:
                _count_acks(producer.flush(3.0), report, acked)
            except TimeoutError:
                _count_acks(producer.acks(), report, acked)
    for _ in kill_times:  # a slow machine did not get to them while producing
        _kill_and_restart(rng.choice(nodes), report)
    context.destroy(linger=0)


def _kill_and_restart(victim: NodeProcess, report: Report) -> None:
    victim.kill()
    victim.restart()
    report.restarts += 1


def _count_acks(acks: list, report: Report, acked: set[bytes]) -> None:
    for ack in acks:
        if ack.ok:
            acked.add(ack.msg_id)
            report.replication_failed += ack.replication_failed


def run(nodes_count: int = 1, seconds: float = 10.0, kills: int = 3, seed: int = 1,
        drain_timeout: float = 60.0, directory: Path | None = None) -> Report:
    rng = random.Random(seed)
    report = Report(nodes=nodes_count, seconds=seconds)
    acked: set[bytes] = set()
    with tempfile.TemporaryDirectory(prefix="pzq-chaos-", dir=directory) as tmp:
        nodes = start_nodes(Path(tmp), nodes_count)
        consuming = Consuming([node.send_dsn for node in nodes])
        consuming.start()
        try:
            produce_for(nodes, seconds, kills, report, acked, rng)
            report.acked = len(acked)
            try:
                wait_until(lambda: acked <= consuming.seen.keys(), drain_timeout, interval=0.1,
                           message="every ACKed message consumed")
            except TimeoutError:
                pass  # reported as lost below
        finally:
            consuming.stopping.set()
            consuming.join(5)
            for node in nodes:
                if node.running:
                    node.kill()
    report.consumed = len(consuming.seen)
    report.lost = len(acked - consuming.seen.keys())
    report.duplicates = sum(count - 1 for count in consuming.seen.values())
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to produce")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs while producing")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = run(args.nodes, args.seconds, args.kills, args.seed)
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        for key, value in asdict(report).items():
            print(f"{key:>20}: {value}")
    return ExitCode.OK if report.lost == 0 else EXIT_LOST


if __name__ == "__main__":
    raise SystemExit(main())
