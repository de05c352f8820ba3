"""The asyncio Consumer of a node's --send-dsn: the original pzq's delivery frames (its
session: pzq.client.sessions.consumer) on a ``zmq.asyncio`` ROUTER, as the sync
Consumer is on a plain socket. A consumer of a group on --consume-dsn is a
``GroupConsumer``.

``receive`` waits only where it has taken nothing (pzq.aio.socket_io), so a task
cancelled there loses no delivery: the next ``receive`` takes it, or the node
gives it back at its ack deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import zmq

from pzq.aio.deliveries import Deliveries
from pzq.aio.message import Message
from pzq.aio.socket_io import AsyncContext, Outbox, opener, poke, wait_events
from pzq.client import setup
from pzq.client.common import watch_links
from pzq.client.sessions.consumer import group_only
from pzq.errors import ClientClosed
from pzq.security import ClientSecurity
from pzq.zmqio import POLLIN, recv_frames


class Consumer(Deliveries):
    """Receives deliveries from one or more nodes on --send-dsn (a list of endpoints:
    from each); ``prefetch`` bounds the deliveries waiting in the socket."""

    def __init__(self, dsn: str | Sequence[str], prefetch: int = 256,
                 curve: ClientSecurity | None = None,
                 context: AsyncContext | None = None) -> None:
        self._session, self._socket = setup.consumer(prefetch, Message, self,
                                                     opener(context, dsn, curve))
        self._links = watch_links(self._socket, dsn)
        self._out = Outbox(self._socket, "consumer")
        self._closed = False

    @property
    def connected(self) -> bool:
        """Every endpoint has a working connection (its handshake taken, not lost since);
        a wait while one has had none for SILENT_WARN_S (5 s) is logged
        (pzq.client.link_watch)."""
        return self._links.connected(time.monotonic())

    @property
    def malformed(self) -> int:
        """Frames received that were no delivery (dropped)."""
        return self._session.malformed

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return self._closed

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        self._check_open()
        deadline = None if timeout is None else time.monotonic() + timeout
        socket, session, links = self._socket, self._session, self._links
        while True:
            try:
                frames = recv_frames(socket)
            except zmq.Again:
                poke(socket)
                now = time.monotonic()
                left = None if deadline is None else deadline - now
                if left is not None and left <= 0:
                    return None
                until = links.looked(now, None if left is None else now + left)
                await wait_events(socket, POLLIN, None if until is None else until - now,
                                  "consumer")
                continue
            message = session.received(frames)
            if message is not None:
                poke(socket)
                return message

    async def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries: waits up to ``timeout`` s for the first, then takes
        what has arrived already."""
        found: list[Message] = []
        message = await self.receive(timeout)
        while message is not None:
            found.append(message)
            if len(found) >= most:
                break
            message = await self.receive(0)
        return found

    async def ack(self, message: Message) -> None:
        """Done with this delivery (``await message.ack()`` calls this): removed."""
        self._answer(self._session.answer(message, True))

    async def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK each (the original protocol ACKs one delivery a message)."""
        for message in messages:
            self._answer(self._session.answer(message, True))

    async def nack(self, message: Message, delay: float | None = None) -> None:
        """Give it back: delivered again soon (the original protocol has no delay)."""
        self._answer(self._session.give_back(message, delay))

    async def working(self, *messages: Message) -> None:
        """A group's answer: ValueError here (the original protocol has none)."""
        raise group_only("working()")

    async def reject(self, *messages: Message) -> None:
        """A group's answer: ValueError here (the original protocol has none)."""
        raise group_only("reject()")

    def _answer(self, frames: list[bytes]) -> None:
        self._check_open()
        self._out.put(frames)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the consumer is closed")

    async def close(self) -> None:
        """Close; answers still waiting for room get up to a second to go."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._out.drained(1.0)
        except ClientClosed:
            pass
        finally:  # cancelled while the answers drain too: closed all the same
            self._out.dropped()
            self._links.close()
            self._socket.close()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
