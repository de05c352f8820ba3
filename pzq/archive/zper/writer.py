"""ZPER's writer: ZPER producers write straight into the archive, frames as they are.

A producer's identity names its topic and mode (pzq.protocol.zper). Each message it
sends is one raw record of its topic (pzq.archive.format.raw); an empty first frame
followed by more is a REQ socket's delimiter, not part of the message. The writes
the loop takes in one wake go to each topic's log in one write; each frame is
copied once, from ZeroMQ's buffer into that write's bytes. The reply,
as ZPER's writer sends it, is the producer's identity, its delimiter if it sent
one, and the first frame of the message (ZPER's message id):

* mode 0: no reply;
* mode 1: a reply once a flush has made the producer's writes durable: one per
  flush, naming the last of its messages that flush covered (ZPER's writer answers
  the write whose append triggered a flush; here a flush by time answers too);
* mode 2: a reply to every write, once it is fsync'd: the topics written in mode
  2 are fsync'd after each batch the loop takes, then every write is answered.

A write that cannot be taken (a bad identity, hash or mode, an empty message, a
topic that holds pzq's records or is ``--archive-topic``, a topic the producer's
key may not produce to under --authorization, a failing disk) is dropped, counted
in ``refused`` and logged once per producer and reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import zmq

from pzq.archive.format.codec import SHORT_HEADERS, SHORT_MAX, encode_frames_into, long_header
from pzq.archive.tier.archive import Archive
from pzq.archive.wiring import ArchiveWiring
from pzq.authorization import NO_AUTHORIZATION, PRODUCE, Authorization, Rights, produce_refusal
from pzq.clock import Now
from pzq.endpoints import Endpoint, Metric, PlugIn
from pzq.errors import ArchiveError, DecodeError
from pzq.events import EventHub
from pzq.logs import get_logger
from pzq.parts import Figures, Part
from pzq.protocol import zper as zp
from pzq.rates import Rates
from pzq.zmqio import (
    NOBLOCK,
    POLLIN,
    Events,
    Socket,
    readable,
    recv_frame,
    recv_rest,
    send_frames,
)

log = get_logger("pzq.zper")
IDENTITY_CACHE = 4096  # producers remembered; past it the cache starts over
REFUSALS_LOGGED = 4096  # distinct (producer, reason) pairs logged before going quiet
NO_ENVELOPE: list[bytes] = []  # a DEALER's write: no REQ delimiter (never changed)
MessageId = bytes | zmq.Frame  # a frame of ZeroMQ's, copied only if it is answered
WRITER_RCVHWM = 100_000  # ZPER writes queued before the loop takes them


@dataclass(frozen=True)
class Written:
    """One write waiting for the flush that makes it durable."""

    topic: str
    offset: int
    identity: bytes
    envelope: tuple[bytes, ...]
    message_id: bytes
    mode: int


def copy_message(data: bytearray, socket: Socket, frame: zmq.Frame) -> int:
    """Add to ``data`` the record of a message from its first frame, ``frame`` (the
    rest are received here); the size of its frames. Each frame is copied once, from
    ZeroMQ's buffer."""
    size = 0
    while True:
        length = len(frame)
        more = frame.more
        data += SHORT_HEADERS[more][length] if length <= SHORT_MAX else long_header(more, length)
        data += frame  # type: ignore[arg-type]  # a Frame is a buffer; the stubs miss it
        size += length
        if not more:
            return size
        frame = recv_frame(socket, NOBLOCK, False)


class TopicBatch:
    """One wake's writes to one topic: their records end to end, where each starts,
    and what is needed once they are written."""

    __slots__ = ("data", "starts", "size", "by_mode", "producers", "answers")

    def __init__(self) -> None:
        self.data = bytearray()
        self.starts: list[int] = []
        self.size = 0  # of the messages' frames, as sent
        self.by_mode = [0, 0, 0]
        self.producers: list[bytes] = []  # each once per run of its writes
        # (record, identity, envelope, message id, mode) of the writes to answer or ack
        self.answers: list[tuple[int, bytes, tuple[bytes, ...], bytes, int]] = []

    def noted(self, identity: bytes, mode: int, size: int, envelope: list[bytes],
              message_id: MessageId, keep_all: bool) -> None:
        """The record just added, by ``identity`` in ``mode``, ``size`` bytes of frames."""
        self.size += size
        self.by_mode[mode] += 1
        if not self.producers or self.producers[-1] != identity:
            self.producers.append(identity)
        if mode or keep_all:
            if isinstance(message_id, zmq.Frame):
                message_id = message_id.bytes
            self.answers.append((len(self.starts) - 1, identity, tuple(envelope), message_id,
                                 mode))


@dataclass
class WriterFigures:
    written: int = 0
    bytes: int = 0  # of the messages' frames, as sent
    refused: int = 0
    responses: int = 0
    by_mode: list[int] = field(default_factory=lambda: [0, 0, 0])


