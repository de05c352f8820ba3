"""The ZPER server's reads of one topic's segments: whole records, damaged ones alone.

A reply never mixes a damaged record with whole ones: it stops before one, and a
FETCH at a damaged record's offset gets exactly that record's bytes (to the next
whole record), so a reader's offsets stay right and its next FETCH starts on a
whole record. A FETCH at an offset inside a record is answered 101. Telling the two
apart needs to know where records start: each segment keeps a sparse index of
record starts (one every CHECKPOINT_BYTES), noted as records are appended or found
by the recovery walk at start; a segment the node did not write or recover since it
started is walked once, by its frames, the first time a FETCH there meets damage.
"""

from __future__ import annotations

import mmap
from bisect import bisect_right
from contextlib import closing
from dataclasses import dataclass, field

from pzq.archive.damage import DamagedRecord, log_damage
from pzq.archive.records import Buffer, Damaged, Record, Span, TornTail, spans, walk
from pzq.archive.segments import Segment, segment_name

CHECKPOINT_BYTES = 1 << 16


@dataclass
class RecordStarts:
    """Some record starts of one segment, and how far from its start they are known."""

    checkpoints: list[int] = field(default_factory=lambda: [0])
    covered: int = 0

    def note(self, position: int, size: int) -> None:
        """The record at ``position`` of ``size`` bytes, noted in offset order."""
        if position - self.checkpoints[-1] >= CHECKPOINT_BYTES:
            self.checkpoints.append(position)
        self.covered = position + size

    def is_record_start(self, data: Buffer, position: int) -> bool:
        if position >= self.covered:
            self._extend(data)
        checkpoint = self.checkpoints[bisect_right(self.checkpoints, position) - 1]
        with closing(spans(data, checkpoint)) as items:
            for item in items:
                if item.offset >= position:
                    return item.offset == position and isinstance(item, Span)
        return False

    def _extend(self, data: Buffer) -> None:
        with closing(spans(data, self.covered)) as items:
            for item in items:
                if isinstance(item, TornTail):
                    return
                self.note(item.offset, item.size)


class TopicReads:
    """The record starts of one topic's segments; damaged records met, each logged once."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.damaged_records = 0
        self._starts: dict[int, RecordStarts] = {}
        self._reported: set[int] = set()

    def starts(self, segment_start: int) -> RecordStarts:
        return self._starts.setdefault(segment_start, RecordStarts())

    def forget(self, segment_start: int) -> None:
        self._starts.pop(segment_start, None)

    def read(self, segment: Segment, position: int, size: int, max_bytes: int) -> bytes:
        """The reply bytes for a FETCH at ``position`` of a segment of ``size`` bytes."""
        if position >= size:
            return b""
        with segment.path.open("rb") as handle, \
                mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            return self._records_from(segment, mapped, position, max_bytes)

    def _records_from(self, segment: Segment, mapped: mmap.mmap, position: int,
                      max_bytes: int) -> bytes:
        with closing(walk(mapped, start=position)) as items:
            first = next(items, None)
            if first is None or isinstance(first, TornTail):
                return b""
            if isinstance(first, Damaged):
                if not self.starts(segment.start).is_record_start(mapped, position):
                    raise ValueError(f"offset {segment.start + position} is not a record start")
                self._report(segment, first)
                return mapped[position:position + first.size]
            stop = position + first.size
            for item in items:
                if not isinstance(item, Record) or item.offset + item.size - position > max_bytes:
                    break
                stop = item.offset + item.size
        return mapped[position:stop]

    def _report(self, segment: Segment, item: Damaged) -> None:
        offset = segment.start + item.offset
        if offset in self._reported:
            return
        self._reported.add(offset)
        self.damaged_records += 1
        log_damage(DamagedRecord(self.topic, segment_name(segment.start), offset, item.size,
                                 segment.start + item.first_bad, item.reason))
