"""One measurement: run load generators against a node or the ceiling, and figures
from what they report."""

from __future__ import annotations

import multiprocessing
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pzq.bench.load import consume_load, drain_load, produce_load
from pzq.bench.nodes import NodeProcess
from pzq.errors import WorkerFailed
from pzq.tool_base import interrupted_quietly

ANSWER_TIMEOUT_S = 600.0  # a load generator reports within this, or the run fails
EXIT_WAIT_S = 30.0  # after its answer, a worker exits within this, or is killed


@dataclass
class Figure:
    scenario: str
    target: str  # "pzq" or "ceiling"
    rate: float  # messages per second
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    rss_mb: float = 0.0
    ratio: float | None = None  # pzq rate / ceiling rate
    vs_original: float | None = None  # pzq rate / the C++ original's rate, same run
    extra: dict[str, Any] = field(default_factory=dict)
    # A figure of Comparison (pzq.bench.rounds), of one round or more: the rate, p50
    # and p99 are the rounds' medians, the ratios the medians of those taken within
    # each round; the ranges are [lowest, highest] over the rounds (None: a figure
    # measured outside Comparison, or no such ratio).
    rounds: int = 1
    rate_range: list[float] | None = None
    ratio_range: list[float] | None = None
    vs_original_range: list[float] | None = None


def ratio(value: float, ceiling: float) -> float | None:
    return round(value / ceiling, 3) if ceiling else None


def percentile(values: list[int], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    value: float = ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1e6
    return value


def run_workers(workers: list[tuple[Callable[..., None], tuple[Any, ...]]],
                answer_timeout: float = ANSWER_TIMEOUT_S) -> list[dict[str, Any]]:
    """Run each load generator in its own process; their answers. A worker that dies
    without an answer, or does not answer in time, fails the run with its name (not a
    silent wait); none is left running, since Python waits at exit for every child
    multiprocessing started, without a limit."""
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    processes = [spawn.Process(target=interrupted_quietly, args=(target, *args, results),
                               name=target.__name__)
                 for target, args in workers]
    for process in processes:
        process.start()
    try:
        return _answers(processes, results, time.monotonic() + answer_timeout)
    finally:
        for process in processes:
            process.join(EXIT_WAIT_S)
            if process.is_alive():
                print(f"bench: worker {process.name} still running {EXIT_WAIT_S:g} s after "
                      "the run: killed", file=sys.stderr, flush=True)
                process.kill()
                process.join(5)
        results.close()


def _answers(processes: list[Any], results: Any, deadline: float) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    while len(answers) < len(processes):
        try:
            answers.append(results.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        # A worker's answer is in the pipe before it exits: with every worker gone and
        # the pipe empty, no more answers come (a failed one's traceback is on stderr).
        if not any(p.is_alive() for p in processes):
            while len(answers) < len(processes):  # those put just before the exit
                try:
                    answers.append(results.get(timeout=0.5))
                except queue.Empty:
                    break
            if len(answers) == len(processes):
                break
            failed = [f"{p.name} exited with {p.exitcode}" for p in processes
                      if p.exitcode != 0]
            raise WorkerFailed(f"{len(processes) - len(answers)} worker(s) gave no answer"
                               + (": " + ", ".join(failed) if failed else ""))
        if time.monotonic() > deadline:
            running = [p.name for p in processes if p.is_alive()]
            raise WorkerFailed(f"no answer from {', '.join(running) or 'the workers'} "
                               "in time")
    return answers


def measure_produce(dsn: str, count: int, size: int, window: int) -> tuple[float, float, float]:
    (answer,) = run_workers([(produce_load, (dsn, count, size, window))])
    latencies = answer["latencies_ns"]
    return answer["count"] / answer["seconds"], percentile(latencies, .5), percentile(
        latencies, .99)


def measure_drain(dsn: str, count: int) -> float:
    (answer,) = run_workers([(drain_load, ([dsn], count))])
    rate: float = answer["count"] / max(answer["seconds"], 1e-9)
    return rate


def measure_end_to_end(receive: str, send: str, count: int, size: int,
                       window: int) -> tuple[float, float, float]:
    answers = run_workers([(consume_load, ([send], count)), (produce_load, (receive, count, size,
                                                                     window))])
    consumer = next(a for a in answers if a["role"] == "consumer")
    producer = next(a for a in answers if a["role"] == "producer")
    seconds = max(consumer["seconds"], producer["seconds"])
    latencies = consumer["latencies_ns"]
    return consumer["count"] / seconds, percentile(latencies, .5), percentile(latencies, .99)


def rss_mb(node: NodeProcess) -> float:
    if node.process is None:
        return 0.0
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_pzq(directory: Path, name: str, *args: str) -> NodeProcess:
    return NodeProcess(directory / name, *args).start()


def fill(receive_dsn: str, count: int, size: int) -> None:
    """Store a backlog fast: several windowed producers at once."""
    share = count // 4
    run_workers([(produce_load, (receive_dsn, share, size, 1000)) for _ in range(4)])


class Target(Protocol):
    """pzq, the ceiling or the C++ original: where producers and consumers connect."""

    @property
    def receive_dsn(self) -> str: ...

    @property
    def send_dsn(self) -> str: ...


Rates = tuple[float, float, float]  # messages/s, p50 ms, p99 ms
Measure = Callable[[Target], Rates]


def produce_of(count: int, size: int, window: int) -> Measure:
    return lambda target: measure_produce(target.receive_dsn, count, size, window)


def drain_of(count: int, size: int) -> Measure:
    """A backlog of ``count`` stored first, then drained by one consumer."""
    def measure(target: Target) -> Rates:
        fill(target.receive_dsn, count, size)
        return measure_drain(target.send_dsn, count), 0.0, 0.0
    return measure


def end_to_end_of(count: int, size: int, window: int) -> Measure:
    return lambda target: measure_end_to_end(target.receive_dsn, target.send_dsn, count, size,
                                             window)
