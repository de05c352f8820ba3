"""Shards against one node: the same keyed load through ``pzq --shards N`` and through one
node, a partitioned topic, routing clients (scripts/bench_shards.py).

Each load generator runs in its own process (pzq.bench.measure.run_workers); a message
carries its wall-clock send time, so a consumer in another process measures the time
from send to delivery.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from pzq.bench.cpu import cpu_seconds
from pzq.bench.measure import percentile, run_workers
from pzq.bench.nodes import wait_until
from pzq.bench.ports import ports_free
from pzq.bench.run_line import run_line
from pzq.client import RoutedGroupConsumer, RoutedProducer, request_monitor
from pzq.errors import EndpointError

TOPIC = "bench"
GROUP = "bench"
PARTITIONS = 16
KEYS = 256
SILENCE_S = 2.0  # a drain ends after this long without a delivery
START_TIMEOUT_S = 60.0
STEP = 10  # shard K's ports are the given ones + 10·K (see docs/cluster.rst)


def keyed_produce_load(routes: list[str], worker: int, count: int, size: int, window: int,
                       results: Any) -> None:
    """Send ``count`` keyed messages through a routing producer; report the rate."""
    cpu_started = time.process_time()
    padding = b"x" * max(0, size - 20)
    with RoutedProducer(routes, TOPIC, window=window) as producer:
        started = time.perf_counter()
        for index in range(count):
            producer.send([b"%019d," % time.time_ns() + padding],
                          key=b"w%d-%d" % (worker, index % KEYS))
        acks = producer.flush(600)
        seconds = time.perf_counter() - started
    results.put({"role": "producer", "count": sum(ack.ok for ack in acks), "seconds": seconds,
                 "failed": sum(not ack.ok for ack in acks),
                 "cpu_seconds": time.process_time() - cpu_started})


def group_drain_load(routes: list[str], window: int, results: Any) -> None:
    """Drain the group with a routing consumer until it is silent; report how many came,
    from the first to the last, and each one's time since it was sent."""
    cpu_started = time.process_time()
    received = 0
    latencies: list[int] = []
    first = last = 0.0
    with RoutedGroupConsumer(routes, TOPIC, GROUP, window=window) as consumer:
        while True:
            messages = consumer.receive_many(window, SILENCE_S)
            if not messages:
                break
            now_ns = time.time_ns()
            last = time.perf_counter()
            first = first or last
            latencies += [now_ns - int(message.parts[0][:19]) for message in messages]
            received += len(messages)
            consumer.ack_many(messages)
    results.put({"role": "consumer", "count": received, "seconds": max(last - first, 1e-9),
                 "latencies_ns": latencies[::max(1, len(latencies) // 20_000)],
                 "cpu_seconds": time.process_time() - cpu_started})


@dataclass
class Shards:
    """``pzq --shards N`` (or one node for 1) on loopback ports, in its own folder."""

    shards: int
    directory: Path
    base_port: int
    replicas: int = 0  # copies on other shards before a producer's ACK
    process: subprocess.Popen[bytes] | None = None

    def port(self, service: int, shard: int) -> int:
        return self.base_port + service + STEP * shard

    def monitor(self, shard: int) -> str:
        return f"tcp://127.0.0.1:{self.port(3, shard)}"

    @property
    def monitors(self) -> list[str]:
        return [self.monitor(shard) for shard in range(self.shards)]

    def start(self) -> Shards:
        command = [sys.executable, "-P", "-m", "pzq", "--shards", str(self.shards),
                   "--database", str(self.directory),
                   "--receive-dsn", f"tcp://127.0.0.1:{self.port(1, 0)}",
                   "--send-dsn", f"tcp://127.0.0.1:{self.port(2, 0)}",
                   "--monitor-dsn", self.monitor(0),
                   "--consume-dsn", f"tcp://127.0.0.1:{self.port(5, 0)}",
                   "--log-level", "warning"]
        if self.shards > 1:
            command += ["--broadcast-dsn", f"tcp://127.0.0.1:{self.port(4, 0)}",
                        "--replicas", str(self.replicas), "--timeout-replication", "5s"]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for monitor in self.monitors:
            wait_until(partial(self._answers, monitor), START_TIMEOUT_S, interval=0.1,
                       message=f"a shard answering at {monitor}")
        return self

    def _answers(self, monitor: str) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"pzq --shards {self.shards} exited with "
                               f"{self.process.returncode}")
        try:
            return request_monitor(monitor, "PING", 0.5) == b"PONG"
        except (TimeoutError, EndpointError):
            return False

    def declare(self) -> None:
        """The topic's partitions, known to every shard with every shard's endpoints."""
        request_monitor(self.monitor(0), f"DECLARE TOPIC {TOPIC} partitions={PARTITIONS}", 10)

        def known() -> bool:
            for monitor in self.monitors:
                table = json.loads(request_monitor(monitor, "ROUTES", 10))
                if TOPIC not in table["topics"] or any(
                        "receive" not in node for node in table["nodes"].values()):
                    return False
            return True
        wait_until(known, START_TIMEOUT_S, interval=0.1, message="the partitions everywhere")

    def node_pids(self) -> list[int]:
        """The processes doing the work: the shards (the supervisor's children), or the
        node itself."""
        assert self.process is not None
        if self.shards == 1:
            return [self.process.pid]
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.node_pids())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@dataclass
class ShardFigures:
    produce_rate: float  # messages per second, all producers
    drain_rate: float
    end_to_end_rate: float
    p50_ms: float
    p99_ms: float
    node_us_produce: float  # node CPU per message, all shards together
    node_us_drain: float
    client_us_produce: float  # the routing clients' CPU per message, all together
    client_us_drain: float


