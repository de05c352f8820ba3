"""Running the asyncio clients in plain tests: a coroutine run to its end by
``asyncio.run`` within a deadline (no pytest plugin), and an asyncio context whose
sockets the test's ``context`` fixture tracks (a leaked one fails the test)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import zmq
import zmq.asyncio

T = TypeVar("T")


def run(coroutine: Awaitable[T], timeout: float = 60.0) -> T:
    """Run ``coroutine`` on a new event loop; TimeoutError after ``timeout`` s."""
    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coroutine
    return asyncio.run(bounded())


class TrackedAsyncContext(zmq.asyncio.Context):
    """An asyncio context on a tracking context's own (inproc endpoints are shared),
    whose sockets go into that context's list of those it made."""

    made: list[Any]

    def __init__(self, tracking: Any) -> None:
        super().__init__(shadow=tracking.underlying)
        self.made = tracking.made

    def socket(self, *args: Any, **kwargs: Any) -> zmq.asyncio.Socket:  # type: ignore[override]
        socket = super().socket(*args, **kwargs)
        self.made.append(socket)
        return socket


async def eventually(condition: Callable[[], T], timeout: float = 10.0,
                     message: str = "condition") -> T:
    """Ask ``condition`` until it answers something true, letting the loop run
    between; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {message}")
        await asyncio.sleep(0.02)


def waited_for_a_core() -> float:
    """Seconds this thread has been ready to run but waited for a core (Linux's
    schedstat run delay; 0 where there is none): the machine's load, not the loop."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except OSError:
        return 0.0


class Ticker:
    """How long the loop stalls: a task that asks to run every ``every`` s and keeps
    how late each turn came (seconds), less the time the thread waited for a core
    meanwhile (a loaded machine delays every turn; a blocked loop is what is sought)."""

    def __init__(self, every: float = 0.001) -> None:
        self.every = every
        self.lates: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked, queued = loop.time(), waited_for_a_core()
            await asyncio.sleep(self.every)
            late = loop.time() - asked - self.every - (waited_for_a_core() - queued)
            self.lates.append(max(0.0, late))

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.wait([self._task])

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.lates)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]
