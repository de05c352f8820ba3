"""A Consumer: receives deliveries, in the original layout or with header frames, and
ACKs or gives each back. It owns its socket and must stay on the thread that made it.

Given ``topic=`` and ``group=`` it is a consumer of that group on a node's
--consume-dsn instead: ``Consumer(dsn, topic=..., group=...)`` makes a GroupConsumer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from pzq.client.common import connect, remaining_ms
from pzq.errors import DecodeError
from pzq.protocol import frames as wire
from pzq.security import ClientCurve
from pzq.zmqio import Context


@dataclass
class Message:
    """One delivery. ``ack()`` removes it from pzq; ``nack()`` gives it back."""

    key: bytes
    parts: tuple[bytes, ...]
    headers: dict[str, str]
    sent_us: int
    ack_timeout_us: int
    peer: bytes
    _consumer: Consumer = field(repr=False)

    @property
    def deadline_us(self) -> int:
        return self.sent_us + self.ack_timeout_us

    @property
    def deliveries(self) -> int | None:
        """How often this message was delivered; None unless the node runs with
        --delivery-headers (the original layout carries no count)."""
        return wire.delivery_count(self.headers)

    def ack(self) -> None:
        self._consumer.ack(self)

    def nack(self) -> None:
        self._consumer.nack(self)


GROUP_OPTIONS = ("topic", "group", "window", "filter", "start", "timeout", "declare",
                 "confirm")


class Consumer:
    """Receives deliveries from one or more pzq nodes: on --send-dsn, or with ``topic``
    and ``group`` given, as a consumer of that group on --consume-dsn."""

    # The class that serves topic= and group= (pzq.client.group_consumer names itself
    # here as it is defined: it builds on this module, which does not import it).
    _of_groups: type[Consumer]

    def __init_subclass__(cls, of_groups: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if of_groups:
            Consumer._of_groups = cls

    def __new__(cls, *args: Any, **kwargs: Any) -> Consumer:
        if cls is not Consumer or not any(name in kwargs for name in GROUP_OPTIONS):
            return super().__new__(cls)
        if kwargs.get("topic") is None and kwargs.get("group") is None:
            given = ", ".join(f"{name}=" for name in GROUP_OPTIONS if name in kwargs)
            raise TypeError(f"{given} only with topic= and group= (a consumer of a group "
                            "on --consume-dsn); a consumer of --send-dsn takes prefetch=, "
                            "and waits as long as receive(timeout) says")
        if kwargs.get("topic") is None or kwargs.get("group") is None:
            raise TypeError("a group consumer needs both topic= and group=")
        if len(args) > 1 or "prefetch" in kwargs:
            raise TypeError("with topic= and group=, give the other options by name "
                            "(window=, not prefetch=, sets how many deliveries may be unacked)")
        # Python then runs the group consumer's __init__ with the same arguments.
        return super().__new__(Consumer._of_groups)

    def __init__(self, dsn: str | Sequence[str], context: Context | None = None,
                 prefetch: int = 256, curve: ClientCurve | None = None, *,
                 topic: str | None = None, group: str | None = None, window: int = 100,
                 filter: str = "", start: str | int = "earliest",
                 timeout: float = 10.0, declare: bool = False, confirm: bool = False) -> None:
        # topic and the others after it are here for their names and types only:
        # given, __new__ made a GroupConsumer, whose own __init__ takes them.
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.setsockopt(zmq.RCVHWM, prefetch)
        connect(self._socket, dsn, curve)
        self.malformed = 0

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._socket.poll(remaining_ms(deadline), zmq.POLLIN):
            frames = self._socket.recv_multipart()
            try:
                delivery = wire.decode_delivery(frames)
            except DecodeError:
                self.malformed += 1
                continue
            return Message(delivery.key, delivery.parts, delivery.headers, delivery.sent_us,
                           delivery.ack_timeout_us, delivery.peer, self)
        return None

    def messages(self, idle_timeout: float | None = None) -> Iterator[Message]:
        """Yield deliveries until none arrives for ``idle_timeout`` seconds."""
        while (message := self.receive(idle_timeout)) is not None:
            yield message

    def ack(self, message: Message) -> None:
        self._socket.send_multipart(wire.encode_consumer_ack(message.peer, message.key, True))

    def nack(self, message: Message) -> None:
        self._socket.send_multipart(wire.encode_consumer_ack(message.peer, message.key, False))

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
