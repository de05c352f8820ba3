"""Part of a segment read without the rest: from the indexed record start at or
before one position to the indexed start at or after another.

A bulk reader splits a segment at its index entries and reads each piece alone.
It trusts an index only as far as a reader of the whole file would
(pzq.archive.format.index): whole 8-byte entries, ascending from 0, inside the file, and
the last one a record start, here checked by the frames from the entry before it.
Without such an index a window is the whole file.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

from pzq.archive.format.index import ENTRY, index_path
from pzq.archive.format.walker import frame_run


@dataclass(frozen=True)
class Window:
    data: bytes
    start: int  # the segment position of data[0]: a record start, or 0


def usable_entries(segment_path: Path, raw: bool) -> list[int] | None:
    """The segment's index entries (positions from its start), if a reader of the
    whole segment would use them; None otherwise."""
    try:
        packed = index_path(segment_path).read_bytes()
        with segment_path.open("rb", buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            entries = _entries(packed, size)
            if entries is None or len(entries) == 1:
                return entries
            before, last = entries[-2], entries[-1]
            tail = _read(handle.fileno(), before, last - before)
    except OSError:
        return None
    run = frame_run(tail, 0, len(tail), len(tail), len(tail), raw)
    return entries if not run.broken and run.end == len(tail) else None


def _entries(packed: bytes, size: int) -> list[int] | None:
    if not packed or len(packed) % ENTRY.size:
        return None
    entries = [value for (value,) in ENTRY.iter_unpack(packed)]
    ascending = all(b > a for a, b in zip(entries, entries[1:], strict=False))
    if entries[0] != 0 or not ascending or entries[-1] >= max(size, 1):
        return None
    return entries


def read_window(segment_path: Path, begin: int, end: int | None, raw: bool) -> Window:
    """The bytes holding every record that starts in [begin, end) (segment
    positions; ``end`` None: to the end of the file), from a record start."""
    entries = usable_entries(segment_path, raw)
    with segment_path.open("rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        if entries is None:
            return Window(_read(handle.fileno(), 0, size), 0)
        first = entries[max(0, bisect_right(entries, begin) - 1)]
        after = bisect_left(entries, end) if end is not None else len(entries)
        stop = entries[after] if after < len(entries) else size
        return Window(_read(handle.fileno(), first, stop - first), first)


def _read(descriptor: int, position: int, count: int) -> bytes:
    """``count`` bytes from ``position`` (fewer at the end of the file): one pread
    returns at most about 2 GiB."""
    chunks = []
    while count > 0:
        chunk = os.pread(descriptor, count, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
        count -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
