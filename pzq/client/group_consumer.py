"""A consumer of one group of one topic on a node's --consume-dsn (see docs/groups.rst,
"The consume endpoint"). It owns its socket and must stay on the thread that made it.

The consumer stays alive for the node as long as its connection does: ZeroMQ's
heartbeats (PING and PONG) run in the socket's I/O thread, so the application may
work on a delivery as long as its ack timeout allows without calling in here.
``receive`` still sends a HEARTBEAT when it has waited a period with nothing to say:
a node that restarted does not know this connection, answers so, and the consumer
joins again.

A consumer asks for protocol 2 (``wire.LATEST_PROTOCOL``): the node then sends its
deliveries in batches, decoded here all at once, and takes many keys in one ACK frame.
A node that answers without it (or refuses it: an older node) gets protocol 1.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import zmq

from pzq.client.common import NOTICE_AFTER_S, WaitNotice, connect, remaining_ms
from pzq.client.consumer import Consumer, Message
from pzq.errors import ConsumeRefused, DecodeError
from pzq.protocol import consume as wire
from pzq.protocol.frames import parse_headers
from pzq.security import ClientCurve
from pzq.zmqio import Context, recv_frames, send_frames

NOT_CONSUMING = "before CONSUME: send CONSUME first"
# ZeroMQ heartbeats towards the node: a node that stops answering for this long is
# taken as gone, and the socket connects again.
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 3000


class GroupConsumer(Consumer, of_groups=True):
    """Receives the deliveries of one consumer group, at most ``window`` unacked."""

    def __init__(self, dsn: str | Sequence[str], topic: str, group: str, window: int = 100,
                 filter: str = "", start: str | int = "earliest",
                 context: Context | None = None, curve: ClientCurve | None = None,
                 timeout: float | None = 10.0, notice: WaitNotice | None = None,
                 declare: bool = False, confirm: bool = False,
                 protocol: int = wire.LATEST_PROTOCOL) -> None:
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        self._socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        # No receive limit: credits bound what the node sends. A full queue would
        # stop the I/O thread reading, PINGs too, and a busy consumer would look dead.
        self._socket.setsockopt(zmq.RCVHWM, 0)
        connect(self._socket, dsn, curve)
        self.malformed = 0
        self.errors: list[str] = []  # ERROR answers to ACK or NACK
        self.subscribe = wire.Subscribe(topic, group, window, filter, start,
                                        confirm=confirm, declare=declare, protocol=protocol)
        self.protocol = 1  # what the node's CONSUMING agreed to
        self._rejoining = False  # a CONSUME sent again is on its way
        self._arrived: deque[Message] = deque()  # deliveries read while waiting for ACKED
        self._unconfirmed: set[bytes] = set()  # keys ack_confirmed waits for
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
            if answer.verb == wire.ERROR and self._protocol_refused(answer.error):
                continue
            if answer.verb == wire.ERROR:
                raise ConsumeRefused(answer.error)
            if answer.verb == wire.CONSUMING:
                self.heartbeat_s = answer.heartbeat_ms / 1000
                self.protocol = answer.protocol
                return True
        return False

    def _protocol_refused(self, error: str) -> bool:
        """A node older than the PROTOCOL option refuses it: CONSUME again without."""
        if self.subscribe.protocol == 1 or "option b'PROTOCOL:" not in error:
            return False
        self.subscribe = replace(self.subscribe, protocol=1)
        self._socket.send_multipart(wire.encode_consume(self.subscribe))
        return True

    def _read(self) -> wire.NodeMessage | None:
        return self._decoded(self._socket.recv_multipart())

    def _decoded(self, frames: list[bytes]) -> wire.NodeMessage | None:
        try:
            return wire.decode_node_message(frames)
        except DecodeError:
            self.malformed += 1
            return None

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """Its socket, to wait on beside others (a routed consumer's)."""
        return self._socket

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        if self._arrived:
            return self._arrived.popleft()
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
            message = self._take(frames)
            if message is not None:
                return message

    def _take(self, frames: list[bytes]) -> Message | None:
        """A delivery, or None once whatever else the node said is heeded; the rest of
        a batch waits in turn (receive returns what waits first)."""
        self._keep(frames)
        return self._arrived.popleft() if self._arrived else None

    def _keep(self, frames: list[bytes]) -> None:
        """Deliveries to wait in turn; whatever else the node said is heeded."""
        if frames[0] == wire.BATCH:
            batch = self._decoded(frames)
            if batch is not None:
                self._arrived.extend(self._batch_messages(batch))
            return
        if frames[0] == wire.DELIVER:
            delivery = self._decoded(frames)
            if delivery is not None:
                self._arrived.append(Message(delivery.key, delivery.parts,
                                             delivery.headers or {}, delivery.sent_us,
                                             delivery.ack_timeout_us, b"", self))
            return
        answer = self._decoded(frames)
        if answer is not None:
            self._node_said(answer)

    def _batch_messages(self, batch: wire.NodeMessage) -> list[Message]:
        sent_us, ack_timeout_us = batch.sent_us, batch.ack_timeout_us
        return [Message(key, parts, parse_headers(list(headers)) if headers else {},
                        sent_us, ack_timeout_us, b"", self)
                for key, headers, parts in batch.entries]

    def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries: waits up to ``timeout`` s for the first, then takes
        what has arrived already, without waiting more (whole batches at once)."""
        first = self.receive(timeout)
        if first is None:
            return []
        found = [first]
        arrived = self._arrived
        while len(found) < most:
            if arrived:
                take = min(most - len(found), len(arrived))
                found += [arrived.popleft() for _ in range(take)]
            elif (message := self.receive(0)) is not None:
                found.append(message)
            else:
                break
        return found

    @property
    def arrived(self) -> int:
        """Deliveries decoded already (the rest of a batch), which receive returns
        without waiting."""
        return len(self._arrived)

    def __iter__(self) -> Iterator[Message]:
        """Every delivery, as it comes (``messages(idle_timeout)`` stops when idle)."""
        return self.messages()

    def _wait(self, deadline: float | None) -> bool:
        """Wait for input, at most until a heartbeat is due; False once the deadline
        has passed."""
        wait_ms = max(1, int((self._last_sent + self.heartbeat_s - time.monotonic()) * 1000))
        left = remaining_ms(deadline)
        if self._socket.poll(wait_ms if left is None else min(left, wait_ms), zmq.POLLIN):
            return True
        return left is None or time.monotonic() < deadline  # type: ignore[operator]

    def _node_said(self, answer: wire.NodeMessage) -> None:
        if answer.verb == wire.ERROR:
            self._refused(answer.error)
        elif answer.verb == wire.REFUSED:
            self._rejoin(answer.keys)
        elif answer.verb == wire.CONSUMING:
            self._rejoining = False
            self.protocol = answer.protocol
        elif answer.verb == wire.ACKED:
            self._unconfirmed.difference_update(answer.keys)

    def _refused(self, error: str) -> None:
        """Keep the node's complaint; when it does not know this connection (it
        restarted, or counted the consumer gone), join again: what it held was given
        back and comes again. A refused ACK is followed by its keys (REFUSED), which
        go with the CONSUME."""
        self.errors.append(error)
        if not error.endswith(NOT_CONSUMING):
            self._rejoining = False  # (a CONSUME sent again may have been refused)
        elif not error.startswith("ACK "):
            self._rejoin(())

    def _rejoin(self, acked: tuple[bytes, ...]) -> None:
        """CONSUME again, with the ACKs the node refused (it applies them before it
        delivers anything); once a CONSUME is on its way, ACKs go after it."""
        if self._rejoining:
            if acked:
                self._answer(True, list(acked))
            return
        self._rejoining = True
        self._socket.send_multipart(wire.encode_consume(replace(self.subscribe,
                                                                acked=acked)))
        self._last_sent = time.monotonic()

    def heartbeat(self) -> None:
        """Not needed to stay alive (the connection's heartbeats do that); kept for
        programs written when it was."""
        self._socket.send_multipart([wire.HEARTBEAT])
        self._last_sent = time.monotonic()

    def _heartbeat_if_due(self) -> None:
        if time.monotonic() - self._last_sent >= self.heartbeat_s:
            self.heartbeat()

    def ack(self, message: Message) -> None:
        self._answer(True, [message.key])

    def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries in one ACK (cheaper for both ends than one each)."""
        self._answer(True, [message.key for message in messages])

    def nack_many(self, messages: Iterable[Message]) -> None:
        """Give these deliveries back in one NACK."""
        self._answer(False, [message.key for message in messages])

    def nack(self, message: Message, delay: float | None = None) -> None:
        """Give it back: to go again at once, or after ``delay`` seconds."""
        if delay is None:
            self._answer(False, [message.key])
        else:
            self._send_keys(wire.NACK, [message.key], round(delay * 1000))

    def working(self, *messages: Message) -> None:
        """Still at work on these: each one's ack deadline starts again (send it well
        inside the deadline, as often as the work needs)."""
        self._send_keys(wire.WORKING, [message.key for message in messages])

    def reject(self, *messages: Message) -> None:
        """Give these up for good: to the dead letters, never delivered again."""
        self._send_keys(wire.REJECT, [message.key for message in messages])

    def ack_confirmed(self, messages: Iterable[Message], timeout: float = 10.0) -> None:
        """ACK and wait until the node says the ACKs are written (``confirm=True``);
        TimeoutError if it has not said so within ``timeout`` s. Deliveries that come
        meanwhile wait for ``receive``."""
        if not self.subscribe.confirm:
            raise ValueError("ack_confirmed needs GroupConsumer(..., confirm=True)")
        keys = [message.key for message in messages]
        self._unconfirmed.update(keys)
        self._answer(True, keys)
        deadline = time.monotonic() + timeout
        while self._unconfirmed.intersection(keys):
            if not self._socket.poll(remaining_ms(deadline), zmq.POLLIN):
                waiting = len(self._unconfirmed.intersection(keys))
                self._unconfirmed.difference_update(keys)
                raise TimeoutError(f"{waiting} ACKs not confirmed within {timeout} s")
            self._keep(self._socket.recv_multipart())

    def _answer(self, ok: bool, keys: list[bytes]) -> None:
        self._send_keys(wire.ACK if ok else wire.NACK, keys)

    def _send_keys(self, verb: bytes, keys: list[bytes], delay_ms: int = 0) -> None:
        # at most MAX_KEYS keys in one message: more go in several
        for start in range(0, len(keys), wire.MAX_KEYS):
            frames = wire.encode_keys(verb, keys[start:start + wire.MAX_KEYS], delay_ms,
                                      self.protocol)
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
