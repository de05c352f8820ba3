"""Python clients for pzq: a windowed Producer and a Consumer.

Both speak the documented frame layouts (see pzq.protocol.frames) over plain ZeroMQ sockets,
so they also work against the original pzq. Each instance owns its sockets and
must stay on the thread that made it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import zmq

from pzq.errors import DecodeError
from pzq.protocol import frames as wire
from pzq.protocol.frames import ProducerAck
from pzq.security import ClientCurve

__all__ = ["Producer", "Consumer", "Message", "ProducerAck"]


def _endpoints(dsn: str | Sequence[str]) -> list[str]:
    return [dsn] if isinstance(dsn, str) else list(dsn)


def _connect(socket: zmq.Socket, dsn: str | Sequence[str], curve: ClientCurve | None) -> None:
    if curve is not None:
        curve.apply(socket)
    endpoints = _endpoints(dsn)
    socket.setsockopt(zmq.IPV6, any(endpoint.startswith("tcp://[") for endpoint in endpoints))
    for endpoint in endpoints:
        socket.connect(endpoint)


def _remaining_ms(deadline: float | None) -> int | None:
    if deadline is None:
        return None
    return max(0, int((deadline - time.monotonic()) * 1000))


class Producer:
    """Sends messages and collects their ACKs, keeping up to ``window`` unanswered."""

    def __init__(self, dsn: str | Sequence[str], window: int = 100,
                 context: zmq.Context | None = None, curve: ClientCurve | None = None) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.setsockopt(zmq.SNDHWM, max(1000, window * 2))
        self._socket.setsockopt(zmq.RCVHWM, max(1000, window * 2))
        _connect(self._socket, dsn, curve)
        self._id_prefix = os.urandom(6).hex().encode()
        self._counter = itertools.count()
        self._outstanding: dict[bytes, float] = {}  # msg id -> monotonic send time
        self._arrived: list[ProducerAck] = []
        self.latencies: list[float] = []  # seconds from send to ACK, in ACK order

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    def next_msg_id(self) -> bytes:
        return b"%s-%d" % (self._id_prefix, next(self._counter))

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
             msg_id: bytes | None = None, timeout: float | None = 30.0) -> bytes:
        """Send one message; waits (collecting ACKs) while the window is full."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._outstanding) >= self.window:
            if not self._receive(_remaining_ms(deadline)):
                raise TimeoutError(f"no ACK within {timeout} s with a full window")
        msg_id = msg_id or self.next_msg_id()
        self._outstanding[msg_id] = time.monotonic()
        self._socket.send_multipart(wire.encode_produce(msg_id, list(parts), tuple(headers)))
        return msg_id

    def acks(self, timeout: float = 0.0) -> list[ProducerAck]:
        """ACKs received so far, waiting up to ``timeout`` s for one if none is here."""
        if not self._arrived:
            self._receive(int(timeout * 1000))
        while self._receive(0):
            pass
        arrived, self._arrived = self._arrived, []
        return arrived

    def flush(self, timeout: float = 30.0) -> list[ProducerAck]:
        """Wait until every sent message is ACKed; returns the ACKs not yet returned."""
        deadline = time.monotonic() + timeout
        while self._outstanding:
            if not self._receive(_remaining_ms(deadline)):
                raise TimeoutError(f"{len(self._outstanding)} messages without ACK "
                                   f"after {timeout} s")
        return self.acks()

    def produce(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
                timeout: float = 30.0) -> ProducerAck:
        """Send one message and wait for its own ACK."""
        msg_id = self.send(parts, headers, timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            for position, ack in enumerate(self._arrived):
                if ack.msg_id == msg_id:
                    return self._arrived.pop(position)
            if not self._receive(_remaining_ms(deadline)):
                raise TimeoutError(f"no ACK for {msg_id!r} within {timeout} s")

    def _receive(self, timeout_ms: int | None) -> bool:
        """Take one ACK off the socket; False if none came within the timeout."""
        if not self._socket.poll(timeout_ms, zmq.POLLIN):
            return False
        frames = self._socket.recv_multipart()
        try:
            ack = wire.decode_producer_ack(frames)
        except DecodeError:
            return True  # not an ACK we understand; the protocol says ignore it
        sent = self._outstanding.pop(ack.msg_id, None)
        if sent is not None:
            self.latencies.append(time.monotonic() - sent)
            self._arrived.append(ack)
        return True

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


class Consumer:
    """Receives deliveries from one or more pzq nodes."""

    def __init__(self, dsn: str | Sequence[str], context: zmq.Context | None = None,
                 prefetch: int = 256, curve: ClientCurve | None = None) -> None:
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.setsockopt(zmq.RCVHWM, prefetch)
        _connect(self._socket, dsn, curve)
        self.malformed = 0

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._socket.poll(_remaining_ms(deadline), zmq.POLLIN):
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
