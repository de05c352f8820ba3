"""Redelivery after a consumer fails: one consumer takes a window of messages and
never ACKs them, killed (its process ends) or hung (alive, its connection open);
another consumer of the group then takes them. The figure is the time from the kill,
or from the hung consumer's last read, until the other one has them all."""

from __future__ import annotations

import multiprocessing
import queue
import time
from dataclasses import dataclass
from typing import Any

from pzq.bench.peer_system import Served, System
from pzq.errors import WorkerFailed
from pzq.tool_base import interrupted_quietly

START_TIMEOUT_S = 60.0  # a worker's first answer (its imports, its connect) comes within


@dataclass(frozen=True)
class Redelivery:
    seconds: float  # from the failure until the other consumer had every message
    count: int  # how many of the held messages it got


def measure_redelivery(system: System, served: Served, group: str, count: int,
                       ack_timeout: float, killed: bool) -> Redelivery:
    """The held messages must be stored already (and nothing else of the group's)."""
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    go = spawn.Event()
    holder = spawn.Process(target=interrupted_quietly, name="hold",
                           args=(system.hold, served.address, group, count, results))
    # started now, so that its imports are done before it is wanted
    claimer = spawn.Process(target=interrupted_quietly, name="claim",
                            args=(system.claim, served.address, group, count, ack_timeout, go,
                                  results))
    holder.start()
    claimer.start()
    try:
        hung_at = _answer(results, "holder", START_TIMEOUT_S)["at"]
        go.set()
        _answer(results, "ready", START_TIMEOUT_S)
        if killed:
            holder.kill()
            failed_at = time.time()
        else:
            failed_at = hung_at
        claimed = _answer(results, "claimer", ack_timeout + START_TIMEOUT_S)
    finally:
        for process in (holder, claimer):
            if process.is_alive():
                process.kill()
            process.join(10)
        results.close()
    return Redelivery(max(0.0, claimed["last"] - failed_at), claimed["count"])


def _answer(results: Any, role: str, timeout: float) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = results.get(timeout=timeout)
    except queue.Empty:
        raise WorkerFailed(f"redelivery: no {role} answer within {timeout:g} s") from None
    if answer["role"] != role:
        raise WorkerFailed(f"redelivery: {answer['role']} answered before {role}")
    return answer