class ZperWriter:
    def __init__(self, archive: Archive, default_topic: str, keep_all: bool,
                 authorization: Authorization = NO_AUTHORIZATION) -> None:
        """``keep_all``: remember mode 0 writes until flushed too (for ZPAck);
        ``authorization``: which keys may write to which topics."""
        self.archive = archive
        self.authorization = authorization
        self.default_topic = default_topic
        self.keep_all = keep_all
        self.figures = WriterFigures()
        self._identities: dict[bytes, zp.WriterIdentity | str] = {}
        self._waiting: dict[str, list[Written]] = defaultdict(list)
        self._sync_now: set[str] = set()
        self._logged: set[tuple[bytes, str]] = set()

    # -- writes ------------------------------------------------------------------------

    def take(self, socket: Socket, limit: int, now: float) -> None:
        """Every waiting write, appended per topic in one write each."""
        batches: dict[str, TopicBatch] = {}
        known = self._identities
        rights_of = self.authorization.of
        for count in range(limit):
            if count == 1 and not readable(socket):
                break  # one message is the common case: no refused receive to end it
            try:
                frame = recv_frame(socket, NOBLOCK, False)
            except zmq.Again:
                break
            identity = frame.bytes
            producer = known.get(identity)
            rights = rights_of(frame)
            if not frame.more:
                self._take_frames(identity, [], batches, rights)
                continue
            frame = recv_frame(socket, NOBLOCK, False)  # the rest of a message always comes
            if type(producer) is not zp.WriterIdentity or not len(frame) \
                    or not rights.may_produce(producer.topic):
                self._take_frames(identity, recv_rest(socket, frame), batches, rights)
                continue
            # The common case: the frames go from ZeroMQ's buffers into the batch.
            batch = batches.get(producer.topic)
            if batch is None:
                batch = batches[producer.topic] = TopicBatch()
            batch.starts.append(len(batch.data))
            size = copy_message(batch.data, socket, frame)
            batch.noted(identity, producer.mode, size, NO_ENVELOPE, frame, self.keep_all)
        for topic, batch in batches.items():
            self._append(topic, batch, now)
        self._sync_mode_2(now)

    def _sync_mode_2(self, now: float) -> None:
        for topic in self._sync_now:
            topic_log = self.archive.log(topic)
            if topic_log is not None:
                try:
                    topic_log.sync(now)
                except ArchiveError as exc:
                    self._refuse(b"", f"fsync failed: {exc}")
        self._sync_now.clear()

    def _take_frames(self, identity: bytes, frames: list[bytes],
                     batches: dict[str, TopicBatch], rights: Rights) -> None:
        """A write off the common path: a producer not seen yet or refused, an empty
        message, a REQ delimiter, a topic its key may not write to (``rights``)."""
        parsed = self._parse(identity)
        if isinstance(parsed, str):
            self._refuse(identity, parsed)
            return
        if not rights.may_produce(parsed.topic):
            self.authorization.refused(PRODUCE, parsed.topic, rights.holder)
            self._refuse(identity, produce_refusal(parsed.topic, rights))
            return
        envelope, message = zp.split_envelope(frames)
        if not message:
            self._refuse(identity, "empty message")
            return
        batch = batches.get(parsed.topic)
        if batch is None:
            batch = batches[parsed.topic] = TopicBatch()
        batch.starts.append(len(batch.data))
        encode_frames_into(batch.data, message)
        batch.noted(identity, parsed.mode, sum(map(len, message)), envelope, message[0],
                    self.keep_all)

    def _append(self, topic: str, batch: TopicBatch, now: float) -> None:
        try:
            first = self.archive.append_encoded(topic, batch.data, batch.starts, now)
        except (ArchiveError, ValueError) as exc:
            self.figures.refused += len(batch.starts) - len(batch.producers)
            for identity in batch.producers:
                self._refuse(identity, str(exc))
            return
        figures = self.figures
        figures.written += len(batch.starts)
        figures.bytes += batch.size
        for mode, count in enumerate(batch.by_mode):
            figures.by_mode[mode] += count
        waiting = self._waiting[topic]
        starts = batch.starts
        for index, identity, envelope, message_id, mode in batch.answers:
            waiting.append(Written(topic, first + starts[index], identity, envelope,
                                   message_id, mode))
            if mode == zp.RESPONSE_EVERY_WRITE:
                self._sync_now.add(topic)

    def _parse(self, identity: bytes) -> zp.WriterIdentity | str:
        known = self._identities.get(identity)
        if known is None:
            if len(self._identities) >= IDENTITY_CACHE:
                self._identities.clear()
            try:
                known = zp.parse_writer_identity(identity)
            except DecodeError as exc:
                known = str(exc)
            if not isinstance(known, str) and known.topic == self.default_topic:
                known = f"topic {known.topic} is --archive-topic, pzq's own"
            self._identities[identity] = known
        return known

    def _refuse(self, identity: bytes, reason: str) -> None:
        self.figures.refused += 1
        if (identity, reason) not in self._logged and len(self._logged) < REFUSALS_LOGGED:
            self._logged.add((identity, reason))
            log.warning("zper_write_refused", identity=identity.hex(), reason=reason)

    # -- what the flushes made durable ------------------------------------------------

    def durable(self) -> list[Written]:
        """The writes that the flushes since the last call made durable, in order."""
        done: list[Written] = []
        for topic, waiting in self._waiting.items():
            topic_log = self.archive.log(topic)
            flushed = topic_log.flushed_offset if topic_log is not None else 0
            count = 0
            while count < len(waiting) and waiting[count].offset < flushed:
                count += 1
            if count:
                done.extend(waiting[:count])
                del waiting[:count]
        return done

    def respond(self, socket: Socket, durable: list[Written]) -> None:
        """Mode 2: every write; mode 1: the last durable write of each producer."""
        last_of: dict[bytes, Written] = {}
        answers: list[Written] = []
        for written in durable:
            if written.mode == zp.RESPONSE_EVERY_WRITE:
                answers.append(written)
            elif written.mode == zp.RESPONSE_AT_FLUSH:
                last_of[written.identity] = written
        for written in answers + list(last_of.values()):
            try:
                send_frames(socket, zp.writer_response(written.identity, list(written.envelope),
                                                       written.message_id))
                self.figures.responses += 1
            except zmq.ZMQError:
                pass  # the producer is gone or not reading: ZPER drops it too


