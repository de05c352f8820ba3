#!/usr/bin/env python3
"""A soak: producers and consumers run while nodes are SIGKILLed and restarted, cut
off from their peers and healed, and have their store's disk filled and freed.

At the end every message a producer got an ACK "1" for must have been consumed at
least once. The report gives produced, ACKed (and of those with
REPLICATION_FAILED), refused ("0", e.g. while a disk was full), consumed, lost
(must be 0), duplicates, the longest time nothing was delivered, and the faults
survived. ``--nodes 3`` soaks a cluster with ``--replicas 1`` whose cluster links
run through fault-injecting TCP proxies (tests/support/faultproxy.py), so partitions are
real cuts of TCP traffic; ``--disk-fulls`` puts each node's store on a tmpfs of
its own (root only). Faults come one at a time, at random moments. Run it with
the project's environment:

    .venv/bin/python scripts/chaos.py --seconds 600 --kills 100
    .venv/bin/python scripts/chaos.py --nodes 3 --seconds 600 --kills 30 \\
        --partitions 30 --disk-fulls 30
"""

from __future__ import annotations

# isort: off
import project_env  # noqa: F401  (first: runs this in the project's environment)
# isort: on
import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from pzq.bench.nodes import NodeProcess, wait_until  # noqa: E402
from pzq.client import Consumer, Producer, ProducerAck  # noqa: E402
from pzq.errors import ExitCode  # noqa: E402
from pzq.tool_base import quiet_on_interrupt  # noqa: E402
from tests.support.partition_cluster import ClusterTimings, ProxiedCluster  # noqa: E402
from tests.support.small_disks import mount_tmpfs, unmount_lazily  # noqa: E402

EXIT_LOST = ExitCode.FAILURE  # some ACKed message was never consumed
OVERTIME_SECONDS = 60.0  # how long producing may go on past --seconds for --at-least
STORE_DISK_MB = 64  # each node's store filesystem with --disk-fulls
FAULT_SECONDS = (0.5, 3.0)  # how long a partition or a full disk lasts
NODE_ARGS = ["--ack-timeout", "1000000", "--reaper-frequency", "200000"]
CLUSTER_TIMINGS = ClusterTimings(timeout_nodes_us=1_000_000, ack_timeout_us=1_000_000,
                                 timeout_replication_us=500_000, reaper_frequency_us=200_000)


@dataclass(frozen=True)
class StoreModes:
    """How every node of a soak keeps what it is given: ``hard_sync`` (an fsync a
    batch) and ``archive`` (acked messages archived, each node into a directory
    beside its store)."""

    hard_sync: bool = False
    archive: bool = False

    def args(self, directory: Path, index: int) -> list[str]:
        """The options of the node of that index, whose scratch is ``directory``."""
        return ((["--hard-sync"] if self.hard_sync else [])
                + (["--archive-dir", str(directory / f"archive{index}")] if self.archive
                   else []))


NO_MODES = StoreModes()  # the defaults: a timed fsync, no archive


def add_store_modes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hard-sync", action="store_true",
                        help="run the nodes with --hard-sync (an fsync a batch)")
    parser.add_argument("--archive", action="store_true",
                        help="run the nodes with the archive on (--archive-dir)")


def store_modes(args: argparse.Namespace) -> StoreModes:
    return StoreModes(args.hard_sync, args.archive)


class Unavailable(Exception):
    """A fault asked for cannot be made here (no root for tmpfs, one node to cut)."""


@dataclass
class Report:
    nodes: int
    seconds: float
    produced: int = 0
    acked: int = 0
    replication_failed: int = 0  # of the ACKed, those with REPLICATION_FAILED
    refused: int = 0  # answered "0"
    consumed: int = 0
    lost: int = 0
    duplicates: int = 0
    longest_gap_s: float = 0.0  # the longest time without a delivery
    restarts: int = 0
    partitions: int = 0
    disk_fulls: int = 0


class ProducerTally(Protocol):
    """What producing counts (in Report, and in the groups soak's report)."""

    produced: int
    refused: int
    replication_failed: int


class StoreDisks:
    """A small tmpfs per node for its store, filled and freed on demand."""

    def __init__(self, places: list[Path]) -> None:
        self.places = places
        self.mounted: list[Path] = []

    def mount(self) -> None:
        for place in self.places:
            refused = mount_tmpfs(place, STORE_DISK_MB)
            if refused is not None:
                raise Unavailable(f"--disk-fulls needs a tmpfs per node (root): {refused}")
            self.mounted.append(place)

    def fill(self, index: int) -> Path:
        """Take every free byte of node ``index``'s store disk; returns the filler."""
        filler = self.places[index] / "filler"
        descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (1 << 20, 4096, 1):
                block = b"\0" * chunk
                try:
                    while True:
                        os.write(descriptor, block)
                except OSError:
                    continue  # full at this size: try a smaller one
        finally:
            os.close(descriptor)
        return filler

    def unmount(self) -> None:
        unmount_lazily(self.mounted)


