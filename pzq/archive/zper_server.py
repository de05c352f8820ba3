"""Answers ZPER reader requests from the archive, so existing ZPER readers work."""

from __future__ import annotations

from pzq.archive import zper_protocol as zp
from pzq.archive.codec import ArchiveFormatError
from pzq.archive.writer import Archive
from pzq.errors import DecodeError


def handle(archive: Archive, identity: bytes, frames: list[bytes]) -> list[bytes]:
    """The reply frames (status first) to one request; never raises for bad input."""
    try:
        topic = zp.identity_topic(identity)
        command = frames[0] if frames else b""
        if command == b"OFFSET":
            return _offsets(archive, topic, *zp.decode_offset_request(frames))
        if command == b"FETCH":
            return _fetch(archive, topic, *zp.decode_fetch_request(frames))
        return [bytes((zp.INVALID_COMMAND,))]
    except DecodeError:
        return [bytes((zp.INVALID_COMMAND,))]
    except (ValueError, ArchiveFormatError):
        return [bytes((zp.INVALID_OFFSET,))]
    except OSError:
        return [bytes((zp.INTERNAL_ERROR,))]


def _offsets(archive: Archive, topic: str, timestamp_ms: int, max_entries: int) -> list[bytes]:
    log = archive.log(topic)
    if timestamp_ms in (zp.LATEST, zp.EARLIEST):
        offset = 0 if log is None else (log.end_offset if timestamp_ms == zp.LATEST
                                        else log.start_offset)
        return [bytes((zp.OK,)), zp.INT64.pack(offset)]
    if timestamp_ms < 0 or max_entries < 1:
        raise ValueError("time must be -1, -2 or milliseconds since the epoch")
    # Like Kafka's offsets-before-time: segments last written at or before the time,
    # newest first.
    found = [segment.start for segment in reversed(log.segments if log else [])
             if segment.path.stat().st_mtime * 1000 <= timestamp_ms][:max_entries]
    return [bytes((zp.OK,)), *(zp.INT64.pack(offset) for offset in found)]


def _fetch(archive: Archive, topic: str, offset: int, max_bytes: int) -> list[bytes]:
    log = archive.log(topic)
    if log is None:
        if offset != 0:
            raise ValueError("no such offset in an empty topic")
        return [bytes((zp.OK,)), b""]
    data = log.read(offset, max_bytes if max_bytes > 0 else log.end_offset - offset)
    return [bytes((zp.OK,)), data]
