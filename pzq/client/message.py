"""A delivery as the sync consumers hand it out: ``ack()`` removes it from pzq,
``nack()`` gives it back (pzq.client.sessions.delivered has its fields)."""

from __future__ import annotations

from typing import Protocol

from pzq.client.sessions.delivered import Delivered


class Answers(Protocol):
    """The consumer a message came from, which answers for it."""

    def ack(self, message: Message) -> None: ...

    def nack(self, message: Message) -> None: ...


class Message(Delivered):
    """One delivery. ``ack()`` removes it from pzq; ``nack()`` gives it back."""

    _consumer: Answers

    def ack(self) -> None:
        self._consumer.ack(self)

    def nack(self) -> None:
        self._consumer.nack(self)
