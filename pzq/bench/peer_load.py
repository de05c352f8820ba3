"""What the load generators of every system share: the message body (its first 8 bytes
the send time) and the tallies a producer and a consumer report, so that pzq, Redis
Streams and JetStream are timed and counted alike."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from pzq.bench.load import NS

SILENCE_S = 5.0  # a consumer that gets nothing this long stops and reports
JOIN_TIMEOUT_S = 60.0  # consumers that start together have all joined within this
CLAIM_POLL_S = 0.1  # how often a consumer that claims others' messages looks again


def body(size: int) -> bytes:
    """``size`` bytes that start with the send time (ns since the epoch)."""
    return NS.pack(time.time_ns()) + b"x" * max(0, size - NS.size)


class ProduceTally:
    """A producer's count and time, from its first send to its last ACK."""

    def __init__(self) -> None:
        self.cpu_started = time.process_time()  # not the process's start (imports)
        self.started = time.perf_counter()

    def report(self, count: int, failed: int = 0) -> dict[str, Any]:
        return {"role": "producer", "count": count, "failed": failed,
                "seconds": time.perf_counter() - self.started,
                "cpu_seconds": time.process_time() - self.cpu_started}


class ConsumeTally:
    """A consumer's deliveries: timed from its start (a drain: see ``joined``) or from
    its first delivery (end to end), up to its last; the latency of each from its
    body."""

    def __init__(self, from_start: bool) -> None:
        self.cpu_started = time.process_time()
        self.from_start = from_start
        self.started: float | None = None
        self.last = time.perf_counter()
        self.count = 0
        self.latencies: list[int] = []

    def joined(self, ready: Any) -> None:
        """Once connected: tell the run so (``ready``: an Event to set, or None), or
        start with the run's other consumers (``ready``: a Barrier of all of them, which
        the last to join releases). A drain is timed from here."""
        if isinstance(ready, threading.Barrier):  # multiprocessing's is one too
            ready.wait(JOIN_TIMEOUT_S)
        elif ready is not None:
            ready.set()
        if self.from_start:
            self.started = time.perf_counter()

    def took(self, bodies: Iterable[bytes]) -> None:
        now = time.time_ns()
        for each in bodies:
            self.latencies.append(now - NS.unpack_from(each)[0])
            self.count += 1
        self.last = time.perf_counter()
        if self.started is None:
            self.started = self.last

    def report(self, group: str) -> dict[str, Any]:
        return {"role": "consumer", "group": group, "count": self.count,
                "seconds": self.last - (self.started or self.last),
                "cpu_seconds": time.process_time() - self.cpu_started,
                "latencies_ns": self.latencies[::max(1, len(self.latencies) // 20_000)]}


class ClaimTally:
    """The messages another consumer held, as this one gets them: how many distinct,
    and the wall-clock time (comparable across processes) the last came."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self.last = 0.0

    def took(self, bodies: Iterable[bytes]) -> None:
        before = len(self.seen)
        self.seen.update(bodies)
        if len(self.seen) > before:
            self.last = time.time()

    def report(self) -> dict[str, Any]:
        return {"role": "claimer", "count": len(self.seen), "last": self.last}


def held(count: int) -> dict[str, Any]:
    """A holder's report: it has ``count`` deliveries unacknowledged as of now."""
    return {"role": "holder", "count": count, "at": time.time()}


def hang() -> None:
    """Hold on to everything with the connection open, until killed."""
    while True:
        time.sleep(60)


def wait_for(start: Any, timeout: float = 60.0) -> None:
    """Wait until the consumers have joined (``start``: an Event, or None), so that an
    end-to-end latency does not count a consumer's start."""
    if start is not None and not start.wait(timeout):
        raise TimeoutError(f"the consumer did not join within {timeout:g} s")
