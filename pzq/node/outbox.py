"""Producer ACKs owed, sent as soon as each producer's pipe has room. The figures
count messages answered: a produce batch's one ACK counts each of its messages.

The producer ROUTER runs with ROUTER_MANDATORY: a full pipe refuses an ACK
(zmq.Again) instead of dropping it silently, and the ACK waits here for the next
wake. Only a producer that is gone (EHOSTUNREACH) loses its ACK: nobody is there.
"""

from __future__ import annotations

import errno
import time
from collections import deque
from collections.abc import Sequence
from itertools import islice, repeat
from operator import itemgetter

import zmq

from pzq.bulk import each
from pzq.cluster.replication import PendingAck
from pzq.counters import Counters
from pzq.node.batch_acks import BatchAcks, OpenBatch
from pzq.protocol import frames
from pzq.protocol import produce_batches as batches
from pzq.zmqio import MORE_NOBLOCK, NOBLOCK, Socket, send_compiled, send_frames, send_messages

# Stop reading producers while this many ACKs wait for full producer pipes.
LIMIT = 200_000
RETRY_MS = 5  # how soon to retry ACKs a full pipe refused
Ack = tuple[Sequence[bytes], int]  # an ACK's frames, and how many messages it answers
FRAMES = itemgetter(0)
ANSWERS = itemgetter(1)


