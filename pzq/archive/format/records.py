"""Archive bytes record by record, under the one rule for damaged records.

The records come from the one walker (pzq.archive.format.walker); here they become
what readers take: whole records with their message (``walk``), where records start
(``spans``), or their frames (``decode_records``).

A pzq record is damaged when its frames do not parse (a flag byte with unknown bits,
no metadata frame, a frame length running past the end while whole records follow
it) or its metadata frame is not pzq's JSON. Every reader reports it with its
offset, counts it and goes on at the *resume point*: the first offset after the
damaged record's start where a whole record with pzq's metadata starts, searched
byte by byte. With none, the damaged record runs to the end of the bytes at hand.
Bytes that end inside a record with nothing whole after them are a torn tail: a
crash or a write in progress, not damage.

A raw record (pzq.archive.format.raw) is damaged only when its frames do not parse:
any bytes that parse are a message. With no metadata to search for, a walk resumes
after damage at the next record start the segment's offset index names; with none,
the damage runs to the end of the bytes at hand.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from pzq.archive.format.codec import Buffer, frame_at
from pzq.archive.format.entry import ArchivedMessage, parse_metadata
from pzq.archive.format.walker import FrameRun, frame_run
from pzq.errors import ArchiveFormatError, TornRecordError

# A record with metadata starts with a frame that says more frames follow.
FIRST_FLAGS = re.compile(rb"[\x01\x03]")
JSON_OBJECT = ord("{")
# The bytes the walker takes at a time, doubling from the first to the last: a reader
# that stops after a record or two (a FETCH's start, a seek) walks little more.
FIRST_RUN, LAST_RUN = 4096, 1 << 20


@dataclass(frozen=True)
class Span:
    offset: int
    size: int


@dataclass(frozen=True)
class MessageRecord(Span):
    message: ArchivedMessage


@dataclass(frozen=True)
class RawRecord(Span):
    frames: tuple[bytes, ...]


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


Item = MessageRecord | RawRecord | Damaged | TornTail


def walk(buffer: Buffer | bytearray | memoryview, base: int = 0, start: int = 0,
         end: int | None = None, raw: bool = False, resume_at: list[int] | None = None
         ) -> Generator[Item, None, None]:
    """Records (RawRecords with ``raw``), damaged records and a torn tail of
    ``buffer[start:end]``, in order; offsets are positions in ``buffer`` plus
    ``base``. ``resume_at``: the known record starts a raw walk resumes at after
    damage (positions in ``buffer``, ascending)."""
    data = _sliceable(buffer)
    end = len(data) if end is None else end
    position = start
    budget = FIRST_RUN
    while position < end:
        run = frame_run(data, position, end, budget, budget, raw, end)
        budget = min(2 * budget, LAST_RUN)
        if raw:
            yield from _raw_records(run, base)
            position = run.end
        else:
            position = yield from _records(data, run, base, end)
            if position != run.end:
                continue  # a record of the run was damaged: the walk went on past it
        if run.broken:
            item = _damage(data, position, end, raw, resume_at)
            yield _moved(item, base)
            if isinstance(item, TornTail):
                return
            position += item.size


def _raw_records(run: FrameRun, base: int) -> Iterator[RawRecord]:
    starts, parts = run.starts, run.parts
    first = 0
    for index, count in enumerate(run.part_counts):
        at = starts[index]
        following = starts[index + 1] if index + 1 < len(starts) else run.end
        yield RawRecord(base + at, following - at, tuple(parts[first:first + count]))
        first += count


def _records(data: Buffer, run: FrameRun, base: int,
             end: int) -> Generator[Item, None, int]:
    """The run's records with their messages; where the walk goes on: the run's end,
    or the resume point after a record whose metadata is not pzq's."""
    starts, keys, metadata, parts = run.starts, run.keys, run.metadata, run.parts
    first = 0
    for index, count in enumerate(run.part_counts):
        at = starts[index]
        following = starts[index + 1] if index + 1 < len(starts) else run.end
        try:
            meta = parse_metadata(metadata[index], 0)
        except ArchiveFormatError:  # again, naming the right byte: damage is rare
            damaged = _damage(data, at, end, False, None,
                              _bad_metadata(data, at, metadata[index]))
            yield _moved(damaged, base)
            return at + damaged.size
        yield MessageRecord(base + at, following - at, ArchivedMessage.from_metadata(
            keys[index], meta, tuple(parts[first:first + count])))
        first += count
    return run.end


def _bad_metadata(data: Buffer, position: int, payload: bytes) -> ArchiveFormatError:
    """What is wrong with the metadata of the record at ``position``, at its byte."""
    key_at, key_length, _ = frame_at(data, position, len(data))
    metadata_at, _, _ = frame_at(data, key_at + key_length, len(data))
    try:
        parse_metadata(payload, metadata_at)
    except ArchiveFormatError as problem:
        return problem
    raise AssertionError("metadata read once as damaged, then as whole")


