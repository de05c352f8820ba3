"""The ZPER server's reads of one topic's segments: whole records, damaged ones alone.

A reply never mixes a damaged record with whole ones: it stops before one, and a
FETCH at a damaged record's offset gets exactly that record's bytes (to the next
whole record), so a reader's offsets stay right and its next FETCH starts on a
whole record. A FETCH at an offset inside a record is answered 101: each segment's
offset index (pzq.archive.index) names a record start at most INDEX_BYTES before
any offset, and the records from there by their frames say whether one starts at it.
The active segment's index is opened with the topic; a closed segment's the first
time a FETCH reads it (rebuilt then if missing or torn), so a node with a long
archive and no indexes yet does not read all of it before it starts.
"""

from __future__ import annotations

import mmap
from contextlib import closing

from pzq.archive.damage import DamagedRecord, log_damage
from pzq.archive.index import OffsetIndex, SpanWalk, open_index
from pzq.archive.raw import raw_spans, raw_walk
from pzq.archive.records import Buffer, Damaged, Record, TornTail, spans, walk
from pzq.archive.segments import Segment, segment_name


class TopicReads:
    """The offset indexes of one topic's segments; damaged records met, each logged once."""

    def __init__(self, topic: str, raw: bool = False) -> None:
        self.topic = topic
        self.raw = raw
        self.damaged_records = 0
        self._indexes: dict[int, OffsetIndex] = {}
        self._reported: set[int] = set()

    @property
    def span_walk(self) -> SpanWalk:
        return raw_spans if self.raw else spans

    def index(self, segment_start: int) -> OffsetIndex:
        return self._indexes.setdefault(segment_start, OffsetIndex())

    def install(self, segment_start: int, index: OffsetIndex) -> None:
        self._indexes[segment_start] = index

    def forget(self, segment_start: int) -> None:
        self._indexes.pop(segment_start, None)

    def read(self, segment: Segment, position: int, size: int, max_bytes: int) -> bytes:
        """The reply bytes for a FETCH at ``position`` of a segment of ``size`` bytes;
        ValueError when no record starts there."""
        if position >= size:
            return b""
        with segment.path.open("rb") as handle, \
                mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            index = self._indexes.get(segment.start)
            if index is None:  # a closed segment not read since the node started
                index = open_index(segment.path, mapped, self.span_walk)
                self._indexes[segment.start] = index
            if not index.is_record_start(mapped, position, self.span_walk):
                raise ValueError(f"offset {segment.start + position} is not a record start")
            return self._records_from(segment, mapped, index, position, max_bytes)

    def _records_from(self, segment: Segment, mapped: mmap.mmap, index: OffsetIndex,
                      position: int, max_bytes: int) -> bytes:
        items = (raw_walk(mapped, start=position, resume_at=index.entries) if self.raw
                 else walk(mapped, start=position))
        with closing(items):
            first = next(items, None)
            if first is None or isinstance(first, TornTail):
                return b""
            if isinstance(first, Damaged):
                self._report(segment, first)
                return mapped[position:position + first.size]
            stop = position + first.size
            if self.raw:
                # Raw records have no metadata to check: where their frames end will do.
                items.close()
                return mapped[position:self._raw_stop(mapped, position, stop, max_bytes)]
            for item in items:
                if not isinstance(item, Record) \
                        or item.offset + item.size - position > max_bytes:
                    break
                stop = item.offset + item.size
        return mapped[position:stop]

    @staticmethod
    def _raw_stop(mapped: mmap.mmap, position: int, stop: int, max_bytes: int) -> int:
        with closing(raw_spans(mapped, stop)) as following:
            for item in following:
                if isinstance(item, TornTail) or item.offset + item.size - position > max_bytes:
                    break
                stop = item.offset + item.size
        return stop

    def _report(self, segment: Segment, item: Damaged) -> None:
        offset = segment.start + item.offset
        if offset in self._reported:
            return
        self._reported.add(offset)
        self.damaged_records += 1
        log_damage(DamagedRecord(self.topic, segment_name(segment.start), offset, item.size,
                                 segment.start + item.first_bad, item.reason))


def mapped_bytes(segment: Segment) -> Buffer:
    """The segment's bytes, mapped (b"" for an empty file, which cannot be mapped)."""
    size = segment.size
    if not size:
        return b""
    with segment.path.open("rb") as handle:
        return mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
