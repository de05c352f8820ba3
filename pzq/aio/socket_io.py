"""Whole messages in and out of a ``zmq.asyncio`` socket, without blocking the loop and
without a cancellation cutting one.

A message is sent and received with libzmq's non-blocking calls (pzq.zmqio), never
with the Future-returning ones of ``zmq.asyncio``: a receive whose Future is done
when its task is cancelled loses that message, and a send cancelled as it completes
leaves the caller unsure whether it went. Here the only waits are ``wait_events``,
which takes nothing from the socket: a task cancelled there has taken nothing and
sent nothing. Between a wait and what follows it, no ``await``: what is taken is
taken whole, in one step of the loop.

The sockets are ``AsyncSocket``: a ``zmq.asyncio`` socket whose waits are its own,
one reader on its file descriptor for all of them and a Future a waiting task (a
``zmq.asyncio`` Poller made a wait cost two Futures, a watcher and a turn of the
loop more, at every wake). The descriptor says only that something changed, once;
a call here may swallow that signal while input waits. ``poke`` looks at the
socket's events after each call that took or sent, when a task waits on it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import zmq
import zmq.asyncio
from zmq.backend import Socket as CompiledSocket

from pzq.client import common
from pzq.client.common import SocketOptions
from pzq.errors import ClientClosed
from pzq.security import ClientSecurity
from pzq.zmqio import EVENTS, POLLOUT, send_frames

AsyncContext = zmq.asyncio.Context
_events = CompiledSocket.get  # past zmq.asyncio's get, which schedules its own waiters

Waiter = tuple[int, "asyncio.Future[bool]", str]  # events, the waiting task's Future, what


class AsyncSocket(zmq.asyncio.Socket):
    """A ``zmq.asyncio`` socket whose waits (``wait_events``) are a Future each, woken
    by one reader on the descriptor, on the loop that waits; closing it tells each
    waiter ClientClosed."""

    # (pyzmq makes the socket: no __init__ here. The list is never changed in place,
    # only replaced, so the class's empty one stays empty.)
    _waiters: list[Waiter] = []
    _watched: asyncio.AbstractEventLoop | None = None

    def ready(self) -> int:
        """The socket's events now; each waiter whose events are there is woken."""
        events = int(_events(self, EVENTS))
        waiters = self._waiters
        if waiters:
            still: list[Waiter] = []
            for waiter in waiters:
                future = waiter[1]
                if future.done():
                    continue
                if waiter[0] & events:
                    future.set_result(True)
                else:
                    still.append(waiter)
            self._waiters = still
        return events

    def _wake(self) -> None:
        if not self.closed:
            self.ready()  # (also when none waits: reading the events clears the signal)

    def wait_on(self, waiter: Waiter) -> None:
        """Wake ``waiter`` when its events come (the caller looked just before)."""
        loop = asyncio.get_running_loop()
        if self._watched is not loop:  # the first wait (or a loop after another's end)
            if self._watched is not None and not self._watched.is_closed():
                self._watched.remove_reader(self.FD)
            self._watched = loop
            loop.add_reader(self.FD, self._wake)
        self._waiters = [*self._waiters, waiter]

    def forget(self, future: asyncio.Future[bool]) -> None:
        self._waiters = [waiter for waiter in self._waiters if waiter[1] is not future]

    def close(self, linger: int | None = None) -> None:
        if self.closed:
            return
        waiters, self._waiters = self._waiters, []
        for _, future, what in waiters:
            if not future.done():
                future.set_exception(ClientClosed(f"the {what} was closed while waiting"))
        loop, self._watched = self._watched, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self.FD)
        super().close(linger)


def open_socket(context: AsyncContext | None, kind: int, dsn: str | Sequence[str],
                curve: ClientSecurity | None, options: SocketOptions) -> AsyncSocket:
    """A socket of ``context`` (default: the asyncio context of the process), its
    ``options`` set, connected to ``dsn`` (a list: the socket spreads over them)."""
    return cast(AsyncSocket, common.open_socket(context or zmq.asyncio.Context.instance(),
                                                kind, dsn, curve, options, AsyncSocket))


def opener(context: AsyncContext | None, dsn: str | Sequence[str],
           curve: ClientSecurity | None) -> Callable[[int, SocketOptions], AsyncSocket]:
    """An asyncio shell's ``open_socket`` for pzq.client.setup."""
    return lambda kind, options: open_socket(context, kind, dsn, curve, options)


def poke(socket: AsyncSocket) -> None:
    """After a call here: a task waiting on the socket wakes if its event is there."""
    if socket._waiters and not socket.closed:
        socket.ready()


async def wait_events(socket: AsyncSocket, events: int, timeout: float | None,
                      what: str = "client") -> bool:
    """Wait until the socket has ``events`` (POLLIN, POLLOUT), at most ``timeout``
    seconds (None: as long as it takes); False when they did not come. Takes
    nothing. ClientClosed when the socket is closed, also by another task while this
    one waits (that is no cancellation of this task)."""
    return await wait_any([socket], events, timeout, what)


async def wait_any(sockets: Sequence[AsyncSocket], events: int, timeout: float | None,
                   what: str = "client") -> bool:
    """``wait_events`` on several sockets at once: True once any has ``events``."""
    for socket in sockets:
        if socket.closed:
            raise ClientClosed(f"the {what} is closed")
        if socket.ready() & events:
            return True
    if timeout is not None and timeout <= 0:
        return False
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool] = loop.create_future()
    for socket in sockets:
        socket.wait_on((events, future, what))
    timer = None if timeout is None else loop.call_later(timeout, _expire, future)
    try:
        woken = await future
    finally:
        if timer is not None:
            timer.cancel()
        for socket in sockets:  # (timed out, cancelled, or woken by another socket)
            socket.forget(future)
    for socket in sockets:  # woken by its events, then closed before this task ran
        if socket.closed:
            raise ClientClosed(f"the {what} was closed while waiting")
    return woken


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


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