class Consuming(threading.Thread):
    """Consumes and ACKs from every node until told to stop; counts each body and
    keeps the longest time between two deliveries."""

    def __init__(self, endpoints: list[str]) -> None:
        super().__init__(daemon=True)
        self.endpoints = endpoints
        self.seen: dict[bytes, int] = {}
        self.longest_gap = 0.0
        self.stopping = threading.Event()
        self.idle_is_expected = threading.Event()  # set once producing ended

    def run(self) -> None:
        context = zmq.Context()
        last = time.monotonic()
        with Consumer(self.endpoints, context=context) as consumer:
            while not self.stopping.is_set():
                message = consumer.receive(0.1)
                now = time.monotonic()
                if message is None:
                    if self.idle_is_expected.is_set():
                        last = now
                    continue
                self.longest_gap = max(self.longest_gap, now - last)
                last = now
                self.seen[message.parts[0]] = self.seen.get(message.parts[0], 0) + 1
                message.ack()
        context.destroy(linger=0)


class Nodes:
    """The nodes under test and the faults they can be given."""

    def __init__(self, directory: Path, count: int, disk_fulls: bool, replicas: int = 1,
                 consume: bool = False, node_args: Sequence[str] = NODE_ARGS,
                 timings: ClusterTimings = CLUSTER_TIMINGS,
                 cluster_args: tuple[str, ...] = (),
                 modes: StoreModes = NO_MODES) -> None:
        """``consume`` serves consumer groups (--consume-dsn) too; ``cluster_args`` are
        more options for each node of a cluster (``timings`` give its clocks);
        ``modes`` those of every node's store."""
        self.disks = StoreDisks([directory / f"node{i}" for i in range(count)]) \
            if disk_fulls else None
        self.cluster: ProxiedCluster | None = None
        if self.disks is not None:
            self.disks.mount()
        if count == 1:
            self.members = [NodeProcess(directory / "node0", *node_args,
                                        *modes.args(directory, 0), consume=consume)]
        else:
            self.cluster = ProxiedCluster(directory, count, replicas, timings,
                                          log_level="info", consume=consume,
                                          extra_args=cluster_args,
                                          own_args=partial(modes.args, directory))
            self.members = list(self.cluster.nodes)

    def start(self) -> None:
        if self.cluster is not None:
            self.cluster.start()
        else:
            self.members[0].start()

    def kill_and_restart(self, index: int, rng: random.Random) -> None:
        self.members[index].kill()
        self.members[index].restart()

    def partition(self, index: int, rng: random.Random) -> None:
        assert self.cluster is not None
        if rng.random() < 0.5:
            self.cluster.isolate(index)
        else:  # one way only: what ``index`` sends to one peer vanishes
            self.cluster.cut_one_way(index, rng.choice(self.cluster.others(index)))
        time.sleep(rng.uniform(*FAULT_SECONDS))  # the fault's length, not a wait for state
        self.cluster.heal()

    def disk_full(self, index: int, rng: random.Random) -> None:
        assert self.disks is not None
        filler = self.disks.fill(index)
        time.sleep(rng.uniform(*FAULT_SECONDS))  # the fault's length
        filler.unlink()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        for node in self.members:
            if node.running:
                node.kill()
        if self.disks is not None:
            self.disks.unmount()


class Faults(threading.Thread):
    """Gives the faults, one at a time, at random moments of the producing time."""

    def __init__(self, nodes: Nodes, seconds: float, plan: dict[str, int], report: object,
                 rng: random.Random,
                 more_actions: dict[str, Callable[[int, random.Random], None]] | None = None
                 ) -> None:
        """``more_actions`` adds faults or replaces these (by the report's field names)."""
        super().__init__(daemon=True)
        actions: dict[str, Callable[[int, random.Random], None]] = {
            "restarts": nodes.kill_and_restart, "partitions": nodes.partition,
            "disk_fulls": nodes.disk_full, **(more_actions or {})}
        self.schedule = sorted((rng.uniform(0.1, 0.9) * seconds, name, actions[name])
                               for name, count in plan.items() for _ in range(count))
        self.nodes, self.report, self.rng = nodes, report, rng
        self.error: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            for at, name, action in self.schedule:
                time.sleep(max(0.0, started + at - time.monotonic()))  # the moment chosen
                action(self.rng.randrange(len(self.nodes.members)), self.rng)
                setattr(self.report, name, getattr(self.report, name) + 1)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def produce_for(nodes: list[NodeProcess], seconds: float, report: ProducerTally,
                acked: set[bytes], rng: random.Random, topic: str | None = None,
                rate: float | None = None, at_least: int = 0) -> None:
    """Send windowed streams to random nodes (to ``topic``, at most ``rate`` messages
    a second if given) for ``seconds``, and on until ``at_least`` messages were ACKed
    (for at most OVERTIME_SECONDS more); a node that stops answering is left for
    another one."""
    context = zmq.Context()
    started = time.monotonic()

    def producing() -> bool:
        elapsed = time.monotonic() - started
        return elapsed < seconds or (len(acked) < at_least
                                     and elapsed < seconds + OVERTIME_SECONDS)

    while producing():
        node = rng.choice(nodes)
        with Producer(node.receive_dsn, window=100, context=context) as producer:
            for _ in range(rng.randint(50, 500)):
                if rate is not None:
                    _pace(started, report.produced, rate)
                body = producer.next_msg_id()
                try:
                    producer.send([body], msg_id=body, timeout=2.0, topic=topic)
                except TimeoutError:
                    break  # the node died under us: start over on another one
                report.produced += 1
                _count_acks(producer.acks(), report, acked)
            try:
                _count_acks(producer.flush(3.0), report, acked)
            except TimeoutError:
                _count_acks(producer.acks(), report, acked)
    context.destroy(linger=0)


