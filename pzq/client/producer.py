"""A windowed Producer: sends messages and collects their ACKs.

It speaks the documented frame layouts (pzq.protocol.frames) over a plain ZeroMQ
DEALER, so it also works against the original pzq. Its first message asks whether the
node speaks produce batches (pzq.protocol.produce_batches); once the node says so,
messages go in batches of up to ``batch``, each answered by one ACK, while earlier
batches are out (the window, in messages, bounds them all). An instance owns its
socket and must stay on the thread that made it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from collections.abc import Sequence

import zmq

from pzq.client.common import connect, remaining_ms
from pzq.errors import DecodeError
from pzq.protocol import frames as wire
from pzq.protocol import produce_batches as batches
from pzq.protocol.frames import ProducerAck
from pzq.protocol.headers import DEDUP_HEADER, TAG_HEADER, TOPIC_HEADER
from pzq.security import ClientCurve
from pzq.zmqio import Context


def topic_headers(topic: str | None, tag: str | None,
                  dedup_id: str | bytes | None = None) -> list[bytes]:
    found = [] if topic is None else [TOPIC_HEADER + topic.encode()]
    found += [] if tag is None else [TAG_HEADER + tag.encode()]
    if dedup_id is not None:
        found.append(DEDUP_HEADER + (dedup_id.encode() if isinstance(dedup_id, str)
                                     else dedup_id))
    return found


KEEP_ACKS = 100_000  # ACKs not yet read with acks(), and latencies, a producer keeps
MOST_IN_BATCH = 1000  # the default batch: a quarter of the window, at most this


class Producer:
    """Sends messages and collects their ACKs, keeping up to ``window`` unanswered.

    A long-lived producer stays the same size: it keeps the last ``keep_acks`` ACKs
    that ``acks()`` has not returned yet (older ones are dropped and counted in
    ``acks_dropped``) and the last ``keep_acks`` latencies.

    ``batch``: most messages in one produce batch (default a quarter of the window,
    so that four batches are out at once); 1 sends every message alone."""

    def __init__(self, dsn: str | Sequence[str], window: int = 100,
                 context: Context | None = None, curve: ClientCurve | None = None,
                 keep_acks: int = KEEP_ACKS, batch: int | None = None) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.batch = max(1, min(window // 4, MOST_IN_BATCH)) if batch is None else batch
        if not 1 <= self.batch <= batches.MAX_MESSAGES:
            raise ValueError(f"batch must be from 1 to {batches.MAX_MESSAGES}")
        if keep_acks < 1:
            raise ValueError("keep_acks must be at least 1")
        self.window = window
        self.keep_acks = keep_acks
        self.acks_dropped = 0
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.setsockopt(zmq.SNDHWM, max(1000, window * 2))
        self._socket.setsockopt(zmq.RCVHWM, max(1000, window * 2))
        connect(self._socket, dsn, curve)
        self._id_prefix = os.urandom(6).hex().encode()
        self._counter = itertools.count()
        self._outstanding: dict[bytes, float] = {}  # msg id -> monotonic send time
        self._arrived: deque[ProducerAck] = deque()
        # seconds from send to ACK, in ACK order, the last ``keep_acks``
        self.latencies: deque[float] = deque(maxlen=keep_acks)
        self.protocol = 1  # 2 once the node said it speaks produce batches
        self._asking: bytes | None = None  # the message that asked the node
        self._pending: list[tuple[bytes, bytes]] = []  # msg id, entry: the next batch
        self._batches: dict[bytes, list[bytes]] = {}  # batch id -> its msg ids, out

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """Its socket, to wait on beside others (a routed producer's)."""
        return self._socket

    def next_msg_id(self) -> bytes:
        return b"%s-%d" % (self._id_prefix, next(self._counter))

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
             msg_id: bytes | None = None, timeout: float | None = 30.0,
             topic: str | None = None, tag: str | None = None,
             dedup_id: str | bytes | None = None) -> bytes:
        """Send one message; waits (collecting ACKs) while the window is full.
        ``topic``, ``tag`` and ``dedup_id`` add the TOPIC, TAG and DEDUP-ID header
        frames (a repeat of a ``dedup_id`` within the topic's window is stored once)."""
        headers = [*headers, *topic_headers(topic, tag, dedup_id)]
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._outstanding) >= self.window:
            if len(self._pending) == len(self._outstanding):  # nothing out: they go
                self._send_pending()
            if not self._receive(remaining_ms(deadline)):
                raise TimeoutError(f"no ACK within {timeout} s with a full window")
        msg_id = msg_id or self.next_msg_id()
        self._outstanding[msg_id] = time.monotonic()
        if self.protocol > 1:
            self._pending.append((msg_id, batches.encode_entry(msg_id, headers, parts)))
            # a full batch goes, and so does a message while nothing is out (no wait
            # for a slow producer); else the batch fills while ACKs free the window
            if len(self._pending) >= self.batch or len(self._outstanding) == 1:
                self._send_pending()
            return msg_id
        if self.batch > 1 and self._asking is None:
            self._asking = msg_id
            headers.append(batches.PROTOCOL_HEADER)
        self._socket.send_multipart(wire.encode_produce(msg_id, list(parts), tuple(headers)))
        return msg_id

    def _send_pending(self) -> None:
        """The messages waiting for a batch go now, in one."""
        if self._pending:
            batch_id = self.next_msg_id()
            self._batches[batch_id] = [msg_id for msg_id, _ in self._pending]
            self._socket.send_multipart(batches.encode_batch(
                batch_id, [entry for _, entry in self._pending]))
            self._pending = []

    def acks(self, timeout: float = 0.0) -> list[ProducerAck]:
        """ACKs received so far, waiting up to ``timeout`` s for one if none is here."""
        self._send_pending()
        if not self._arrived:
            self._receive(int(timeout * 1000))
        while self._receive(0):
            pass
        arrived = list(self._arrived)
        self._arrived.clear()
        return arrived

    def flush(self, timeout: float = 30.0) -> list[ProducerAck]:
        """Wait until every sent message is ACKed; returns the ACKs not yet returned."""
        deadline = time.monotonic() + timeout
        self._send_pending()
        while self._outstanding:
            if not self._receive(remaining_ms(deadline)):
                raise TimeoutError(f"{len(self._outstanding)} messages without ACK "
                                   f"after {timeout} s")
        return self.acks()

    def produce(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
                timeout: float = 30.0, topic: str | None = None,
                tag: str | None = None, dedup_id: str | bytes | None = None) -> ProducerAck:
        """Send one message and wait for its own ACK."""
        msg_id = self.send(parts, headers, timeout=timeout, topic=topic, tag=tag,
                           dedup_id=dedup_id)
        self._send_pending()
        deadline = time.monotonic() + timeout
        while True:
            for position, ack in enumerate(self._arrived):
                if ack.msg_id == msg_id:
                    del self._arrived[position]
                    return ack
            if not self._receive(remaining_ms(deadline)):
                raise TimeoutError(f"no ACK for {msg_id!r} within {timeout} s")

    def _receive(self, timeout_ms: int | None) -> bool:
        """Take one ACK off the socket; False if none came within the timeout."""
        if not self._socket.poll(timeout_ms, zmq.POLLIN):
            return False
        frames = self._socket.recv_multipart()
        try:
            if batches.is_batch_ack(frames):
                self._batch_answered(batches.decode_batch_ack(frames))
                return True
            ack = wire.decode_producer_ack(frames)
        except DecodeError:
            return True  # not an ACK we understand; the protocol says ignore it
        if ack.msg_id == self._asking and batches.speaks_batches(frames[2:]):
            self.protocol = 2
        members = self._batches.pop(ack.msg_id, None)
        if members is not None:  # a batch the node could not read: none stored
            for msg_id in members:
                self._took(ProducerAck(msg_id, ack.ok, ack.status_message))
        else:
            self._took(ack)
        return True

    def _batch_answered(self, answer: batches.BatchAck) -> None:
        members = self._batches.pop(answer.batch_id, None)
        if members is None or len(members) != len(answer.results):
            return  # not a batch of ours: ignored, as any ACK we do not know
        for msg_id, (ok, status_message) in zip(members, answer.results, strict=True):
            self._took(ProducerAck(msg_id, ok, status_message))

    def _took(self, ack: ProducerAck) -> None:
        sent = self._outstanding.pop(ack.msg_id, None)
        if sent is not None:
            self.latencies.append(time.monotonic() - sent)
            if len(self._arrived) >= self.keep_acks:
                self._arrived.popleft()  # never read: the oldest goes
                self.acks_dropped += 1
            self._arrived.append(ack)

    def close(self) -> None:
        self._send_pending()  # sent, as a message sent alone would have been
        self._socket.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
