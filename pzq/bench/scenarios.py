"""What the benchmark measures, pzq against its ceiling in the same run."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq.bench.ceiling import Ceiling
from pzq.bench.load import produce_load, slow_consume_load
from pzq.bench.measure import (
    Figure,
    fill,
    measure_drain,
    measure_end_to_end,
    measure_produce,
    percentile,
    ratio,
    rss_mb,
    run_workers,
    start_pzq,
)
from pzq.bench.nodes import NodeProcess, wait_until


@dataclass
class Plan:
    produce_count: int
    window1_count: int
    drain_count: int
    backlogs: tuple[int, ...]
    slow_count: int = 300
    sizes: tuple[int, ...] = (100, 4096)
    windows: tuple[int, ...] = (1, 100, 1000)


PLANS = {
    "smoke": Plan(300, 50, 300, (0, 500), sizes=(100,), windows=(1, 100)),
    "quick": Plan(5_000, 500, 5_000, (0, 20_000, 100_000), sizes=(100, 4096),
                  slow_count=1_500),
    "full": Plan(30_000, 2_000, 30_000, (0, 100_000, 1_000_000), slow_count=3_000),
}


def run_benchmark(plan: Plan, directory: Path) -> list[Figure]:
    figures: list[Figure] = []

    def record(scenario: str, ceiling: tuple[float, float, float],
               node_figures: tuple[float, float, float], **extra: Any) -> None:
        figures.append(Figure(scenario, "ceiling", ceiling[0], ceiling[1], ceiling[2]))
        figures.append(Figure(scenario, "pzq", node_figures[0], node_figures[1],
                              node_figures[2], ratio=ratio(node_figures[0], ceiling[0]),
                              extra=extra))

    for size in plan.sizes:
        for window in plan.windows:
            count = plan.window1_count if window == 1 else plan.produce_count
            ceiling = Ceiling()
            base = measure_produce(ceiling.receive, count, size, window)
            ceiling.stop()
            node = start_pzq(directory, f"produce-{size}-{window}")
            record(f"produce {size} B window {window}", base,
                   measure_produce(node.receive_dsn, count, size, window))
            node.kill()

    size, window = 100, 100
    ceiling = Ceiling(preload=plan.drain_count, size=size)
    drain_base = measure_drain(ceiling.send, plan.drain_count)
    ceiling.stop()
    node = start_pzq(directory, "drain")
    fill(node, plan.drain_count, size)
    record("drain 100 B", (drain_base, 0, 0), (measure_drain(node.send_dsn, plan.drain_count),
                                               0, 0))
    node.kill()

    ceiling = Ceiling()
    e2e_base = measure_end_to_end(ceiling.receive, ceiling.send, plan.produce_count, size, window)
    ceiling.stop()
    variants = {"end to end 100 B window 100": [],
                "end to end, --hard-sync": ["--hard-sync"],
                "end to end, archive on": ["--archive-dir", str(directory / "archive")]}
    for scenario, args in variants.items():
        node = start_pzq(directory, scenario.replace(" ", "_").replace(",", ""), *args)
        record(scenario, e2e_base, measure_end_to_end(node.receive_dsn, node.send_dsn,
                                                      plan.produce_count, size, window))
        node.kill()

    ceiling = Ceiling()
    produce_base = measure_produce(ceiling.receive, plan.produce_count, size, window)
    ceiling.stop()
    node = start_pzq(directory, "produce-hard-sync", "--hard-sync")
    record("produce 100 B window 100, --hard-sync", produce_base,
           measure_produce(node.receive_dsn, plan.produce_count, size, window))
    node.kill()
    figures.append(_slow_consumer(directory, plan))
    figures.extend(_replicated(directory, plan, produce_base))
    figures.extend(_backlog_scaling(directory, plan, produce_base, drain_base))
    return figures


SLOW_WORK_S = 0.003


SLOW_ACK_TIMEOUT_US = 1_000_000


def _slow_consumer(directory: Path, plan: Plan) -> Figure:
    """A consumer taking 3 ms per message while a producer runs far ahead of it, with a
    1 s ack timeout: every delivery beyond one per message is a duplicate."""
    node = start_pzq(directory, "slow-consumer", "--ack-timeout", str(SLOW_ACK_TIMEOUT_US),
                     "--reaper-frequency", str(SLOW_ACK_TIMEOUT_US // 10))
    answers = run_workers([(slow_consume_load, ([node.send_dsn], plan.slow_count, SLOW_WORK_S)),
                    (produce_load, (node.receive_dsn, plan.slow_count, 100, 100))])
    stats = node.stats()
    node.kill()
    consumer = next(a for a in answers if a["role"] == "consumer")
    latencies = consumer["latencies_ns"]
    return Figure(f"slow consumer ({SLOW_WORK_S * 1000:.0f} ms a message)", "pzq",
                  consumer["count"] / max(consumer["seconds"], 1e-9),
                  percentile(latencies, .5), percentile(latencies, .99),
                  extra={"deliveries_per_message": round(stats["delivered"] / plan.slow_count, 3),
                         "expired": stats["expired"]})


def _peer_up(node: NodeProcess) -> bool:
    return bool(node.stats()["peers"][0]["state"] == "up")


def _replicated(directory: Path, plan: Plan, base: tuple[float, float, float]) -> list[Figure]:
    endpoints = [f"ipc://{directory}/bench{i}.cluster" for i in range(2)]
    nodes = [start_pzq(directory, f"replica{i}", "--broadcast-dsn", endpoints[i], "--nodes",
                       endpoints[1 - i], "--replicas", "1", "--timeout_replication", "1000000")
             for i in range(2)]
    for node in nodes:
        wait_until(functools.partial(_peer_up, node), 20, message="both nodes seeing each other")
    rate, p50, p99 = measure_produce(nodes[0].receive_dsn, plan.produce_count, 100, 100)
    failures = nodes[0].stats()["replication_failures"]
    for node in nodes:
        node.kill()
    return [Figure("produce 100 B window 100, --replicas 1", "pzq", rate, p50, p99,
                   ratio=ratio(rate, base[0]), extra={"replication_failed": failures})]


def _backlog_scaling(directory: Path, plan: Plan, produce_base: tuple[float, float, float],
                     drain_base: float) -> list[Figure]:
    figures = []
    for backlog in plan.backlogs:
        node = start_pzq(directory, f"backlog-{backlog}")
        if backlog:
            fill(node, backlog, 100)
        rate, p50, p99 = measure_produce(node.receive_dsn, plan.produce_count, 100, 100)
        drain = measure_drain(node.send_dsn, plan.drain_count)
        memory = rss_mb(node)
        node.kill()
        figures.append(Figure(f"backlog {backlog}: produce", "pzq", rate, p50, p99, memory,
                              ratio=ratio(rate, produce_base[0])))
        figures.append(Figure(f"backlog {backlog}: drain", "pzq", drain, rss_mb=memory,
                              ratio=ratio(drain, drain_base)))
    return figures
