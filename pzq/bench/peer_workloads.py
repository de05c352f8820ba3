"""The workloads of the benchmark beside the peers, each on a fresh server of one
system, with the server's and the clients' CPU time per message."""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq.bench.cpu import cpu_seconds
from pzq.bench.measure import percentile, run_workers
from pzq.bench.peer_redelivery import measure_redelivery
from pzq.bench.peer_system import AsyncioClient, Served, Setup, System

FILL_WINDOW = 1000  # a backlog is stored at this window (not measured)


@dataclass(frozen=True)
class Load:
    count: int  # messages of a workload
    size: int  # bytes of each
    window: int  # unanswered messages a producer keeps; a consumer's read
    ack_timeout: float  # seconds, for the redelivery workloads


Figures = dict[str, float]  # a figure's key -> its value for one system, one repeat
ASYNCIO = "aio "  # before the key of a figure measured with a system's asyncio client


class Workloads:
    """Runs each workload on a server of its own in a folder of its own."""

    def __init__(self, folder: Path, load: Load) -> None:
        self.folder = folder
        self.load = load
        self.started = 0

    def _place(self, system: System) -> Path:
        self.started += 1
        return self.folder / f"{system.short}-{self.started}"

    def produce(self, system: System, fsync: bool,
                client: AsyncioClient | None = None) -> Figures:
        load = self.load
        producer = system.produce if client is None else client.produce
        with system.serve(self._place(system), Setup(fsync, ("g1",))) as served:
            cpu = cpu_seconds(served.pid)
            (answer,) = run_workers([(producer, (served.address, load.count,
                                                 load.size, load.window, None))])
            cpu = cpu_seconds(served.pid) - cpu
        _complete(system, "produce", answer, load.count)
        name = "produce fsync" if fsync else "produce"
        figures = {name: answer["count"] / answer["seconds"]}
        if not fsync:
            figures.update(_cpu("produce", cpu, [answer], load.count))
        return _named(figures, client)

    def drain(self, system: System, groups: tuple[str, ...],
              client: AsyncioClient | None = None) -> Figures:
        load = self.load
        consumer = system.consume if client is None else client.consume
        # the consumers start together, each timed from there (one alone: the same)
        start = multiprocessing.get_context("spawn").Barrier(len(groups))
        with system.serve(self._place(system), Setup(groups=groups)) as served:
            self._fill(system, served, load.count)
            cpu = cpu_seconds(served.pid)
            answers = run_workers([(consumer, (served.address, group, load.count,
                                               load.window, True, start))
                                   for group in groups])
            cpu = cpu_seconds(served.pid) - cpu
        for answer in answers:
            _complete(system, f"drain by {answer['group']}", answer, load.count)
        rates = [answer["count"] / max(answer["seconds"], 1e-9) for answer in answers]
        # CPU a delivery (a message to each group is a delivery each): the server's
        # at three groups over its one group's is what bounds the slowest's ratio
        cpus = _cpu("drain" if len(groups) == 1 else f"drain {len(groups)}", cpu, answers,
                    load.count * len(groups))
        if len(groups) > 1:
            return _named({f"drain {len(groups)} slowest": min(rates), **cpus}, client)
        return _named({"drain 1": rates[0], **cpus}, client)

    def end_to_end(self, system: System, client: AsyncioClient | None = None) -> Figures:
        load = self.load
        joined = multiprocessing.get_context("spawn").Event()
        clients = system if client is None else client
        with system.serve(self._place(system), Setup(groups=("e2e",))) as served:
            cpu = cpu_seconds(served.pid)
            answers = run_workers([
                (clients.consume, (served.address, "e2e", load.count, load.window, False,
                                   joined)),
                (clients.produce, (served.address, load.count, load.size, load.window,
                                   joined))])
            cpu = cpu_seconds(served.pid) - cpu
        consumer = next(a for a in answers if a["role"] == "consumer")
        producer = next(a for a in answers if a["role"] == "producer")
        _complete(system, "end to end", consumer, load.count)
        latencies = consumer["latencies_ns"]
        return _named({"e2e": consumer["count"] / max(consumer["seconds"], producer["seconds"]),
                       "e2e p50": percentile(latencies, .5),
                       "e2e p99": percentile(latencies, .99),
                       **_cpu("e2e", cpu, answers, load.count)}, client)

    def redelivery(self, system: System, killed: bool) -> Figures:
        load = self.load
        setup = Setup(groups=("r",), ack_timeout=load.ack_timeout)
        with system.serve(self._place(system), setup) as served:
            self._fill(system, served, load.window)
            found = measure_redelivery(system, served, "r", load.window, load.ack_timeout,
                                       killed)
        how = "killed" if killed else "hung"
        if found.count < load.window:
            print(f"{system.name}: after a {how} consumer {found.count} of {load.window} "
                  "messages came to the other one", flush=True)
        return {f"redelivery {how}": found.seconds}

    def _fill(self, system: System, served: Served, count: int) -> None:
        (answer,) = run_workers([(system.produce, (served.address, count, self.load.size,
                                                   FILL_WINDOW, None))])
        _complete(system, "storing the backlog", answer, count)


def _named(figures: Figures, client: AsyncioClient | None) -> Figures:
    """The figures as the table keys them: an asyncio client's apart."""
    return figures if client is None else {ASYNCIO + key: value
                                           for key, value in figures.items()}


def _cpu(name: str, server_s: float, answers: list[dict[str, Any]],
         messages: int) -> Figures:
    """CPU time per message in µs: the server's, and its clients' together."""
    clients = sum(answer["cpu_seconds"] for answer in answers)
    return {f"cpu server {name}": server_s / max(messages, 1) * 1e6,
            f"cpu client {name}": clients / max(messages, 1) * 1e6}


def _complete(system: System, what: str, answer: dict[str, Any], count: int) -> None:
    """Say so when a load generator did not get through all its messages (its figure
    is still what it measured)."""
    if answer["count"] < count or answer.get("failed"):
        print(f"{system.name}: {what}: {answer['count']} of {count} messages"
              + (f", {answer['failed']} refused" if answer.get("failed") else ""),
              flush=True)
