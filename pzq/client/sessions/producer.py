"""A producer's session with one node: its window, its produce batches, and which
message each arriving ACK answers.

The first message asks whether the node speaks produce batches
(pzq.protocol.produce_batches); once the node says so, messages wait in a batch of
up to ``batch`` and go together, each answered in one ACK, while earlier batches are
out (the window, in messages, bounds them all). A shell sends what ``add`` and the
batch questions return; ``received`` takes any frame the node sends and returns the
ACKs it answers, so a shell may wait for the window or for one message's ACK alike.

With an ``ack_timeout``, a message out that long without its ACK is given up
(``overdue``): a node killed with it, or with its ACK, never answers it, and its
room in the window would be taken for good.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from collections.abc import Sequence
from itertools import repeat

from pzq.errors import DecodeError
from pzq.protocol import produce_batches as batches
from pzq.protocol.frames import NO_ACK, ProducerAck, decode_producer_ack, encode_produce
from pzq.protocol.headers import DEDUP_HEADER, KEY_HEADER, TAG_HEADER, TOPIC_HEADER
from pzq.protocol.time_headers import Moment, time_headers

__all__ = ["ACK_TIMEOUT_S", "KEEP_ACKS", "Moment", "ProducerSession", "check_frames",
           "given_up_error", "time_headers", "topic_headers", "with_options"]

KEEP_ACKS = 100_000  # ACKs not yet taken, and latencies, a producer keeps
# a message out this long without its ACK is given up (the shells' default; a send
# waits 30 s)
ACK_TIMEOUT_S = 20.0
MOST_IN_BATCH = 1000  # the default batch: a quarter of the window, at most this


def topic_headers(topic: str | None, tag: str | None,
                  dedup_id: str | bytes | None = None,
                  key: str | bytes | None = None) -> list[bytes]:
    """The TOPIC, TAG, DEDUP-ID and KEY header frames of a message's options; TypeError
    for one of another type (a list given where the topic goes, say)."""
    for name, value, kinds in (("topic", topic, str), ("tag", tag, str),
                               ("dedup_id", dedup_id, (str, bytes)),
                               ("key", key, (str, bytes))):
        if value is not None and not isinstance(value, kinds):
            raise TypeError(f"{name} must be {'a str' if kinds is str else 'a str or bytes'}, "
                            f"got {_shown(value)}")
    found = [] if topic is None else [TOPIC_HEADER + topic.encode()]
    found += [] if tag is None else [TAG_HEADER + tag.encode()]
    if dedup_id is not None:
        found.append(DEDUP_HEADER + _bytes(dedup_id))
    if key is not None:
        found.append(KEY_HEADER + _bytes(key))
    return found


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def topic_frames(made: dict[str | None, list[bytes]], topic: str | None) -> list[bytes]:
    """A topic's TOPIC frame, made once and kept in ``made`` (a shell's own)."""
    try:
        return made[topic]
    except KeyError:
        found = made[topic] = topic_headers(topic, None)
        return found
    except TypeError:  # unhashable: no topic's name, which topic_headers says
        return topic_headers(topic, None)


def with_options(made: dict[str | None, list[bytes]], headers: Sequence[bytes],
                 topic: str | None, key: str | bytes | None, tag: str | None,
                 dedup_id: str | bytes | None) -> Sequence[bytes]:
    """``headers`` and the frames of a message's options after them, for either shell:
    a topic's frame alone made once and kept in ``made`` (the shell's own); TypeError
    for headers given as one value, or an option of another type, before anything is
    taken."""
    if headers:
        check_list("headers", headers)
    if tag is None and dedup_id is None and key is None:
        if topic is None:
            return headers
        found = topic_frames(made, topic)
        return [*headers, *found] if headers else found
    return [*headers, *topic_headers(topic, tag, dedup_id, key)]


FRAME_TYPES = (bytes, bytearray, memoryview)


def check_frames(parts: Sequence[bytes], headers: Sequence[bytes]) -> None:
    """TypeError naming the first of a message's parts or header frames that is not
    bytes, or a whole message given as one bytes or str. Checked before anything is
    sent: a socket takes a message's frames one by one, so a bad one after the first
    would leave half a message on it, which the next message would end."""
    for what, frames in (("parts", parts), ("headers", headers)):
        check_list(what, frames)
        for index, frame in enumerate(frames):
            if not isinstance(frame, FRAME_TYPES):
                raise TypeError(f"{what} must be bytes frames: {what}[{index}] is "
                                f"{_shown(frame)}")


def check_list(what: str, frames: Sequence[bytes]) -> None:
    """TypeError for ``parts`` or ``headers`` given as one value, not a list of frames
    (a topic given where the sync ``send`` takes its headers, say)."""
    if isinstance(frames, (str, *FRAME_TYPES)) or not isinstance(frames, Sequence):
        by_name = "; give topic and the other options by name" if what == "headers" else ""
        raise TypeError(f"{what} must be a list of bytes frames, got {_shown(frames)}"
                        f"{by_name}")


def _shown(value: object) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{type(value).__name__} {shown}"


def unanswered_error(timeout: float | None, why: str) -> TimeoutError:
    """What a shell raises when a message's own ACK did not come within ``timeout`` s
    (the sync ``produce``, the asyncio ``send``): ``why`` is what a probe found at the
    endpoint (pzq.curve_probe.why_silent, pzq.aio.probe.why_silent)."""
    return TimeoutError(f"no ACK within {timeout:g} s: {why}")


def given_up_error(ack_timeout: float) -> TimeoutError:
    """What a shell raises for a message given up (``overdue``)."""
    return TimeoutError(
        f"no ACK within {ack_timeout:g} s of sending: the node may have stored the "
        f"message or not (a connection lost with it or with its ACK); send it again "
        f"with the same dedup_id to have it stored once")


class ProducerSession:
    """Up to ``window`` messages unanswered, sent alone or in batches of ``batch``.

    ``unanswered`` maps each message id to its send time until its ACK; ``arrived``
    keeps the last ``keep_acks`` ACKs not yet taken (older ones are dropped and
    counted in ``acks_dropped``), ``latencies`` the last ``keep_acks`` seconds from
    send to ACK. A shell that takes each ACK from ``received``'s answer (the asyncio
    one, which resolves a future a message) says ``keep_arrived=False``: then
    ``arrived`` stays empty."""

    def __init__(self, window: int = 100, batch: int | None = None,
                 keep_acks: int = KEEP_ACKS, id_prefix: bytes | None = None,
                 keep_arrived: bool = True, ack_timeout: float | None = None) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.batch = max(1, min(window // 4, MOST_IN_BATCH)) if batch is None else batch
        if not 1 <= self.batch <= batches.MAX_MESSAGES:
            raise ValueError(f"batch must be from 1 to {batches.MAX_MESSAGES}")
        if keep_acks < 1:
            raise ValueError("keep_acks must be at least 1")
        if ack_timeout is not None and not ack_timeout > 0:
            raise ValueError("ack_timeout must be more than 0 s (None: wait for ever)")
        self.ack_timeout = ack_timeout
        self.window = window
        self.keep_acks = keep_acks
        self.keep_arrived = keep_arrived
        self.acks_dropped = 0
        self.protocol = 1  # 2 once the node said it speaks produce batches
        self.unanswered: dict[bytes, float] = {}  # msg id -> send time
        self.arrived: deque[ProducerAck] = deque(maxlen=keep_acks)
        self.latencies: deque[float] = deque(maxlen=keep_acks)  # in ACK order
        self._id_prefix = id_prefix or os.urandom(6).hex().encode()
        # each message's id (and each batch's), made in C: ``next(session.ids)``
        self.ids = map((self._id_prefix.replace(b"%", b"%%") + b"-%d").__mod__,
                       itertools.count())
        self._asking: bytes | None = None  # the message that asked the node
        self._pending: list[tuple[bytes, bytes]] = []  # msg id, entry: the next batch
        self._pending_bytes = 0  # of the entries in ``_pending``
        self._batches: dict[bytes, list[bytes]] = {}  # batch id -> its msg ids, out
        # with an ack_timeout, what went and waits for its ACK, in the order it went:
        # batch id (or msg id of a message sent alone) -> when it went
        self._out_since: dict[bytes, float] = {}

    def next_msg_id(self) -> bytes:
        return next(self.ids)

    @property
    def full(self) -> bool:
        """No room in the window: an ACK must come before the next message."""
        return len(self.unanswered) >= self.window

    def add(self, msg_id: bytes, parts: Sequence[bytes], headers: Sequence[bytes],
            now: float) -> list[bytes] | None:
        """One message, sent at ``now``: the frames to send now, or None while it
        waits in the next batch. The shell makes room first (``full``). TypeError
        (check_frames) for a part or header that is not bytes: nothing is taken."""
        if self.protocol > 1:
            try:
                entry = batches.encode_entry(msg_id, headers, parts)
            except TypeError:
                check_frames(parts, headers)
                raise
            self.unanswered[msg_id] = now
            pending = self._pending
            pending.append((msg_id, entry))
            self._pending_bytes += len(entry)
            # a full batch goes, and so does a message while nothing is out (no wait
            # for a slow producer); else the batch fills while ACKs free the window
            if len(pending) >= self.batch or len(self.unanswered) == 1 \
                    or self._pending_bytes >= batches.BATCH_BYTES:
                return self.pending_batch(now)
            return None
        check_frames(parts, headers)  # (its frames go one by one: see there)
        self.unanswered[msg_id] = now
        if self.batch > 1 and self._asking is None:
            self._asking = msg_id
            headers = [*headers, batches.PROTOCOL_HEADER]
        if self.ack_timeout is not None:
            self._out_since[msg_id] = now
        return encode_produce(msg_id, list(parts), tuple(headers))

    def forget(self, msg_id: bytes) -> None:
        """Wait no more for the message's ACK (its node lost it: a routed producer
        sends it again): its room in the window is free. An ACK that comes for it
        after all is ignored, as any ACK not waited for."""
        if self._out_since:  # (a batch's stays: overdue skips what is not unanswered)
            self._out_since.pop(msg_id, None)
        if self.unanswered.pop(msg_id, None) is not None and self._pending:
            self._pending = [entry for entry in self._pending if entry[0] != msg_id]
            self._pending_bytes = sum(len(entry) for _, entry in self._pending)

    def pending_batch(self, now: float | None = None) -> list[bytes] | None:
        """The messages waiting for a batch, to go now in one (None: none waits);
        ``now`` (default: the clock's) starts its wait for the ACK."""
        if not self._pending:
            return None
        batch_id = next(self.ids)
        self._batches[batch_id] = [msg_id for msg_id, _ in self._pending]
        if self.ack_timeout is not None:
            self._out_since[batch_id] = time.monotonic() if now is None else now
        frames = batches.encode_batch(batch_id, [entry for _, entry in self._pending])
        self._pending, self._pending_bytes = [], 0
        return frames

    def due_batch(self, now: float | None = None) -> list[bytes] | None:
        """The waiting batch when nothing else of ours is out (no ACK would come to
        send it): it goes now. None otherwise."""
        if len(self._pending) == len(self.unanswered):
            return self.pending_batch(now)
        return None

    def received(self, frames: list[bytes], now: float) -> list[ProducerAck]:
        """A frame from the node, at ``now``: the ACKs of ours it answers, also kept in
        ``arrived`` (unless ``keep_arrived`` is off). Anything else is ignored, as the
        protocol says."""
        try:
            if batches.is_batch_ack(frames):
                answer = batches.decode_batch_ack(frames)
                if self._out_since:  # (empty without an ack_timeout: nothing to find)
                    self._out_since.pop(answer.batch_id, None)
                return self._batch_answered(answer, now)
            ack = decode_producer_ack(frames)
        except DecodeError:
            return []
        if self._out_since:
            self._out_since.pop(ack.msg_id, None)
        if ack.msg_id == self._asking and batches.speaks_batches(frames[2:]):
            self.protocol = 2
        members = self._batches.pop(ack.msg_id, None)
        if members is None:
            return self._took(ack, now)
        # a batch the node could not read: none of it is stored
        return [taken for msg_id in members
                for taken in self._took(ProducerAck(msg_id, ack.ok, ack.status_message), now)]

    def _batch_answered(self, answer: batches.BatchAck, now: float) -> list[ProducerAck]:
        members = self._batches.pop(answer.batch_id, None)
        if members is None or len(members) != len(answer.results):
            return []  # not a batch of ours: ignored, as any ACK we do not know
        unanswered, latencies = self.unanswered, self.latencies
        if members and all(map(unanswered.__contains__, members)):  # the common case: in C
            latencies.extend(map(now.__sub__, map(unanswered.pop, members)))
            oks, texts = zip(*answer.results, strict=True)
            taken = list(map(tuple.__new__, repeat(ProducerAck),
                             zip(members, oks, texts, strict=True)))
            self._keep(taken)
            return taken
        taken = []
        for msg_id, (ok, status_message) in zip(members, answer.results, strict=True):
            sent = unanswered.pop(msg_id, None)
            if sent is not None:
                latencies.append(now - sent)
                taken.append(ProducerAck(msg_id, ok, status_message))
        self._keep(taken)
        return taken

    def _took(self, ack: ProducerAck, now: float) -> list[ProducerAck]:
        """One ACK (of a message sent alone: per message, so without a loop)."""
        sent = self.unanswered.pop(ack.msg_id, None)
        if sent is None:
            return []
        self.latencies.append(now - sent)
        if not self.keep_arrived:
            return [ack]
        if len(self.arrived) >= self.keep_acks:
            self.acks_dropped += 1  # never taken: the oldest goes
        self.arrived.append(ack)
        return [ack]

    def _keep(self, taken: list[ProducerAck]) -> None:
        """Never taken, the oldest go (``arrived`` is bounded) and are counted."""
        if not self.keep_arrived:
            return
        self.acks_dropped += max(0, len(self.arrived) + len(taken) - self.keep_acks)
        self.arrived.extend(taken)

    def take_acks(self) -> list[ProducerAck]:
        """The ACKs kept so far, in the order they came; kept no more."""
        arrived = list(self.arrived)
        self.arrived.clear()
        return arrived

    def take_ack(self, msg_id: bytes) -> ProducerAck | None:
        """One message's ACK, if it came; kept no more."""
        for position, ack in enumerate(self.arrived):
            if ack.msg_id == msg_id:
                del self.arrived[position]
                return ack
        return None

    def overdue(self, now: float) -> list[bytes]:
        """The messages out for ``ack_timeout`` s or more without their ACK, given up:
        no longer unanswered (their room in the window is free again), and an ACK
        that comes for one later is ignored. The node may have stored them, or not
        (a connection lost with them, or with their ACKs). None without a timeout."""
        if self.ack_timeout is None:
            return []
        limit = now - self.ack_timeout
        out, unanswered = self._out_since, self.unanswered
        given_up: list[bytes] = []
        while out:
            sent_id, sent = next(iter(out.items()))  # (the oldest: they went in order)
            if sent > limit:
                break
            del out[sent_id]
            members = self._batches.pop(sent_id, None)
            for msg_id in [sent_id] if members is None else members:
                if unanswered.pop(msg_id, None) is not None:
                    given_up.append(msg_id)
        return given_up

    def give_up(self, now: float) -> list[ProducerAck]:
        """``overdue``'s messages as ACKs the client makes (not ok, NO_ACK: their
        ``given_up``), kept in ``arrived`` as the node's are (a sync shell reports
        them where it reports the others)."""
        given_up = self.overdue(now)
        if not given_up:
            return []
        taken = [ProducerAck(msg_id, False, NO_ACK) for msg_id in given_up]
        self._keep(taken)
        return taken

    def next_deadline(self, now: float) -> float | None:
        """When the oldest message out is given up without its ACK (``overdue``);
        None without an ``ack_timeout``, or while nothing is out. (A waiting batch
        goes when it is full, when nothing else is out, or when the shell flushes.)"""
        if self.ack_timeout is None or not self._out_since:
            return None
        return next(iter(self._out_since.values())) + self.ack_timeout
