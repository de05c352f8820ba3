"""A delivery as the asyncio consumers hand it out: ``await message.ack()`` removes it
from pzq, ``nack()`` gives it back (pzq.client.sessions.delivered has its fields)."""

from __future__ import annotations

from typing import Protocol

from pzq.client.sessions.delivered import Delivered


class Answers(Protocol):
    """The consumer a message came from, which answers for it."""

    async def ack(self, message: Message) -> None: ...

    async def nack(self, message: Message, delay: float | None = None) -> None: ...

    async def working(self, *messages: Message) -> None: ...

    async def reject(self, *messages: Message) -> None: ...


class Message(Delivered):
    """One delivery. Its answers go to the consumer it came from; each is on its way
    when the call returns (a cancelled call has given its answer too: it waits for
    nothing the answer needs).

    Its fields: ``key`` (bytes: the node's name of the message, which its answers
    carry), ``parts`` (a tuple of the body's frames, bytes), ``headers`` (a dict of
    the header frames, ``NAME: value`` texts, such as ``TOPIC``), ``sent_us`` (when
    the node sent it, µs since the epoch, the node's clock), ``ack_timeout_us`` (µs
    the node waits for an answer before it delivers the message again),
    ``deadline_us`` (their sum), ``deliveries`` (how often it was delivered, or None)
    and ``peer`` (the node's routing id on --send-dsn, empty on --consume-dsn). Its
    repr shortens a long body (a part past 48 bytes, past 8 parts)."""

    _consumer: Answers

    async def ack(self) -> None:
        """Done with it: removed from pzq."""
        await self._consumer.ack(self)

    async def nack(self, delay: float | None = None) -> None:
        """Give it back: delivered again at once, or after ``delay`` seconds (a group's
        delivery only)."""
        await self._consumer.nack(self, delay)

    async def working(self) -> None:
        """Still at work on it: its ack deadline starts again (a group's delivery)."""
        await self._consumer.working(self)

    async def reject(self) -> None:
        """Give it up for good: to the dead letters (a group's delivery)."""
        await self._consumer.reject(self)
