"""Whole messages in and out of a ``zmq.asyncio`` socket, without blocking the loop and
without a cancellation cutting one.

A message is sent and received with libzmq's non-blocking calls (pzq.zmqio), never
with the Future-returning ones of ``zmq.asyncio``: a receive whose Future is done
when its task is cancelled loses that message, and a send cancelled as it completes
leaves the caller unsure whether it went. Here the only waits are ``wait_events``,
which takes nothing from the socket: a task cancelled there has taken nothing and
sent nothing. Between a wait and what follows it, no ``await``: what is taken is
taken whole, in one step of the loop.

``zmq.asyncio`` wakes a waiting task from the socket's file descriptor, which says
only that something changed, once; a call here may swallow that signal while input
waits. ``poke`` asks the socket's events through ``zmq.asyncio``, which wakes any
task that waits on them (one option read, after each call that took or sent).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence

import zmq
import zmq.asyncio

from pzq.client.common import connect
from pzq.errors import ClientClosed
from pzq.security import ClientSecurity
from pzq.zmqio import POLLOUT, send_frames

AsyncContext = zmq.asyncio.Context
AsyncSocket = zmq.asyncio.Socket


def open_socket(context: AsyncContext | None, kind: int, dsn: str | Sequence[str],
                curve: ClientSecurity | None, options: dict[int, int | bytes]) -> AsyncSocket:
    """A socket of ``context`` (default: the asyncio context of the process), its
    ``options`` set, connected to ``dsn`` (a list: the socket spreads over them)."""
    socket = (context or zmq.asyncio.Context.instance()).socket(kind)
    try:
        for option, value in options.items():
            socket.setsockopt(option, value)
        connect(socket, dsn, curve)
    except BaseException:
        socket.close(0)
        raise
    return socket


def poke(socket: AsyncSocket) -> None:
    """After a call here: a task waiting on the socket wakes if its event is there."""
    if not socket.closed:
        socket.get(zmq.EVENTS)  # zmq.asyncio's get: it looks at its waiters


async def wait_events(socket: AsyncSocket, events: int, timeout: float | None,
                   what: str = "client") -> bool:
    """Wait until the socket has ``events`` (POLLIN, POLLOUT), at most ``timeout``
    seconds (None: as long as it takes); False when they did not come. Takes
    nothing. ClientClosed when the socket is closed, also by another task while this
    one waits (``zmq.asyncio`` cancels the wait then: that is no cancellation of
    this task)."""
    if socket.closed:
        raise ClientClosed(f"the {what} is closed")
    wait_ms = None if timeout is None else max(0, int(timeout * 1000))
    poller = zmq.asyncio.Poller()
    poller.register(socket, events)
    try:
        return bool(await poller.poll(wait_ms))
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if socket.closed and task is not None and not task.cancelling():
            raise ClientClosed(f"the {what} was closed while waiting") from None
        raise


def remaining(deadline: float | None, now: float) -> float | None:
    """Seconds left until a monotonic ``deadline`` (None: no deadline)."""
    return None if deadline is None else max(0.0, deadline - now)


class Outbox:
    """Messages to send in order, each whole (and ``poke`` after). ``put`` sends at
    once what the socket takes (without blocking); what it cannot take now waits
    here, and goes first when it can: ``drained`` waits for that, and a task of its
    own sends it meanwhile (a session's frames, once given, always go, whichever
    task is cancelled)."""

    def __init__(self, socket: AsyncSocket, what: str) -> None:
        self.socket = socket
        self.what = what  # "producer", "consumer": for errors
        self._waiting: deque[list[bytes]] = deque()
        self._sender: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, frames: list[bytes] | None) -> None:
        if frames is None:
            return
        if not self._waiting:
            try:
                send_frames(self.socket, frames)
                poke(self.socket)
                return
            except zmq.Again:
                pass  # no room now: it waits, in turn
        self._waiting.append(frames)
        self._start_sender()

    def put_all(self, messages: Iterable[list[bytes]]) -> None:
        for frames in messages:
            self.put(frames)

    def push(self) -> bool:
        """Send what waits, as far as the socket takes it now; True once none waits."""
        waiting = self._waiting
        try:
            while waiting:
                send_frames(self.socket, waiting[0])
                waiting.popleft()
        except zmq.Again:
            return False
        finally:
            poke(self.socket)
        return True

    async def drained(self, timeout: float | None = None) -> bool:
        """Wait until every message waiting here is sent; False after ``timeout`` s."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while not self.push():
            left = remaining(deadline, asyncio.get_running_loop().time())
            if left == 0.0 or not await wait_events(self.socket, POLLOUT, left, self.what):
                return False
        return True

    def _start_sender(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_waiting())

    async def _send_waiting(self) -> None:
        try:
            await self.drained()
        except ClientClosed:
            pass  # closed: what waits is the closer's to count
        finally:
            poke(self.socket)

    def dropped(self) -> list[list[bytes]]:
        """Closing: what never went, no longer waiting; the sender task stops."""
        if self._sender is not None:
            self._sender.cancel()
        waiting, self._waiting = list(self._waiting), deque()
        return waiting