@dataclass(frozen=True)
class WritesDurable:
    """The writes a wake's flushes made durable (an event on the node's hub, for the
    ack publisher); while some part acts on it, mode 0 writes are kept until flushed
    too."""

    writes: list[Written]


class ZperWriterPart(Part):
    """--zper-writer-dsn in the loop: take writes, then answer those the archive's
    flush made durable (the archive part flushes before this answers)."""

    def __init__(self, writer: ZperWriter, socket: Socket, batch: int, hub: EventHub) -> None:
        self.writer = writer
        self.socket = socket
        self.batch = batch
        self.hub = hub
        self.rates = Rates(("written", "bytes"))

    def bound(self) -> list[Socket]:
        return [self.socket]

    def polled(self) -> list[Socket | int]:
        return [self.socket]

    def answer(self, events: Events, now: Now) -> None:
        writer = self.writer
        writer.keep_all = self.hub.heard(WritesDurable)  # acks for mode 0 too
        if events.get(self.socket, 0) & POLLIN:
            writer.take(self.socket, self.batch, now.wall_us / 1e6)
        durable = writer.durable()
        if durable:
            writer.respond(self.socket, durable)
        self.hub.publish(WritesDurable(durable))
        self.rates.sample(now.mono, writer.figures)

    def figures(self, now: Now) -> Figures:
        figures = self.writer.figures
        rates = self.rates.rates(now.mono, figures)
        return {
            "written": figures.written, "bytes": figures.bytes, "refused": figures.refused,
            "responses": figures.responses, "written_by_mode": list(figures.by_mode),
            "messages_per_second_1s": rates["written_1s"],
            "bytes_per_second_1s": rates["bytes_1s"],
            "messages_per_second_60s": rates["written_60s"],
            "bytes_per_second_60s": rates["bytes_60s"]}

    def close(self) -> None:
        self.socket.close()


def open_writer(wiring: ArchiveWiring, dsn: str) -> Part:
    config = wiring.config
    writer = ZperWriter(wiring.archive.archive, config.archive_topic, keep_all=False,
                        authorization=wiring.authorization)
    socket = wiring.bind(zmq.ROUTER, dsn, ZPER_WRITER_DSN.flag,
                         {zmq.RCVHWM: WRITER_RCVHWM, zmq.MAXMSGSIZE: config.frame_limit})
    return ZperWriterPart(writer, socket, config.batch_size, wiring.hub)


ZPER_WRITER_DSN = Endpoint(
    "zper_writer", "zper_writer_dsn", "archive: endpoint of the ZPER writer, where ZPER "
    "producers write (off when unset)", needs=("archive_dir",), stats=("zper", "writer"),
    metrics=(Metric("pzq_zper_written", "written", "Messages ZPER producers wrote."),
             Metric("pzq_zper_written_bytes", "bytes",
                    "Bytes of the frames ZPER producers wrote."),
             Metric("pzq_zper_refused", "refused", "ZPER writes refused: bad identity, hash "
                    "or mode, or a topic not theirs."),
             Metric("pzq_zper_responses", "responses", "Replies sent to ZPER producers.")))
ZPER_WRITER = PlugIn(ZPER_WRITER_DSN, open_writer)
