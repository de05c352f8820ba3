"""Answers ZPER reader requests from the archive, the way ZPER's own reader does.

Replies follow ZPER's ``ZPReaderWorker`` and ``ZLog.offsets``, which its Java
reader test checks: ``OFFSET -2`` answers the first segment's start, ``OFFSET -1``
the last segment's start and the end offset, ``OFFSET <ms>`` the starts of the
segments last modified before that time, oldest first, then the end offset when
even the newest segment qualifies; nothing found is status 101. An empty or
unknown topic answers as ZPER's ``ZLog`` does, which always holds a segment 0 and
whose file, not written yet, counts as last modified at 0: ``[0]`` for -2, ``[0, 0]``
for -1 and for any time after the epoch. ``FETCH`` answers
whole records from a record boundary within one segment, up to what the last fsync
made durable as ZPER's does (past that, none yet: 100 with no bytes, where ZPER
answers 101 beyond its flushed offset); ZPER would hand out any byte range, and pzq
answers 101 for an offset inside a record, so no reader ever decodes half a record.
"""

from __future__ import annotations

import zmq

from pzq.archive.tier.archive import Archive
from pzq.archive.tier.tier import ArchiveTier
from pzq.archive.tier.topiclog import TopicLog
from pzq.archive.wiring import ArchiveWiring
from pzq.authorization import CONSUME, NO_AUTHORIZATION, Authorization
from pzq.clock import Now
from pzq.endpoints import Endpoint, PlugIn
from pzq.errors import ArchiveFormatError, DecodeError
from pzq.parts import Part
from pzq.protocol import zper as zp
from pzq.zmqio import MORE_NOBLOCK, NOBLOCK, POLLIN, Events, Socket, drain_framed, send_frames

READER_BATCH = 64  # requests answered per wake
OK = bytes((zp.OK,))
FORBIDDEN = bytes((zp.FORBIDDEN,))
Frame = bytes | memoryview  # a FETCH reply's records: a view of the segment's bytes
ZERO_COPY_BYTES = 65_536  # a frame below this is copied: cheaper than lending it


def answer(archive: Archive, identity: bytes, frames: list[bytes]) -> list[Frame]:
    """The reply to one request, its envelope first; never raises for bad input."""
    envelope, request = zp.split_envelope(frames)
    return [*envelope, *_reply(archive, identity, request)]


def _reply(archive: Archive, identity: bytes, frames: list[bytes]) -> list[Frame]:
    try:
        topic = zp.identity_topic(identity)
        command = frames[0] if frames else b""
        if command == b"OFFSET":
            return _offsets(archive.log(topic), *zp.decode_offset_request(frames))
        if command == b"FETCH":
            return _fetch(archive.log(topic), *zp.decode_fetch_request(frames))
        return [bytes((zp.INVALID_COMMAND,))]
    except DecodeError:
        return [bytes((zp.INVALID_COMMAND,))]
    except (ValueError, ArchiveFormatError):
        return [bytes((zp.INVALID_OFFSET,))]
    except OSError:
        return [bytes((zp.INTERNAL_ERROR,))]


def _offsets(log: TopicLog | None, timestamp_ms: int, max_entries: int | None) -> list[Frame]:
    offsets = (empty_log_offsets(timestamp_ms) if log is None or not log.end_offset
               else segment_offsets(log, timestamp_ms, max_entries))
    if not offsets:
        raise ValueError("no segment answers this time")
    return [OK, *(zp.INT64.pack(offset) for offset in offsets)]


def empty_log_offsets(timestamp_ms: int) -> list[int]:
    """ZPER's answer for a topic with nothing written: its segment 0, empty."""
    if timestamp_ms == zp.EARLIEST:
        return [0]
    if timestamp_ms == zp.LATEST:
        return [0, 0]
    if timestamp_ms < 0:
        raise ValueError("time must be -1, -2 or milliseconds since the epoch")
    return [0, 0] if timestamp_ms > 0 else []  # modified at 0: strictly before any later time