def spans(buffer: Buffer, start: int = 0, end: int | None = None,
          raw: bool = False) -> Generator[Span | TornTail, None, None]:
    """Where records start, by their frames alone, several times faster than ``walk``:
    a whole or damaged record is a Span, a tail with no whole record after it a
    TornTail. A damaged pzq record runs to the resume point; raw records end at the
    first that does not parse (a TornTail from there on). A pzq record whose frames
    are whole but whose metadata is not pzq's is a Span of its frames: ``walk`` would
    resume at the same place unless the record itself holds a whole record."""
    end = len(buffer) if end is None else end
    position = start
    budget = FIRST_RUN
    while position < end:
        run = frame_run(buffer, position, end, budget, budget, raw, end, keep=False)
        budget = min(2 * budget, LAST_RUN)
        starts = run.starts
        for index, at in enumerate(starts):
            following = starts[index + 1] if index + 1 < len(starts) else run.end
            yield Span(at, following - at)
        position = run.end
        if run.broken:
            resume = None if raw else resume_point(buffer, position + 1, end)
            if resume is None:
                yield TornTail(position, end - position)
                return
            yield Span(position, resume - position)
            position = resume


def decode_records(buffer: Buffer | bytearray | memoryview,
                   start: int = 0) -> Iterator[tuple[int, list[bytes]]]:
    """(offset, frames) of each whole record from ``start``, whatever it holds (what
    a ZPER relay client gets). Stops quietly at a torn tail; ArchiveFormatError for
    frames that do not parse."""
    data = _sliceable(buffer)
    position = start
    budget = FIRST_RUN
    while position < len(data):
        run = frame_run(data, position, len(data), budget, budget, True)
        budget = min(2 * budget, LAST_RUN)
        parts = run.parts
        first = 0
        for at, count in zip(run.starts, run.part_counts, strict=True):
            yield at, parts[first:first + count]
            first += count
        position = run.end
        if run.broken:
            try:
                raw_frames_end(data, position, len(data))
            except TornRecordError:
                return
            raise AssertionError(f"the record at {position} read once as damaged, then whole")


def parse_record(data: Buffer, position: int, end: int) -> tuple[ArchivedMessage, int]:
    """The message at ``position`` and where the next record starts; ArchiveFormatError
    (TornRecordError for frames running past ``end``) naming the first bad byte.
    Checked frame by frame in byte order, metadata before the parts are copied."""
    key_at, key_length, more = frame_at(data, position, end)
    if not more:
        raise ArchiveFormatError("record has no metadata frame", position)
    metadata_at, metadata_length, more = frame_at(data, key_at + key_length, end)
    metadata = parse_metadata(data[metadata_at:metadata_at + metadata_length], metadata_at)
    parts = []
    following = metadata_at + metadata_length
    while more:
        part_at, part_length, more = frame_at(data, following, end)
        parts.append(data[part_at:part_at + part_length])
        following = part_at + part_length
    key = data[key_at:key_at + key_length]
    return ArchivedMessage.from_metadata(key, metadata, tuple(parts)), following


def raw_frames_end(data: Buffer, position: int, end: int) -> int:
    """Where the raw record at ``position`` ends, frame by frame; ArchiveFormatError
    (TornRecordError for frames running past ``end``) naming the first bad byte."""
    more = True
    while more:
        payload, length, more = frame_at(data, position, end)
        position = payload + length
    return position


def resume_point(data: Buffer, start: int, end: int) -> int | None:
    """The first offset from ``start`` on where a whole record with pzq's metadata starts."""
    for match in FIRST_FLAGS.finditer(data, start, end):
        if _starts_whole_record(data, match.start(), end):
            return match.start()
    return None


def _starts_whole_record(data: Buffer, position: int, end: int) -> bool:
    try:
        key_at, key_length, _ = frame_at(data, position, end)
        metadata_at, metadata_length, _ = frame_at(data, key_at + key_length, end)
        if not metadata_length or data[metadata_at] != JSON_OBJECT:
            return False  # cheap refusal before any JSON is parsed
        parse_record(data, position, end)
    except ArchiveFormatError:
        return False
    return True


def _damage(data: Buffer, position: int, end: int, raw: bool, resume_at: list[int] | None,
            problem: ArchiveFormatError | None = None) -> Damaged | TornTail:
    """The damaged record (or torn tail) at ``position``, and where it ends; its
    problem found frame by frame unless given."""
    if problem is None:
        try:
            if raw:
                raw_frames_end(data, position, end)
            else:
                parse_record(data, position, end)
        except ArchiveFormatError as found:
            problem = found
        else:
            raise AssertionError(f"the record at {position} read once as damaged, then whole")
    if raw:
        resume = next((at for at in resume_at or () if position < at < end), None)
    else:
        resume = resume_point(data, position + 1, end)
    if resume is None and isinstance(problem, TornRecordError):
        return TornTail(position, end - position)
    stop = end if resume is None else resume
    return Damaged(position, stop - position, problem.offset, problem.reason)


def _moved(item: Damaged | TornTail, base: int) -> Damaged | TornTail:
    if isinstance(item, TornTail):
        return TornTail(base + item.offset, item.size)
    return Damaged(base + item.offset, item.size, base + item.first_bad, item.reason)


def _sliceable(buffer: Buffer | bytearray | memoryview) -> Buffer:
    """Bytes whose slices are bytes (the walker keeps slices as keys and parts)."""
    return buffer if isinstance(buffer, bytes | mmap.mmap) else bytes(buffer)