def measure_shards(shards: Shards, count: int, workers: int, size: int,
                   window: int) -> ShardFigures:
    """Produce ``count`` keyed messages (``workers`` producers), drain them (``workers``
    group consumers), then produce and consume at once."""
    routes = shards.monitors
    share = count // workers
    cpu = shards.cpu_seconds()
    produced = run_workers([(keyed_produce_load, (routes, worker, share, size, window))
                            for worker in range(workers)])
    node_us_produce = (shards.cpu_seconds() - cpu) / max(count, 1) * 1e6
    produce_rate = _rate(produced)
    cpu = shards.cpu_seconds()
    drained = run_workers([(group_drain_load, (routes, window)) for _ in range(workers)])
    node_us_drain = (shards.cpu_seconds() - cpu) / max(count, 1) * 1e6
    drain_rate = _rate(drained)
    both = run_workers([
        *((keyed_produce_load, (routes, worker, share, size, window))
          for worker in range(workers)),
        *((group_drain_load, (routes, window)) for _ in range(workers))])
    consumers = [answer for answer in both if answer["role"] == "consumer"]
    latencies = [value for answer in consumers for value in answer["latencies_ns"]]
    seconds = max(answer["seconds"] for answer in both)
    return ShardFigures(produce_rate, drain_rate,
                        sum(answer["count"] for answer in consumers) / seconds,
                        percentile(latencies, .5), percentile(latencies, .99),
                        node_us_produce, node_us_drain, _cpu_us(produced, count),
                        _cpu_us(drained, count))


def _cpu_us(answers: list[dict[str, Any]], count: int) -> float:
    return float(sum(answer["cpu_seconds"] for answer in answers)) / max(count, 1) * 1e6


def _rate(answers: list[dict[str, Any]]) -> float:
    """All workers' messages over the longest worker's time (they ran at once)."""
    seconds = float(max(answer["seconds"] for answer in answers))
    return float(sum(answer["count"] for answer in answers)) / seconds


def free_base_port(shards: int) -> int:
    """A base port whose services (+1 … +5) of every shard (+10·K) look free now."""
    for _ in range(200):
        base = random.randrange(20_000, 30_000, 100)
        wanted = [base + service + STEP * shard for shard in range(shards)
                  for service in range(1, 6)]
        if ports_free(wanted):
            return base
    raise RuntimeError("no free ports for the shards")


def cores() -> int:
    return len(os.sched_getaffinity(0))


FIGURES = (("produce", "produce_rate", "msg/s"), ("drain", "drain_rate", "msg/s"),
           ("end to end", "end_to_end_rate", "msg/s"), ("end to end p50", "p50_ms", "ms"),
           ("end to end p99", "p99_ms", "ms"), ("node CPU, produce", "node_us_produce", "µs/msg"),
           ("node CPU, drain", "node_us_drain", "µs/msg"),
           ("client CPU, produce", "client_us_produce", "µs/msg"),
           ("client CPU, drain", "client_us_drain", "µs/msg"))


def run_once(shards: int, directory: Path, count: int, workers: int,
             replicas: int = 0) -> ShardFigures:
    running = Shards(shards, directory / f"shards-{shards}", free_base_port(shards),
                     replicas).start()
    try:
        running.declare()
        return measure_shards(running, count, workers, 100, 100)
    finally:
        running.stop()


def compare_shards(shards: int, count: int, workers: int, repeats: int,
                   json_path: Path | None = None, replicas: int = 0
                   ) -> dict[str, dict[str, object]]:
    """One node, then ``shards`` shards (with ``replicas`` copies on other shards),
    ``repeats`` times; prints each repeat and the table of medians and ratios (each
    taken within a repeat); returns the table."""
    print(run_line(datetime.now(UTC)))
    print(f"{cores()} cores; {count} messages of 100 B per figure, {workers} producers and "
          f"{workers} consumers, {repeats} repeats, shards with --replicas {replicas}",
          flush=True)
    runs: list[tuple[ShardFigures, ShardFigures]] = []
    with tempfile.TemporaryDirectory(prefix="pzq-bench-shards-") as folder:
        for repeat in range(repeats):
            one = run_once(1, Path(folder) / f"r{repeat}", count, workers)
            many = run_once(shards, Path(folder) / f"r{repeat}", count, workers, replicas)
            runs.append((one, many))
            print(f"repeat {repeat + 1}: produce {one.produce_rate:,.0f} -> "
                  f"{many.produce_rate:,.0f} msg/s, drain {one.drain_rate:,.0f} -> "
                  f"{many.drain_rate:,.0f} msg/s", flush=True)
    print(f"\n{'figure':<20}{'1 node':>16}{f'{shards} shards':>16}{'ratio':>8}{'range':>12}")
    table: dict[str, dict[str, object]] = {}
    for label, name, unit in FIGURES:
        singles = [getattr(one, name) for one, _ in runs]
        many_figures = [getattr(many, name) for _, many in runs]
        ratios = [b / a if a else 0.0 for a, b in zip(singles, many_figures, strict=True)]
        table[label] = {"one": statistics.median(singles),
                        "shards": statistics.median(many_figures),
                        "ratio": statistics.median(ratios), "unit": unit}
        print(f"{label:<20}{statistics.median(singles):>9,.1f} {unit:<6}"
              f"{statistics.median(many_figures):>9,.1f} {unit:<6}"
              f"{statistics.median(ratios):>8.2f}{f'{min(ratios):.2f}-{max(ratios):.2f}':>12}")
    if json_path is not None:
        json_path.write_text(json.dumps({"figures": table, "runs": [
            {"one": asdict(one), "shards": asdict(many)} for one, many in runs]}, indent=2))
    return table