def segment_offsets(log: TopicLog, timestamp_ms: int, max_entries: int | None) -> list[int]:
    segments = log.segments
    if not segments:
        return []
    if timestamp_ms == zp.EARLIEST:
        return [segments[0].start]
    if timestamp_ms == zp.LATEST:
        return [segments[-1].start, log.end_offset]
    if timestamp_ms < 0:
        raise ValueError("time must be -1, -2 or milliseconds since the epoch")
    before = [segment.start for segment in segments
              if segment.path.stat().st_mtime * 1000 < timestamp_ms]
    every_one = len(before) == len(segments)
    if max_entries is not None and max_entries > 0:
        before = before[-max_entries:]
    return before + [log.end_offset] if every_one and before else before


def _fetch(log: TopicLog | None, offset: int, max_bytes: int) -> list[Frame]:
    """Whole records up to what the archive's last fsync made durable, as ZPER's reader
    answers up to its segment's flushed offset: a reader never holds a record that a
    power cut could take back and a later write put other bytes at."""
    if log is None:
        if offset != 0:
            raise ValueError("no such offset in an empty topic")
        return [OK, b""]
    durable = log.flushed_offset
    return [OK, log.read(offset, max_bytes if max_bytes > 0 else durable - offset, durable)]


def send_reply(socket: Socket, frames: list[Frame]) -> None:
    """Send without blocking (zmq.Again: nothing sent); a large frame is lent to
    ZeroMQ, which keeps the segment's mapping until the bytes are sent."""
    *head, last = frames
    if len(last) < ZERO_COPY_BYTES:
        send_frames(socket, [bytes(frame) for frame in frames])  # bytes stay as they are
        return
    for frame in head:
        socket.send(frame, MORE_NOBLOCK)
    socket.send(last, NOBLOCK, copy=False)


class ArchiveReaders(Part):
    """--archive-dsn in the loop (a plug-in endpoint): ZPER readers' OFFSET and FETCH,
    answered last. Under --authorization a key reads a topic only with a consume right
    over all its groups, or admin (FORBIDDEN otherwise, counted as a consume refused)."""

    def __init__(self, tier: ArchiveTier, socket: Socket,
                 authorization: Authorization = NO_AUTHORIZATION) -> None:
        self.archive = tier.archive
        self.socket = socket
        self.authorization = authorization

    def bound(self) -> list[Socket]:
        return [self.socket]

    def polled(self) -> list[Socket | int]:
        return [self.socket]

    def answer(self, events: Events, now: Now) -> None:
        if events.get(self.socket, 0) & POLLIN:
            for first, (identity, *request) in drain_framed(self.socket, READER_BATCH):
                try:
                    send_reply(self.socket, [identity, *self._reply(first, identity, request)])
                except zmq.ZMQError:
                    pass  # the reader is gone or not reading

    def _reply(self, first: zmq.Frame, identity: bytes, request: list[bytes]) -> list[Frame]:
        try:
            allowed = self.authorization.of(first).may_read_archive(
                zp.identity_topic(identity))
        except DecodeError:
            allowed = True  # no topic in its identity: answered INVALID_COMMAND
        if not allowed:
            self.authorization.refused(CONSUME, f"archive {zp.identity_topic(identity)}",
                                       self.authorization.key_of(first))
            envelope, _ = zp.split_envelope(request)
            return [*envelope, FORBIDDEN]
        return answer(self.archive, identity, request)

    def close(self) -> None:
        self.socket.close()


def open_readers(wiring: ArchiveWiring, dsn: str) -> Part:
    return ArchiveReaders(wiring.archive, wiring.bind(zmq.ROUTER, dsn, ARCHIVE_DSN.flag),
                          wiring.authorization)


ARCHIVE_DSN = Endpoint("archive", "archive_dsn", "archive: endpoint of the ZPER-compatible "
                       "reader (off when unset)", needs=("archive_dir",))
ARCHIVE_READERS = PlugIn(ARCHIVE_DSN, open_readers)
