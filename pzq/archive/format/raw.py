"""Raw ZPER records: topics written by ZPER producers through the node's ZPWriter.

A raw record is the frames a producer sent, stored as they are (ZPER's own format),
so it has no key and no metadata. A topic holds either pzq's records or raw ones,
never both: the writer marks a topic it creates with a RAW_MARKER file, refuses a
topic that holds pzq's records, and the node archives an acked message whose
``TOPIC:`` header names a raw topic under ``--archive-topic`` instead.

Damage in a raw record can only be a frame that does not parse (a flag byte with
unknown bits, a length running past the end): any bytes that parse are a message.
With no metadata to search for, a reader resumes after damage at the next record
start the segment's offset index names; with none, the damage runs to the end of
the segment (the end of the bytes at hand).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from pzq.archive.format.codec import read_record, record_end
from pzq.archive.format.records import Buffer, Damaged, Span, TornTail
from pzq.errors import ArchiveFormatError, TornRecordError

RAW_MARKER = "zper-writer.topic"


@dataclass(frozen=True)
class RawRecord(Span):
    frames: tuple[bytes, ...]


def is_raw_topic(directory: Path) -> bool:
    return (directory / RAW_MARKER).exists()


def mark_raw(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RAW_MARKER).touch()


def raw_spans(buffer: Buffer, start: int = 0,
              end: int | None = None) -> Generator[Span | TornTail, None, None]:
    """Where raw records start, by their frames; a TornTail from the first frame that
    does not parse on."""
    with memoryview(buffer) as view:
        end = len(view) if end is None else end
        position = start
        while position < end:
            try:
                following = record_end(view, position, end)
            except ArchiveFormatError:
                yield TornTail(position, end - position)
                return
            yield Span(position, following - position)
            position = following


def raw_walk(buffer: Buffer, base: int = 0, start: int = 0, end: int | None = None,
             resume_at: list[int] | None = None
             ) -> Generator[RawRecord | Damaged | TornTail, None, None]:
    """Raw records, damaged ones and a torn tail of ``buffer[start:end]``; after damage
    the walk goes on at the first of ``resume_at`` (known record starts, positions in
    ``buffer``, ascending) past it."""
    known = resume_at or []
    with memoryview(buffer) as view:
        end = len(view) if end is None else end
        position = start
        while position < end:
            try:
                frames, following = read_record(view, position, end)
            except ArchiveFormatError as problem:
                resume = next((at for at in known if position < at < end), None)
                if resume is None and isinstance(problem, TornRecordError):
                    yield TornTail(base + position, end - position)
                    return
                stop = end if resume is None else resume
                yield Damaged(base + position, stop - position, base + problem.offset,
                              problem.reason)
                position = stop
                continue
            yield RawRecord(base + position, following - position, tuple(frames))
            position = following
