"""The ZPER server's reads of one topic's segments: whole records, damaged ones alone.

A reply never mixes a damaged record with whole ones: it stops before one, and a
FETCH at a damaged record's offset gets exactly that record's bytes (to the next
whole record), so a reader's offsets stay right and its next FETCH starts on a
whole record. A FETCH at an offset inside a record is answered 101: each segment's
offset index (pzq.archive.format.index) names a record start at most INDEX_BYTES before
any offset, and the records from there by their frames say whether one starts at it.
The active segment's index is opened with the topic; a closed segment's the first
time a FETCH reads it (rebuilt then if missing or torn), so a node with a long
archive and no indexes yet does not read all of it before it starts.

Records are walked under that rule once: what the node appended, or walked and
found whole, is below its index's ``whole_until``, and a reply there ends at the
last indexed record start within the size asked for (walking at most INDEX_BYTES
and a record on) instead of record by record. A closed segment keeps that
knowledge while its size and modification time stay as they were when it closed
or was first walked; a file changed since is walked again. Replies are views of
the segment's mapping, which stays open while any reply still uses it, so the
bytes reach ZeroMQ without a copy; the MAPS_KEPT segments of a topic read last
stay mapped between FETCHes (each mapping holds a file descriptor).
"""

from __future__ import annotations

import mmap
import os
from contextlib import closing

from pzq.archive.damage import DamagedRecord, log_damage
from pzq.archive.format.codec import Buffer
from pzq.archive.format.index import OffsetIndex, open_index
from pzq.archive.format.records import Damaged, MessageRecord, TornTail, spans, walk
from pzq.archive.format.segments import Segment, segment_name

MAPS_KEPT = 32  # segments kept mapped per topic; a reply in flight keeps its own


class TopicReads:
    """The offset indexes of one topic's segments; damaged records met, each logged once."""

    def __init__(self, topic: str, raw: bool = False) -> None:
        self.topic = topic
        self.raw = raw
        self.damaged_records = 0
        self._indexes: dict[int, OffsetIndex] = {}
        self._maps: dict[int, mmap.mmap] = {}  # by segment start
        self._reported: set[int] = set()

    def index(self, segment_start: int) -> OffsetIndex:
        index = self._indexes.get(segment_start)
        if index is None:
            index = self._indexes[segment_start] = OffsetIndex()
        return index

    def install(self, segment_start: int, index: OffsetIndex) -> None:
        self._indexes[segment_start] = index

    def forget(self, segment_start: int) -> None:
        self._indexes.pop(segment_start, None)
        self._maps.pop(segment_start, None)  # unmapped once no reply uses it

    def seal(self, segment: Segment) -> None:
        """The node stopped appending to ``segment``: what it knows whole there holds
        while the file stays as it is now."""
        index = self._indexes.get(segment.start)
        if index is not None:
            index.file_state = _file_state(os.stat(segment.path))

    def read(self, segment: Segment, position: int, size: int, max_bytes: int,
             active: bool = False) -> bytes | memoryview:
        """The reply bytes for a FETCH at ``position`` of a segment of ``size`` bytes
        (the one the node appends to if ``active``); ValueError when no record
        starts there."""
        if position >= size:
            return b""
        mapped, state = self._mapped(segment, size)
        index = self._indexes.get(segment.start)
        if index is None:  # a closed segment not read since the node started
            index = open_index(segment.path, mapped, self.raw)
            self._indexes[segment.start] = index
        if not active and index.file_state != state:
            index.whole_until, index.file_state = 0, state  # changed: walk it again
        if not index.is_record_start(mapped, position, self.raw):
            raise ValueError(f"offset {segment.start + position} is not a record start")
        view = memoryview(mapped)
        if position < index.whole_until:
            stop = index.whole_stop(mapped, position, position + max_bytes, self.raw)
            if stop > position:
                return view[position:stop]
        stop = self._records_from(segment, mapped, index, position, max_bytes)
        return view[position:stop]

    def _mapped(self, segment: Segment, size: int) -> tuple[mmap.mmap, tuple[int, int]]:
        """The segment mapped up to at least ``size`` bytes (mapped again when it has
        grown), and the file's (size, mtime ns)."""
        state = _file_state(os.stat(segment.path))
        maps = self._maps
        cached = maps.pop(segment.start, None)  # put back last: the most recently used
        if cached is None or len(cached) < size:
            with segment.path.open("rb") as handle:
                cached = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
        maps[segment.start] = cached
        if len(maps) > MAPS_KEPT:  # each holds a file descriptor
            del maps[next(iter(maps))]
        return cached, state

    def _records_from(self, segment: Segment, mapped: mmap.mmap, index: OffsetIndex,
                      position: int, max_bytes: int) -> int:
        """Where the reply from ``position`` ends, walking under the damage rule."""
        items = walk(mapped, start=position, raw=self.raw, resume_at=index.entries)
        with closing(items):
            first = next(items, None)
            if first is None or isinstance(first, TornTail):
                return position
            if isinstance(first, Damaged):
                self._report(segment, first)
                return position + first.size
            stop = position + first.size
            if self.raw:
                # Raw records have no metadata to check: where their frames end will do.
                items.close()
                stop = self._raw_stop(mapped, position, stop, max_bytes)
            else:
                for item in items:
                    if not isinstance(item, MessageRecord) \
                            or item.offset + item.size - position > max_bytes:
                        break
                    stop = item.offset + item.size
        index.walked_whole(position, stop)
        return stop

    @staticmethod
    def _raw_stop(mapped: mmap.mmap, position: int, stop: int, max_bytes: int) -> int:
        with closing(spans(mapped, stop, raw=True)) as following:
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


def _file_state(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_size, stat.st_mtime_ns


def mapped_bytes(segment: Segment) -> Buffer:
    """The segment's bytes, mapped (b"" for an empty file, which cannot be mapped)."""
    size = segment.size
    if not size:
        return b""
    with segment.path.open("rb") as handle:
        return mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
