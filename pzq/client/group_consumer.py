"""A consumer of one group of one topic on a node's --consume-dsn (see README,
"Consumer groups"). It owns its socket and must stay on the thread that made it.

The node counts the consumer gone after three heartbeat periods without a frame
from it, so call ``receive`` (or ``heartbeat``) at least once a period: ``receive``
sends the heartbeats while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import zmq

from pzq.client.common import NOTICE_AFTER_S, WaitNotice, connect, remaining_ms
from pzq.client.consumer import Consumer, Message
from pzq.errors import ConsumeRefused, DecodeError
from pzq.protocol import consume as wire
from pzq.security import ClientCurve
from pzq.zmqio import Context, recv_frames, send_frames

NOT_CONSUMING = "before CONSUME: send CONSUME first"


class GroupConsumer(Consumer):
    """Receives the deliveries of one consumer group, at most ``window`` unacked."""

    def __init__(self, dsn: str | Sequence[str], topic: str, group: str, window: int = 100,
                 filter: str = "", start: str | int = "earliest",
                 context: Context | None = None, curve: ClientCurve | None = None,
                 timeout: float | None = 10.0,
                 notice: WaitNotice | None = None) -> None:
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
            self._await_consuming(timeout, notice)
        except BaseException:
            self._socket.close(0)
            raise

    def _await_consuming(self, timeout: float | None,
                         notice: WaitNotice | None) -> None:
        """Wait ``timeout`` seconds (None: for ever); ``notice`` is called once after
        NOTICE_AFTER_S without an answer, so a tool can say what it waits for."""
        waited = 0.0
        if notice is not None and (timeout is None or timeout > NOTICE_AFTER_S):
            if self._consuming_within(NOTICE_AFTER_S):
                return
            notice()
            waited = NOTICE_AFTER_S
        if not self._consuming_within(None if timeout is None else timeout - waited):
            raise TimeoutError(f"no answer to CONSUME within {timeout:g} s")

    def _consuming_within(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._socket.poll(remaining_ms(deadline), zmq.POLLIN):
            answer = self._read()
            if answer is None or answer.verb == wire.HEARTBEAT:
                continue
            if answer.verb == wire.ERROR:
                raise ConsumeRefused(answer.error)
            if answer.verb == wire.CONSUMING:
                self.heartbeat_s = answer.heartbeat_ms / 1000
                return True
        return False

    def _read(self) -> wire.NodeMessage | None:
        return self._decoded(self._socket.recv_multipart())

    def _decoded(self, frames: list[bytes]) -> wire.NodeMessage | None:
        try:
            return wire.decode_node_message(frames)
        except DecodeError:
            self.malformed += 1
            return None

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._heartbeat_if_due()
            # What has arrived is taken without a poll (one call less per delivery
            # while deliveries stream in); the poll is for waiting.
            try:
                frames = recv_frames(self._socket)
            except zmq.Again:
                if not self._wait(deadline):
                    return None
                continue
            if frames[0] == wire.DELIVER:
                delivery = self._decoded(frames)
                if delivery is not None:
                    return Message(delivery.key, delivery.parts, delivery.headers or {},
                                   delivery.sent_us, delivery.ack_timeout_us, b"", self)
                continue
            answer = self._decoded(frames)
            if answer is not None and answer.verb == wire.ERROR:
                self._refused(answer.error)

    def _wait(self, deadline: float | None) -> bool:
        """Wait for input, at most until a heartbeat is due; False once the deadline
        has passed."""
        wait_ms = max(1, int((self._last_sent + self.heartbeat_s - time.monotonic()) * 1000))
        left = remaining_ms(deadline)
        if self._socket.poll(wait_ms if left is None else min(left, wait_ms), zmq.POLLIN):
            return True
        return left is None or time.monotonic() < deadline  # type: ignore[operator]

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
        self._answer(True, [message.key])

    def nack(self, message: Message) -> None:
        self._answer(False, [message.key])

    def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries in one ACK (cheaper for both ends than one each)."""
        self._answer(True, [message.key for message in messages])

    def nack_many(self, messages: Iterable[Message]) -> None:
        """Give these deliveries back in one NACK."""
        self._answer(False, [message.key for message in messages])

    def _answer(self, ok: bool, keys: list[bytes]) -> None:
        # at most MAX_KEYS keys in one ACK or NACK: more go in several
        for start in range(0, len(keys), wire.MAX_KEYS):
            frames = wire.encode_answer(ok, keys[start:start + wire.MAX_KEYS])
            try:
                send_frames(self._socket, frames)
            except zmq.Again:  # the node is behind: wait for room, as a blocking send
                self._socket.send_multipart(frames)
        self._last_sent = time.monotonic()

    def close(self) -> None:
        """Say BYE, so the node gives back what is unacked at once."""
        if not self._socket.closed:
            try:
                self._socket.send_multipart([wire.BYE], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self._socket.close()
