"""One topic's log: segment files named by the byte offset they start at.

``<dir>/<20-digit start offset>.dat``; offsets run on across segments with no gap.
A record never straddles two files: the log rolls to a new segment after a whole
record once the active one has reached ``segment_size``. Every time-dependent
method takes ``now`` (seconds since the epoch) so tests need no clock.

Appends are unbuffered: a record is in the kernel when ``append`` returns, so a
store delete written after it cannot outlive it in a crash of the process, and a
full or read-only disk fails the append itself, not a later flush. After a failed
write or fsync the log is reopened (its torn tail cut) before the next append, at
most once every ``REOPEN_AFTER_S`` seconds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from pzq.archive.codec import encode_record
from pzq.archive.records import TornTail, spans
from pzq.archive.segment_reads import TopicReads
from pzq.archive.segments import Segment, segment_path
from pzq.archive.segments import list_segments as list_segments
from pzq.errors import ArchiveError

REOPEN_AFTER_S = 1.0


class TopicLog:
    def __init__(self, directory: Path, segment_size: int, flush_messages: int,
                 flush_interval_s: float) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.flush_messages = flush_messages
        self.flush_interval_s = flush_interval_s
        self.segments: list[Segment] = []
        self.end_offset = 0
        self.bytes = 0
        self.messages_appended = 0
        self._active: BinaryIO | None = None
        self._active_size = 0
        self._unsynced = 0
        self._last_sync = 0.0
        self._reads = TopicReads(directory.name)
        self._failure: tuple[float, str] | None = None  # (when, why) until reopened

    # -- opening and recovery ------------------------------------------------------

    def open(self, now: float) -> int:
        """Open for appending; cut a torn tail back. Returns the bytes cut off."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.segments = list_segments(self.directory) or [self._new_segment(0)]
            cut = self._open_active()
        except OSError as exc:
            raise ArchiveError(f"cannot open archive topic {self.directory}: {exc}") from None
        self.bytes = sum(segment.size for segment in self.segments)
        self._last_sync = now
        return cut

    def _open_active(self) -> int:
        last = self.segments[-1]
        self._reads.forget(last.start)
        cut = self._recover(last)
        self._active_size = last.size
        self._active = last.path.open("ab", buffering=0)
        self.end_offset = last.start + self._active_size
        return cut

    def _reopen(self, now: float) -> None:
        """After a failed write: cut what it left half written, or raise ArchiveError
        without trying when the last attempt was under REOPEN_AFTER_S ago."""
        assert self._failure is not None
        failed_at, reason = self._failure
        if now - failed_at < REOPEN_AFTER_S:
            raise ArchiveError(f"archive not writable: {reason}")
        if self._active is not None:
            try:
                self._active.close()
            except OSError:
                pass  # its data went with the failure; the reopen cuts what is torn
            self._active = None
        try:
            self._open_active()
            self.bytes = sum(segment.size for segment in self.segments)
        except OSError as exc:
            self._failure = (now, str(exc))
            raise ArchiveError(f"archive not writable: {exc}") from None
        self._failure = None
        self._unsynced = 0

    def _recover(self, segment: Segment) -> int:
        """Cut a tail that ends inside a record or is not records, with no whole record
        after it: a crash's torn or zero-filled write. Damage with a whole record after
        it stays (readers skip it), so no record after it is lost."""
        data = segment.path.read_bytes()
        starts = self._reads.starts(segment.start)
        whole = 0
        for item in spans(data):
            if isinstance(item, TornTail):
                break
            starts.note(item.offset, item.size)
            whole = item.offset + item.size
        if whole < len(data):
            with segment.path.open("r+b") as handle:
                handle.truncate(whole)
                os.fsync(handle.fileno())
        return len(data) - whole

    def _new_segment(self, start: int) -> Segment:
        path = segment_path(self.directory, start)
        path.touch()
        return Segment(start, path)

    # -- appending -------------------------------------------------------------------

    def append(self, frames: list[bytes], now: float) -> int:
        """Write one record; returns its offset. fsync'd by count here, by time in tick."""
        record = encode_record(frames)
        if self._failure is not None:
            self._reopen(now)
        try:
            if self._active_size >= self.segment_size:
                self._roll(now)
            assert self._active is not None, "open() first"
            self._write_all(self._active, record)
        except OSError as exc:
            self._failure = (now, str(exc))
            raise ArchiveError(f"archive write failed: {exc}") from None
        offset = self.end_offset
        self._reads.starts(self.segments[-1].start).note(self._active_size, len(record))
        self.end_offset += len(record)
        self._active_size += len(record)
        self.bytes += len(record)
        self.messages_appended += 1
        self._unsynced += 1
        if self._unsynced >= self.flush_messages:
            self.sync(now)
        return offset

    @staticmethod
    def _write_all(handle: BinaryIO, record: bytes) -> None:
        view = memoryview(record)
        while view:  # an unbuffered write may take part of it (a disk filling up)
            view = view[handle.write(view):]

    def _roll(self, now: float) -> None:
        self.sync(now)
        if self._active is not None:
            self._active.close()
        segment = self._new_segment(self.end_offset)
        self.segments.append(segment)
        self._active = segment.path.open("ab", buffering=0)
        self._active_size = 0

    def sync(self, now: float) -> None:
        if self._active is None or self._failure is not None:
            return
        try:
            if self._unsynced:
                os.fsync(self._active.fileno())
        except OSError as exc:
            self._failure = (now, str(exc))
            raise ArchiveError(f"archive fsync failed: {exc}") from None
        self._unsynced = 0
        self._last_sync = now

    def tick(self, now: float) -> None:
        if self._unsynced and now - self._last_sync >= self.flush_interval_s:
            self.sync(now)

    # -- retention and reading --------------------------------------------------------

    def apply_retention(self, now: float, retain_s: float) -> int:
        """Delete whole segments whose newest data is older than ``retain_s``; never the
        active one. Returns how many were deleted."""
        deleted = 0
        while len(self.segments) > 1:
            oldest = self.segments[0]
            if now - oldest.path.stat().st_mtime <= retain_s:
                break
            size = oldest.size
            oldest.path.unlink()
            self._reads.forget(oldest.start)
            self.segments.pop(0)
            self.bytes -= size
            deleted += 1
        return deleted

    @property
    def start_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def damaged_records(self) -> int:
        """Damaged records that readers have met so far (each logged once)."""
        return self._reads.damaged_records

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from ``offset`` (a record start), at most ``max_bytes`` but at
        least one record; empty at the end of the log. At a damaged record, exactly its
        bytes (see pzq.archive.records). ValueError if out of range or not a record start."""
        if not self.start_offset <= offset <= self.end_offset:
            raise ValueError(f"offset {offset} is outside {self.start_offset}..{self.end_offset}")
        for index, segment in enumerate(self.segments):
            following = (self.segments[index + 1].start if index + 1 < len(self.segments)
                         else self.end_offset)
            if segment.start <= offset < following:
                return self._reads.read(segment, offset - segment.start,
                                        following - segment.start, max_bytes)
        return b""

    def close(self, now: float) -> None:
        if self._active is not None:
            try:
                self.sync(now)
            finally:
                self._active.close()
                self._active = None

