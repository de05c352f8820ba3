"""A delivery as the sync consumers hand it out: ``ack()`` removes it from pzq,
``nack()`` gives it back (pzq.client.sessions.delivered has its fields). Its answers
are the asyncio Message's (pzq.aio.message), called without ``await``."""

from __future__ import annotations

from typing import Protocol

from pzq.client.sessions.delivered import Delivered


class Answers(Protocol):
    """The consumer a message came from, which answers for it."""

    def ack(self, message: Message) -> None: ...

    def nack(self, message: Message, delay: float | None = None) -> None: ...

    def working(self, *messages: Message) -> None: ...

    def reject(self, *messages: Message) -> None: ...


class Message(Delivered):
    """One delivery. Its answers go to the consumer it came from.

    Its fields: ``key`` (bytes: the node's name of the message, which its answers
    carry), ``parts`` (a tuple of the body's frames, bytes), ``headers`` (a dict of
    the header frames, ``NAME: value`` texts, such as ``TOPIC``), ``sent_us`` (when
    the node sent it, µs since the epoch, the node's clock), ``ack_timeout_us`` (µs
    the node waits for an answer before it delivers the message again),
    ``deadline_us`` (their sum), ``deliveries`` (how often it was delivered, or None)
    and ``peer`` (the node's routing id on --send-dsn, empty on --consume-dsn). Its
    repr shortens a long body (a part past 48 bytes, past 8 parts)."""

    _consumer: Answers

    def ack(self) -> None:
        """Done with it: removed from pzq."""
        self._consumer.ack(self)

    def nack(self, delay: float | None = None) -> None:
        """Give it back: delivered again at once, or after ``delay`` seconds (a group's
        delivery only; a delay below 0, beyond a week or not a number is a ValueError
        before anything is sent)."""
        self._consumer.nack(self, delay)

    def working(self) -> None:
        """Still at work on it: its ack deadline starts again (a group's delivery)."""
        self._consumer.working(self)

    def reject(self) -> None:
        """Give it up for good: to the dead letters (a group's delivery)."""
        self._consumer.reject(self)
