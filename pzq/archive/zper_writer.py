"""ZPER's writer: ZPER producers write straight into the archive, frames as they are.

A producer's identity names its topic and mode (pzq.protocol.zper). Each message it
sends is one raw record of its topic (pzq.archive.raw); an empty first frame
followed by more is a REQ socket's delimiter, not part of the message. The writes
the loop takes in one wake go to each topic's log in one write. The reply,
as ZPER's writer sends it, is the producer's identity, its delimiter if it sent
one, and the first frame of the message (ZPER's message id):

* mode 0: no reply;
* mode 1: a reply once a flush has made the producer's writes durable: one per
  flush, naming the last of its messages that flush covered (ZPER's writer answers
  the write whose append triggered a flush; here a flush by time answers too);
* mode 2: a reply to every write, once it is fsync'd: the topics written in mode
  2 are fsync'd after each batch the loop takes, then every write is answered.

A write that cannot be taken (a bad identity, hash or mode, an empty message, a
topic that holds pzq's records or is ``--archive-topic``, a failing disk) is
dropped, counted in ``refused`` and logged once per producer and reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import zmq

from pzq.archive.writer import Archive
from pzq.errors import ArchiveError, DecodeError
from pzq.logs import get_logger
from pzq.protocol import zper as zp
from pzq.zmqio import Socket, drain, send_frames

log = get_logger("pzq.zper")
IDENTITY_CACHE = 4096  # producers remembered; past it the cache starts over
REFUSALS_LOGGED = 4096  # distinct (producer, reason) pairs logged before going quiet
NO_ENVELOPE: list[bytes] = []  # a DEALER's write: no REQ delimiter (never changed)


@dataclass(frozen=True)
class Written:
    """One write waiting for the flush that makes it durable."""

    topic: str
    offset: int
    identity: bytes
    envelope: tuple[bytes, ...]
    message_id: bytes
    mode: int


@dataclass
class WriterFigures:
    written: int = 0
    bytes: int = 0  # of the messages' frames, as sent
    refused: int = 0
    responses: int = 0
    by_mode: list[int] = field(default_factory=lambda: [0, 0, 0])


class ZperWriter:
    def __init__(self, archive: Archive, default_topic: str, keep_all: bool) -> None:
        """``keep_all``: remember mode 0 writes until flushed too (for ZPAck)."""
        self.archive = archive
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
        by_topic: dict[str, list[tuple[bytes, zp.WriterIdentity, list[bytes], list[bytes]]]] = {}
        known = self._identities
        for identity, *frames in drain(socket, limit):
            parsed = known.get(identity)
            if type(parsed) is zp.WriterIdentity and frames and frames[0]:
                envelope, message = NO_ENVELOPE, frames  # the common case, checked at once
            else:
                accepted = self._accept(identity, frames)
                if accepted is None:
                    continue
                parsed, envelope, message = accepted
            by_topic.setdefault(parsed.topic, []).append((identity, parsed, envelope, message))
        for topic, writes in by_topic.items():
            self._append(topic, writes, now)
        for topic in self._sync_now:
            topic_log = self.archive.log(topic)
            if topic_log is not None:
                try:
                    topic_log.sync(now)
                except ArchiveError as exc:
                    self._refuse(b"", f"fsync failed: {exc}")
        self._sync_now.clear()

    def _accept(self, identity: bytes, frames: list[bytes]
                ) -> tuple[zp.WriterIdentity, list[bytes], list[bytes]] | None:
        """The producer, delimiter and message of a write to take; None when refused."""
        parsed = self._parse(identity)
        if isinstance(parsed, str):
            self._refuse(identity, parsed)
            return None
        envelope, message = zp.split_envelope(frames)
        if not message:
            self._refuse(identity, "empty message")
            return None
        return parsed, envelope, message

    def _append(self, topic: str,
                writes: list[tuple[bytes, zp.WriterIdentity, list[bytes], list[bytes]]],
                now: float) -> None:
        try:
            offsets = self.archive.append_raw(topic, [write[3] for write in writes], now)
        except (ArchiveError, ValueError) as exc:
            for identity, *_ in writes:
                self._refuse(identity, str(exc))
            return
        figures = self.figures
        by_mode, keep_all = figures.by_mode, self.keep_all
        waiting = self._waiting[topic]
        written_bytes = 0
        for offset, (identity, parsed, envelope, message) in zip(offsets, writes, strict=True):
            written_bytes += sum(map(len, message))
            mode = parsed.mode
            by_mode[mode] += 1
            if mode or keep_all:
                waiting.append(Written(topic, offset, identity, tuple(envelope), message[0],
                                       mode))
            if mode == zp.RESPONSE_EVERY_WRITE:
                self._sync_now.add(topic)
        figures.written += len(writes)
        figures.bytes += written_bytes

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
