"""A Consumer of a node's --send-dsn: receives deliveries, in the original layout or
with header frames, and ACKs or gives each back (its session:
pzq.client.sessions.consumer). It owns its socket and must stay on the thread that
made it.

A consumer of a group on --consume-dsn is a ``GroupConsumer``. ``Consumer(dsn,
topic=..., group=...)`` still makes one, with a DeprecationWarning, for programs
written when it was the way: that call goes in the next release.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, cast

import zmq

from pzq.client import setup
from pzq.client.common import mark_closed, mark_open, opener, remaining_ms, watch_links
from pzq.client.group_consumer import GroupConsumer
from pzq.client.message import Message
from pzq.client.sessions.consumer import group_only
from pzq.errors import ClientClosed
from pzq.security import ClientSecurity
from pzq.zmqio import Context

__all__ = ["Consumer", "Message"]

GROUP_OPTIONS = ("topic", "group", "window", "filter", "start", "timeout", "declare",
                 "confirm")


class Consumer:
    """Receives deliveries from one or more pzq nodes on --send-dsn."""

    _closed: str  # why it may be used no more ("" while open): common.mark_open

    def __new__(cls, *args: Any, **kwargs: Any) -> Consumer:
        if cls is Consumer and any(name in kwargs for name in GROUP_OPTIONS):
            # deprecated: a GroupConsumer, typed as what the call names until it goes
            return cast(Consumer, _group_consumer(args, kwargs))
        return super().__new__(cls)

    def __init__(self, dsn: str | Sequence[str], context: Context | None = None,
                 prefetch: int = 256, curve: ClientSecurity | None = None) -> None:
        mark_open(self)
        self._session, self._socket = setup.consumer(
            prefetch, Message, self, opener(context, dsn, curve))
        self._links = watch_links(self._socket, dsn)

    @property
    def connected(self) -> bool:
        """Every endpoint has a working connection (its handshake taken, not lost since);
        a wait while one has had none for SILENT_WARN_S (5 s) is logged
        (pzq.client.link_watch)."""
        return self._links.connected(time.monotonic())

    # What inspect.signature(Consumer) and help() show: __init__'s options, not the
    # (*args, **kwargs) of __new__, which only looks for the deprecated group options.
    __signature__ = inspect.signature(__init__, eval_str=True).replace(
        parameters=list(inspect.signature(__init__, eval_str=True).parameters.values())[1:])

    @property
    def malformed(self) -> int:
        """Frames received that were no delivery (dropped)."""
        return self._session.malformed

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        if self._closed:
            raise ClientClosed(self._closed)
        deadline = None if timeout is None else time.monotonic() + timeout
        socket = self._socket
        while True:
            if not socket.poll(0, zmq.POLLIN):  # the links before a wait only, not per delivery
                until = self._links.looked(time.monotonic(), deadline)
                if not socket.poll(remaining_ms(until), zmq.POLLIN):
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
                    continue  # woken for the links' warning
            message = self._session.received(socket.recv_multipart())
            if message is not None:
                return message

    def messages(self, idle_timeout: float | None = None) -> Iterator[Message]:
        """Yield deliveries until none arrives for ``idle_timeout`` seconds."""
        while (message := self.receive(idle_timeout)) is not None:
            yield message

    def ack(self, message: Message) -> None:
        """Done with this delivery (``message.ack()`` calls this): removed from pzq."""
        if self._closed:
            raise ClientClosed(self._closed)
        self._socket.send_multipart(self._session.answer(message, True))

    def nack(self, message: Message, delay: float | None = None) -> None:
        """Give it back: delivered again soon (the original protocol has no delay:
        ValueError for one)."""
        if self._closed:
            raise ClientClosed(self._closed)
        self._socket.send_multipart(self._session.give_back(message, delay))

    def working(self, *messages: Message) -> None:
        """A group's answer: ValueError here (the original protocol has none)."""
        raise group_only("working()")

    def reject(self, *messages: Message) -> None:
        """A group's answer: ValueError here (the original protocol has none)."""
        raise group_only("reject()")

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return bool(self._closed)

    def close(self) -> None:
        """Close the socket: what it holds goes again at its ack deadline (the original
        protocol has no BYE). A second call does nothing."""
        if self._closed:
            return
        self._links.close()
        self._socket.close()
        mark_closed(self, "consumer")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _group_consumer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> GroupConsumer:
    """``Consumer(dsn, topic=..., group=...)``, as it was: a GroupConsumer, with a
    DeprecationWarning; the other options by name, checked as they were."""
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
    warnings.warn("Consumer(dsn, topic=..., group=...) is deprecated and goes in the next "
                  "release: use GroupConsumer(dsn, topic, group, ...)",
                  DeprecationWarning, stacklevel=3)
    return GroupConsumer(*args, **kwargs)
