"""What the benchmark measures: pzq against its ceiling, and the C++ original when
given, in the same run."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

from pzq.bench.ceiling import Ceiling
from pzq.bench.load import produce_load, slow_consume_load
from pzq.bench.measure import (
    Figure,
    Measure,
    Rates,
    drain_of,
    end_to_end_of,
    fill,
    measure_drain,
    measure_produce,
    percentile,
    produce_of,
    ratio,
    rss_mb,
    run_workers,
    start_pzq,
)
from pzq.bench.nodes import NodeProcess, wait_until
from pzq.bench.original import OriginalNode
from pzq.bench.rounds import Rounds


@dataclass
class Plan:
    produce_count: int
    window1_count: int
    window1_rounds: int  # the window-1 rows' rounds: see Comparison
    drain_count: int
    backlogs: tuple[int, ...]
    slow_count: int = 300
    sizes: tuple[int, ...] = (100, 4096)
    windows: tuple[int, ...] = (1, 100, 1000)


PLANS = {
    "smoke": Plan(300, 50, 1, 300, (0, 500), sizes=(100,), windows=(1, 100)),
    "quick": Plan(5_000, 500, 3, 5_000, (0, 20_000, 100_000), sizes=(100, 4096),
                  slow_count=1_500),
    "full": Plan(30_000, 2_000, 5, 30_000, (0, 100_000, 1_000_000), slow_count=3_000),
}


class Comparison:
    """Each scenario on the ceiling, pzq and, when given, the C++ original, one after
    the other in the same run; pzq's figure carries its ratio to both. A scenario of
    several rounds measures the three in turn each round (pzq.bench.rounds)."""

    def __init__(self, directory: Path, original: Path | None) -> None:
        self.directory = directory
        self.original = original
        self.figures: list[Figure] = []

    def run(self, scenario: str, measure: Measure, pzq_args: tuple[str, ...] = (),
            ceiling: Rates | None = None,
            original_args: tuple[str, ...] | None = (), rounds: int = 1) -> Rates:
        """Returns the ceiling's figures (the rounds' medians), so later scenarios can
        reuse them. ``original_args`` None: the original has no such scenario."""
        announce(scenario, rounds)
        measured = Rounds(scenario)
        for turn in range(rounds):
            if ceiling is None:
                device = Ceiling()
                measured.ceiling.append(measure(device))
                device.stop()
            else:
                measured.ceiling.append(ceiling)
            node = start_pzq(self.directory, f"{_folder(scenario)}-{turn}", *pzq_args)
            measured.pzq.append(measure(node))
            node.kill()
            if self.original is not None and original_args is not None:
                original_node = OriginalNode(
                    self.original, self.directory / f"original-{_folder(scenario)}-{turn}",
                    *original_args).start()
                measured.original.append(measure(original_node))
                original_node.kill()
        self.figures.extend(measured.figures())
        return measured.ceiling_medians()


def announce(scenario: str, rounds: int = 1) -> None:
    """One line on stderr as each scenario starts: a run lasts minutes, and its table
    comes only at the end."""
    times = f", {rounds} rounds" if rounds > 1 else ""
    print(f"pzq-bench: measuring {scenario}{times} ...", file=sys.stderr, flush=True)


def _folder(scenario: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in scenario)


def run_benchmark(plan: Plan, directory: Path, original: Path | None = None) -> list[Figure]:
    compare = Comparison(directory, original)
    for body in plan.sizes:
        for unanswered in plan.windows:
            if unanswered == 1:  # a round trip a message: see Comparison
                compare.run(f"produce {body} B window 1",
                            produce_of(plan.window1_count, body, 1),
                            rounds=plan.window1_rounds)
            else:
                compare.run(f"produce {body} B window {unanswered}",
                            produce_of(plan.produce_count, body, unanswered))
    size, window = 100, 100
    compare.run("produce 100 B window 1, --hard-sync", produce_of(plan.window1_count, 100, 1),
                ("--hard-sync",), original_args=("--hard-sync",), rounds=plan.window1_rounds)
    produce_base = compare.run("produce 100 B window 100, --hard-sync",
                               produce_of(plan.produce_count, size, window), ("--hard-sync",),
                               original_args=("--hard-sync",))
    device = Ceiling(preload=plan.drain_count, size=size)
    drain_base = compare.run("drain 100 B", drain_of(plan.drain_count, size),
                             ceiling=(measure_drain(device.send_dsn, plan.drain_count), 0.0, 0.0))
    device.stop()
    e2e = end_to_end_of(plan.produce_count, size, window)
    e2e_base = compare.run("end to end 100 B window 100", e2e)
    compare.run("end to end, --hard-sync", e2e, ("--hard-sync",), e2e_base,
                ("--hard-sync",))
    compare.run("end to end, archive on", e2e,
                ("--archive-dir", str(directory / "archive")), e2e_base, original_args=None)
    figures = compare.figures
    figures.append(_slow_consumer(directory, plan))
    figures.extend(_replicated(directory, plan, produce_base))
    figures.extend(_backlog_scaling(directory, plan, produce_base, drain_base[0]))
    return figures


SLOW_WORK_S = 0.003


SLOW_ACK_TIMEOUT_US = 1_000_000


def _slow_consumer(directory: Path, plan: Plan) -> Figure:
    """A consumer taking 3 ms per message while a producer runs far ahead of it, with a
    1 s ack timeout: every delivery beyond one per message is a duplicate."""
    scenario = f"slow consumer ({SLOW_WORK_S * 1000:.0f} ms a message)"
    announce(scenario)
    node = start_pzq(directory, "slow-consumer", "--ack-timeout", str(SLOW_ACK_TIMEOUT_US),
                     "--reaper-frequency", str(SLOW_ACK_TIMEOUT_US // 10))
    answers = run_workers([(slow_consume_load, ([node.send_dsn], plan.slow_count, SLOW_WORK_S)),
                    (produce_load, (node.receive_dsn, plan.slow_count, 100, 100))])
    stats = node.stats()
    node.kill()
    consumer = next(a for a in answers if a["role"] == "consumer")
    latencies = consumer["latencies_ns"]
    return Figure(scenario, "pzq",
                  consumer["count"] / max(consumer["seconds"], 1e-9),
                  percentile(latencies, .5), percentile(latencies, .99),
                  extra={"deliveries_per_message": round(stats["delivered"] / plan.slow_count, 3),
                         "expired": stats["expired"]})


def _peer_up(node: NodeProcess) -> bool:
    return bool(node.stats()["peers"][0]["state"] == "up")


def _replicated(directory: Path, plan: Plan, base: tuple[float, float, float]) -> list[Figure]:
    announce("produce 100 B window 100, --replicas 1")
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
        announce(f"backlog {backlog}: produce and drain")
        node = start_pzq(directory, f"backlog-{backlog}")
        if backlog:
            fill(node.receive_dsn, backlog, 100)
        rate, p50, p99 = measure_produce(node.receive_dsn, plan.produce_count, 100, 100)
        drain = measure_drain(node.send_dsn, plan.drain_count)
        memory = rss_mb(node)
        node.kill()
        figures.append(Figure(f"backlog {backlog}: produce", "pzq", rate, p50, p99, memory,
                              ratio=ratio(rate, produce_base[0])))
        figures.append(Figure(f"backlog {backlog}: drain", "pzq", drain, rss_mb=memory,
                              ratio=ratio(drain, drain_base)))
    return figures
