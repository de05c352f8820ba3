"""Walking archive bytes record by record, under the one rule for damaged records.

A record is damaged when its frames do not parse (a flag byte with unknown bits, no
metadata frame, a frame length running past the end while whole records follow it)
or its metadata frame is not pzq's JSON. Every reader reports it with its offset,
counts it and goes on at the *resume point*: the first offset after the damaged
record's start where a whole record with pzq's metadata starts, searched byte by
byte. With none, the damaged record runs to the end of the bytes at hand. Bytes
that end inside a record with nothing whole after them are a torn tail: a crash or
a write in progress, not damage.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Generator
from dataclasses import dataclass

from pzq.archive.format.codec import frame_at, record_end
from pzq.archive.format.entry import ArchivedMessage, parse_metadata
from pzq.errors import ArchiveFormatError, TornRecordError

Buffer = bytes | bytearray | memoryview | mmap.mmap
# A record with metadata starts with a frame that says more frames follow.
FIRST_FLAGS = re.compile(rb"[\x01\x03]")
JSON_OBJECT = ord("{")


@dataclass(frozen=True)
class Span:
    offset: int
    size: int


@dataclass(frozen=True)
class Record(Span):
    message: ArchivedMessage


@dataclass(frozen=True)
class Damaged:
    offset: int  # where the damaged record starts
    size: int  # bytes skipped: up to the resume point, or to the end
    first_bad: int  # the offset of the first byte found wrong
    reason: str


@dataclass(frozen=True)
class TornTail:
    offset: int
    size: int


Item = Record | Damaged | TornTail


def walk(buffer: Buffer, base: int = 0, start: int = 0,
         end: int | None = None) -> Generator[Item, None, None]:
    """Records, damaged records and a torn tail of ``buffer[start:end]``, in order;
    offsets are positions in ``buffer`` plus ``base``."""
    with memoryview(buffer) as view:
        end = len(view) if end is None else end
        position = start
        while position < end:
            try:
                message, following = parse_record(view, position, end)
            except ArchiveFormatError as problem:
                item = _damage(view, position, end, problem)
                yield _moved(item, base)
                if isinstance(item, TornTail):
                    return
                position += item.size
                continue
            yield Record(base + position, following - position, message)
            position = following


def spans(buffer: Buffer, start: int = 0,
          end: int | None = None) -> Generator[Span | TornTail, None, None]:
    """Where records start, by their frames alone, several times faster than ``walk``:
    a whole or damaged record is a Span (a damaged one runs to the resume point), a
    tail with no whole record after it a TornTail. A record whose frames are whole
    but whose metadata is not pzq's is a Span of its frames: ``walk`` would resume at
    the same place unless the record itself holds a whole record."""
    with memoryview(buffer) as view:
        end = len(view) if end is None else end
        position = start
        while position < end:
            try:
                following = _frames_end(view, position, end)
            except ArchiveFormatError:
                resume = resume_point(view, position + 1, end)
                if resume is None:
                    yield TornTail(position, end - position)
                    return
                following = resume
            yield Span(position, following - position)
            position = following


def _frames_end(view: memoryview, position: int, end: int) -> int:
    at, length, more = frame_at(view, position, end)
    if not more:
        raise ArchiveFormatError("record has no metadata frame", position)
    return record_end(view, at + length, end)


def parse_record(view: memoryview, position: int, end: int) -> tuple[ArchivedMessage, int]:
    """The message at ``position`` and where the next record starts; ArchiveFormatError
    (TornRecordError for frames running past ``end``) naming the first bad byte.
    Checked in byte order, metadata before the parts are copied."""
    key_at, key_length, more = frame_at(view, position, end)
    if not more:
        raise ArchiveFormatError("record has no metadata frame", position)
    metadata_at, metadata_length, more = frame_at(view, key_at + key_length, end)
    metadata = parse_metadata(bytes(view[metadata_at:metadata_at + metadata_length]),
                              metadata_at)
    parts = []
    following = metadata_at + metadata_length
    while more:
        part_at, part_length, more = frame_at(view, following, end)
        parts.append(bytes(view[part_at:part_at + part_length]))
        following = part_at + part_length
    key = bytes(view[key_at:key_at + key_length])
    return ArchivedMessage.from_metadata(key, metadata, tuple(parts)), following


def resume_point(view: memoryview, start: int, end: int) -> int | None:
    """The first offset from ``start`` on where a whole record with pzq's metadata starts."""
    for match in FIRST_FLAGS.finditer(view, start, end):
        if _starts_whole_record(view, match.start(), end):
            return match.start()
    return None


def _starts_whole_record(view: memoryview, position: int, end: int) -> bool:
    try:
        key_at, key_length, _ = frame_at(view, position, end)
        metadata_at, metadata_length, _ = frame_at(view, key_at + key_length, end)
        if not metadata_length or view[metadata_at] != JSON_OBJECT:
            return False  # cheap refusal before any JSON is parsed
        parse_record(view, position, end)
    except ArchiveFormatError:
        return False
    return True


def _damage(view: memoryview, position: int, end: int,
            problem: ArchiveFormatError) -> Damaged | TornTail:
    resume = resume_point(view, position + 1, end)
    if resume is None and isinstance(problem, TornRecordError):
        return TornTail(position, end - position)
    stop = end if resume is None else resume
    return Damaged(position, stop - position, problem.offset, problem.reason)


def _moved(item: Damaged | TornTail, base: int) -> Damaged | TornTail:
    if isinstance(item, TornTail):
        return TornTail(base + item.offset, item.size)
    return Damaged(base + item.offset, item.size, base + item.first_bad, item.reason)