class ProducerAcks:
    def __init__(self, socket: Socket, counters: Counters) -> None:
        self.socket = socket
        self.counters = counters
        # each ACK with how many messages it answers (a produce batch's: all of them),
        # which the figures count
        self._waiting: deque[Ack] = deque()
        self.answers = 0  # messages the waiting ACKs answer (asked as this, not by len)
        self.batches = BatchAcks()  # produce batches: one ACK once all are answered
        # messages whose ACK says the node speaks produce batches (they asked)
        self._asked: set[tuple[bytes, bytes]] = set()

    def __len__(self) -> int:
        """Messages whose ACK waits to be sent."""
        return self.answers

    @property
    def full(self) -> bool:
        return self.answers >= LIMIT

    def owe(self, routing_id: bytes, msg_id: bytes, ok: bool, status: bytes = b"") -> None:
        if not ok:
            self.counters.acks_failed += 1
        elif status == frames.REPLICATION_FAILED:
            self.counters.acks_replication_failed += 1
        else:
            self.counters.acks_ok += 1
        self._answer(routing_id, msg_id, ok, status)

    def owe_ok(self, routing_ids: list[bytes], msg_ids: list[bytes]) -> None:
        """ACK "1" owed for each routing id and msg id in step, counted once: made in C
        (the frames of encode_producer_ack) unless a produce batch waits for answers
        or a message asked whether the node speaks them."""
        self.counters.acks_ok += len(msg_ids)
        if self.batches.open or self._asked:
            each(self._answer, routing_ids, msg_ids, repeat(True), repeat(b""))
            return
        self._waiting += zip(zip(routing_ids, msg_ids, repeat(frames.STATUS_OK), repeat(b"")),
                             repeat(1))
        self.answers += len(msg_ids)

    def owe_one_ok(self, routing_id: bytes, msg_id: bytes) -> None:
        """``owe_ok`` of one message (a wake's message sent alone: no lists, no map)."""
        self.counters.acks_ok += 1
        if self.batches.open or self._asked:
            self._answer(routing_id, msg_id, True, b"")
            return
        self._waiting.append(((routing_id, msg_id, frames.STATUS_OK, b""), 1))
        self.answers += 1

    def send_one_ok(self, routing_id: bytes, msg_id: bytes) -> None:
        """``owe_one_ok`` then ``flush``, in one call: a wake's one message sent alone
        has its ACK sent at once, its frames by the compiled send, when no ACK waits
        before it (no tuple queued, no flush asked); else it is owed and flushed."""
        if self._waiting or self.batches.open or self._asked:
            self.owe_one_ok(routing_id, msg_id)
            self.flush()
            return
        self.counters.acks_ok += 1
        socket = self.socket
        try:  # (ROUTER_MANDATORY: only the first frame is refused, then all are taken)
            send_compiled(socket, routing_id, MORE_NOBLOCK)
        except zmq.ZMQError as error:
            ack: Ack = ((routing_id, msg_id, frames.STATUS_OK, b""), 1)
            self._wait(*ack)
            if not self._refused(ack, error):  # (its producer is gone: dropped)
                self._waiting.clear()
            return
        send_compiled(socket, msg_id, MORE_NOBLOCK)
        send_compiled(socket, frames.STATUS_OK, MORE_NOBLOCK)
        send_compiled(socket, b"", NOBLOCK)
        self.counters.producer_acks_sent += 1

    def owe_run(self, batch: OpenBatch, first: int, count: int) -> None:
        """ACK "1" owed for the members ``first`` to ``first + count`` of a produce
        batch, stored together: counted and answered at once."""
        self.counters.acks_ok += count
        batch_ack = self.batches.answer_run(batch, first, count)
        if batch_ack:  # (it answers every member of the batch)
            self._wait(batch_ack, len(batch.results))

    def _answer(self, routing_id: bytes, msg_id: bytes, ok: bool, status: bytes) -> None:
        """A batch's message is answered in the batch's one ACK once all are."""
        if self.batches:
            batch_ack = self.batches.answer(routing_id, msg_id, ok, status)
            if batch_ack is not None:
                if batch_ack:
                    self._wait(batch_ack, batches.answered(batch_ack))
                return
        self._plain(routing_id, msg_id, ok, status)

    def _plain(self, routing_id: bytes, msg_id: bytes, ok: bool, status: bytes) -> None:
        """The ACK of a message sent alone."""
        ack = frames.encode_producer_ack(routing_id, msg_id, ok, status)
        if self._asked and (routing_id, msg_id) in self._asked:
            self._asked.discard((routing_id, msg_id))
            ack.insert(3, batches.PROTOCOL_HEADER)  # a header frame, before the empty one
        self._wait(ack, 1)

    def replicated(self, done: list[PendingAck]) -> None:
        """ACKs that waited for copies: all confirmed, or the deadline passed."""
        for ack in done:
            self.owe(ack.routing_id, ack.msg_id, True,
                     b"" if ack.replicated else frames.REPLICATION_FAILED)

    def _wait(self, ack: Sequence[bytes], answers: int) -> None:
        self._waiting.append((ack, answers))
        self.answers += answers

    def asked_protocol(self, routing_id: bytes, msg_id: bytes) -> None:
        """The message asked whether the node speaks produce batches: its ACK says so."""
        self._asked.add((routing_id, msg_id))

    def flush(self) -> bool:
        """Send what the pipes take now, by map (pzq.zmqio.send_messages); an ACK a full
        pipe refuses waits for the next wake, one to a producer gone is dropped, and
        those after either are sent. True when some wait still."""
        if len(self._waiting) <= 1:  # (a wake of one message: no map's few calls)
            return bool(self._waiting) and self._flush_one()
        waiting = list(self._waiting)
        acks = list(map(FRAMES, waiting))
        refused: deque[Ack] = deque()
        start = 0
        while start < len(acks):
            end, error = send_messages(self.socket, acks, start)
            answers = sum(map(ANSWERS, islice(waiting, start, end)))
            self.counters.producer_acks_sent += answers
            self.answers -= answers
            start = end + 1
            if error is None:
                break
            self._waiting = refused + deque(waiting[end:])  # (if it raises)
            if self._refused(waiting[end], error):
                refused.append(waiting[end])
        self._waiting = refused
        return bool(refused)

    def _flush_one(self) -> bool:
        """``flush`` of the one ACK waiting: True when it waits still."""
        ack = self._waiting[0]
        try:
            send_frames(self.socket, ack[0])
        except zmq.ZMQError as error:
            if self._refused(ack, error):
                return True
        else:
            self.counters.producer_acks_sent += ack[1]
            self.answers -= ack[1]
        self._waiting.clear()
        return False

    def _refused(self, ack: Ack, error: zmq.ZMQError) -> bool:
        """An ACK not sent: True when it waits for room (a full pipe), False when it is
        dropped (its producer is gone); any other error is raised."""
        if isinstance(error, zmq.Again):
            return True
        if error.errno != errno.EHOSTUNREACH:
            raise error
        self.counters.producer_acks_dropped += ack[1]  # that producer is gone
        self.answers -= ack[1]
        return False

    def flush_before_exit(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self._waiting and time.monotonic() < deadline:
            self.flush()
            if self._waiting:
                time.sleep(RETRY_MS / 1000)  # pacing a retry, not synchronising
