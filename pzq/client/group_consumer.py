"""A consumer of one group of one topic on a node's --consume-dsn (see README,
"Consumer groups"). It owns its socket and must stay on the thread that made it.

The node counts the consumer gone after three heartbeat periods without a frame
from it, so call ``receive`` (or ``heartbeat``) at least once a period: ``receive``
sends the heartbeats while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import zmq

from pzq.client.common import connect, remaining_ms
from pzq.client.consumer import Consumer, Message
from pzq.errors import ConsumeRefused, DecodeError
from pzq.protocol import consume as wire
from pzq.security import ClientCurve
from pzq.zmqio import Context

NOT_CONSUMING = "before CONSUME: send CONSUME first"


class GroupConsumer(Consumer):
    """Receives the deliveries of one consumer group, at most ``window`` unacked."""

    def __init__(self, dsn: str | Sequence[str], topic: str, group: str, window: int = 100,
                 filter: str = "", start: str | int = "earliest",
                 context: Context | None = None, curve: ClientCurve | None = None,
                 timeout: float = 10.0) -> None:
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 1000)
        connect(self._socket, dsn, curve)
        self.malformed = 0
        self.errors: list[str] = []  # ERROR answers to ACK or NACK
        self.subscribe = wire.Subscribe(topic, group, window, filter, start)
        self.heartbeat_s = 1.0
        self._last_sent = time.monotonic()
        self._socket.send_multipart(wire.encode_consume(self.subscribe))
        try:
            self._await_consuming(timeout)
        except BaseException:
            self._socket.close(0)
            raise

    def _await_consuming(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._socket.poll(remaining_ms(deadline), zmq.POLLIN):
            answer = self._read()
            if answer is None or answer.verb == wire.HEARTBEAT:
                continue
            if answer.verb == wire.ERROR:
                raise ConsumeRefused(answer.error)
            if answer.verb == wire.CONSUMING:
                self.heartbeat_s = answer.heartbeat_ms / 1000
                return
        raise TimeoutError(f"no answer to CONSUME within {timeout} s")

    def _read(self) -> wire.NodeMessage | None:
        try:
            return wire.decode_node_message(self._socket.recv_multipart())
        except DecodeError:
            self.malformed += 1
            return None

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._heartbeat_if_due()
            wait = self._last_sent + self.heartbeat_s - time.monotonic()
            left = remaining_ms(deadline)
            slice_ms = max(1, int(wait * 1000)) if left is None else min(left,
                                                                         max(1, int(wait * 1000)))
            if self._socket.poll(slice_ms, zmq.POLLIN):
                answer = self._read()
                if answer is not None and answer.verb == wire.DELIVER:
                    return Message(answer.key, answer.parts, answer.headers or {},
                                   answer.sent_us, answer.ack_timeout_us, b"", self)
                if answer is not None and answer.verb == wire.ERROR:
                    self._refused(answer.error)
            elif left is not None and time.monotonic() >= deadline:  # type: ignore[operator]
                return None

    def _refused(self, error: str) -> None:
        """Keep the node's complaint; when it counted this consumer gone (silent too
        long), join again: what it held was given back and comes again."""
        self.errors.append(error)
        if error.endswith(NOT_CONSUMING):
            self._socket.send_multipart(wire.encode_consume(self.subscribe))
            self._last_sent = time.monotonic()

    def heartbeat(self) -> None:
        self._socket.send_multipart([wire.HEARTBEAT])
        self._last_sent = time.monotonic()

    def _heartbeat_if_due(self) -> None:
        if time.monotonic() - self._last_sent >= self.heartbeat_s:
            self.heartbeat()

    def ack(self, message: Message) -> None:
        self._socket.send_multipart(wire.encode_answer(True, [message.key]))
        self._last_sent = time.monotonic()

    def nack(self, message: Message) -> None:
        self._socket.send_multipart(wire.encode_answer(False, [message.key]))
        self._last_sent = time.monotonic()

    def close(self) -> None:
        """Say BYE, so the node gives back what is unacked at once."""
        if not self._socket.closed:
            try:
                self._socket.send_multipart([wire.BYE], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self._socket.close()