def _pace(started: float, sent: int, rate: float) -> None:
    """Hold the next send until its turn at ``rate`` messages a second."""
    time.sleep(max(0.0, started + sent / rate - time.monotonic()))  # pacing, not a wait


def _count_acks(acks: list[ProducerAck], report: ProducerTally, acked: set[bytes]) -> None:
    for ack in acks:
        if ack.ok:
            acked.add(ack.msg_id)
            report.replication_failed += ack.replication_failed
        else:
            report.refused += 1


def run(nodes_count: int = 1, seconds: float = 10.0, kills: int = 3, seed: int = 1,
        drain_timeout: float = 60.0, directory: Path | None = None, partitions: int = 0,
        disk_fulls: int = 0, at_least: int = 0, modes: StoreModes = NO_MODES) -> Report:
    """One soak; raises Unavailable when a fault asked for cannot be made here.
    ``at_least`` keeps producing past ``seconds`` until that many messages were
    ACKed, so that a slow machine still checks a soak of a known size."""
    if partitions and nodes_count == 1:
        raise Unavailable("--partitions needs a cluster: --nodes 3")
    rng = random.Random(seed)
    report = Report(nodes=nodes_count, seconds=seconds)
    acked: set[bytes] = set()
    with tempfile.TemporaryDirectory(prefix="pzq-chaos-", dir=directory) as tmp, \
            ExitStack() as cleanup:
        nodes = Nodes(Path(tmp), nodes_count, disk_fulls > 0, modes=modes)
        cleanup.callback(nodes.close)
        nodes.start()
        consuming = Consuming([node.send_dsn for node in nodes.members])
        consuming.start()
        cleanup.callback(consuming.join, 5)
        cleanup.callback(consuming.stopping.set)
        faults = Faults(nodes, seconds, {"restarts": kills, "partitions": partitions,
                                         "disk_fulls": disk_fulls}, report, rng)
        faults.start()
        produce_for(nodes.members, seconds, report, acked, rng, at_least=at_least)
        faults.join()  # a slow machine may not have given every fault while producing
        if faults.error is not None:
            raise faults.error
        consuming.idle_is_expected.set()
        report.acked = len(acked)
        try:
            wait_until(lambda: acked <= consuming.seen.keys(), drain_timeout, interval=0.1,
                       message="every ACKed message consumed")
        except TimeoutError:
            pass  # reported as lost below
    report.consumed = len(consuming.seen)
    report.lost = len(acked - consuming.seen.keys())
    report.duplicates = sum(count - 1 for count in consuming.seen.values())
    report.longest_gap_s = round(consuming.longest_gap, 3)
    return report


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to produce")
    parser.add_argument("--at-least", type=int, default=0, metavar="MESSAGES",
                        help="produce past --seconds (at most 60 s more) until this many "
                             "messages were ACKed")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs and restarts")
    parser.add_argument("--partitions", type=int, default=0,
                        help="cuts of a node's cluster links, healed after 0.5-3 s "
                             "(--nodes 3)")
    parser.add_argument("--disk-fulls", type=int, default=0,
                        help="a node's store disk filled, freed after 0.5-3 s (root)")
    add_store_modes(parser)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or min(args.kills, args.partitions, args.disk_fulls,
                                args.at_least) < 0:
        parser.exit(ExitCode.USAGE, "chaos: error: --seconds must be above 0; --kills, "
                                    "--partitions, --disk-fulls and --at-least not below\n")
    try:
        report = run(args.nodes, args.seconds, args.kills, args.seed,
                     partitions=args.partitions, disk_fulls=args.disk_fulls,
                     at_least=args.at_least, modes=store_modes(args))
    except Unavailable as exc:
        parser.exit(ExitCode.USAGE, f"chaos: error: {exc}\n")
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        for key, value in asdict(report).items():
            print(f"{key:>20}: {value}")
    return ExitCode.OK if report.lost == 0 else EXIT_LOST


if __name__ == "__main__":
    raise SystemExit(main())
