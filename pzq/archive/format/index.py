"""The offset index of one segment: some record starts, so a read seeks, not scans.

Offsets are byte positions, so the index maps an offset to the nearest record start
at or before it: ``<topic dir>/<20-digit start offset>.idx`` next to its ``.dat``,
8-byte big-endian positions from the segment's start, ascending, the first 0, one
at least every INDEX_BYTES of records. A reader seeks to ``floor(offset)`` and
walks at most INDEX_BYTES plus one record. The node appends entries as it writes
and writes them out at each flush; the index is only a hint it can always rebuild
from the segment, so it is never fsync'd. An index that is missing, not a whole
number of entries, not ascending, past the segment's end, or whose last entry is
not a record start is *torn*: the node rebuilds it (the active segment's when it
opens the topic, a closed one's when a FETCH first reads there), and readers
without a node walk the segment from its start instead. Whatever walks records
takes ``raw``: the segment holds raw ZPER records (pzq.archive.format.raw).
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from contextlib import closing
from pathlib import Path

from pzq.archive.format.codec import Buffer
from pzq.archive.format.records import TornTail, spans
from pzq.archive.format.segments import SUFFIX

INDEX_SUFFIX = ".idx"
INDEX_BYTES = 4096
ENTRY = struct.Struct(">Q")


def index_path(segment_path: Path) -> Path:
    return segment_path.with_name(segment_path.name[:-len(SUFFIX)] + INDEX_SUFFIX)


class OffsetIndex:
    """Record starts of one segment; every start below ``covered`` is reachable by
    walking from the entry before it. Below ``whole_until`` every record is whole:
    the node appended it, or a reader walked it under the damage rule (see
    pzq.archive.tier.segment_reads), while the file was as ``file_state`` says."""

    def __init__(self, entries: list[int] | None = None, covered: int = 0) -> None:
        self.entries = entries or [0]
        self.covered = covered
        self.whole_until = 0
        self.file_state: tuple[int, int] | None = None  # (size, mtime ns) once closed
        self._saved = 0  # entries already in the file

    def note(self, position: int, size: int) -> None:
        """The record at ``position`` of ``size`` bytes, noted in offset order (the
        node's own appends are whole)."""
        if position - self.entries[-1] >= INDEX_BYTES:
            self.entries.append(position)
        self.covered = max(self.covered, position + size)
        if position == self.whole_until:
            self.whole_until = position + size

    def note_run(self, starts: list[int], shift: int, end: int) -> None:
        """Records end to end at ``start + shift`` for each of ``starts`` (ascending),
        the last ending at ``end``: what ``note`` of each would leave, by bisection
        rather than a step per record."""
        if not starts:
            return
        entries = self.entries
        found = 0
        while True:
            found = bisect_left(starts, entries[-1] + INDEX_BYTES - shift, found)
            if found == len(starts):
                break
            entries.append(starts[found] + shift)
        self.covered = max(self.covered, end)
        chained = bisect_left(starts, self.whole_until - shift)
        if chained < len(starts) and starts[chained] + shift == self.whole_until:
            self.whole_until = end

    def walked_whole(self, start: int, stop: int) -> None:
        """A walk found only whole records from ``start`` to ``stop``."""
        if start <= self.whole_until < stop:
            self.whole_until = stop

    def whole_stop(self, data: Buffer, position: int, limit: int,
                   raw: bool) -> int:
        """Where the whole records from ``position`` (a record start below
        ``whole_until``) end, at most at ``limit``: the last indexed start by then,
        then by frames at most INDEX_BYTES and one record on. ``position`` when even
        the first record ends past it."""
        limit = min(limit, self.whole_until)
        stop = max(position, self.floor(limit))
        with closing(spans(data, stop, raw=raw)) as items:
            for item in items:
                end = item.offset + item.size
                if isinstance(item, TornTail) or end > limit:
                    break
                stop = end
        return stop

    def floor(self, position: int) -> int:
        """The last indexed record start at or before ``position``."""
        return self.entries[bisect_right(self.entries, position) - 1]

    def before(self, position: int) -> int | None:
        """The indexed record start just before ``floor(position)``; None at the first."""
        at = bisect_right(self.entries, position) - 1
        return self.entries[at - 1] if at > 0 else None

    def after(self, position: int) -> int | None:
        """The first indexed record start after ``position``."""
        at = bisect_right(self.entries, position)
        return self.entries[at] if at < len(self.entries) else None

    def extend(self, data: Buffer, raw: bool) -> None:
        """Note the records from ``covered`` on, up to a torn tail."""
        with closing(spans(data, self.covered, raw=raw)) as items:
            for item in items:
                if isinstance(item, TornTail):
                    return
                self.note(item.offset, item.size)

    def is_record_start(self, data: Buffer, position: int, raw: bool) -> bool:
        if position >= self.covered:
            self.extend(data, raw)
        return _starts_at(data, self.floor(position), position, raw)

    # -- the file ----------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Append the entries noted since the last save (a rewrite after a load)."""
        if self._saved == len(self.entries):
            return
        with path.open("ab" if self._saved else "wb") as handle:
            handle.write(b"".join(ENTRY.pack(entry) for entry in self.entries[self._saved:]))
        self._saved = len(self.entries)

    @classmethod
    def load(cls, path: Path, data: Buffer, raw: bool) -> OffsetIndex | None:
        """The index in ``path`` for a segment holding ``data``; None if missing or torn."""
        try:
            packed = path.read_bytes()
        except OSError:
            return None
        if not packed or len(packed) % ENTRY.size:
            return None
        entries = [value for (value,) in ENTRY.iter_unpack(packed)]
        size = len(data)
        if entries[0] != 0 or any(b <= a for a, b in zip(entries, entries[1:], strict=False)) \
                or entries[-1] >= max(size, 1):
            return None
        if len(entries) > 1 and not _starts_at(data, entries[-2], entries[-1], raw):
            return None  # the last entry is not where a record starts
        index = cls(entries, entries[-1])
        index._saved = len(entries)
        return index

    @classmethod
    def build(cls, data: Buffer, raw: bool) -> OffsetIndex:
        index = cls()
        index.extend(data, raw)
        return index


def _starts_at(data: Buffer, known: int, position: int, raw: bool) -> bool:
    """A record starts at ``position``, walking from the record start ``known`` (a
    damaged record's start too, where a walk by frames stops)."""
    with closing(spans(data, known, raw=raw)) as items:
        for item in items:
            if item.offset >= position:
                return item.offset == position
    return False


def open_index(segment_path: Path, data: Buffer, raw: bool) -> OffsetIndex:
    """The segment's index, rebuilt and rewritten when missing or torn (the node's way)."""
    path = index_path(segment_path)
    index = OffsetIndex.load(path, data, raw)
    if index is None:
        index = OffsetIndex.build(data, raw)
        path.unlink(missing_ok=True)
        index.save(path)
    else:
        index.extend(data, raw)
    return index


def read_index(segment_path: Path, data: Buffer, raw: bool) -> OffsetIndex | None:
    """The segment's index for a reader without a node: never written, None if unusable."""
    return OffsetIndex.load(index_path(segment_path), data, raw)
