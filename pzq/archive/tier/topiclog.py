"""One topic's log: segment files named by the byte offset they start at.

``<dir>/<20-digit start offset>.dat``; offsets run on across segments with no gap.
A record never straddles two files: the log rolls to a new segment after a whole
record once the active one has reached ``segment_size``. Every time-dependent
method takes ``now`` (seconds since the epoch) so tests need no clock.

Appends are unbuffered: a record is in the kernel when ``append`` returns, so a
store delete written after it cannot outlive it in a crash of the process, and a
full or read-only disk fails the append itself, not a later flush. After a failed
write or fsync the log is reopened (its torn tail cut) before the next append, at
most once every ``REOPEN_AFTER_S`` seconds. A write of several records that fails is
cut back at once to where it began in its segment: none of them stays in the log to
be written again by a retry (ArchiveError.written counts those a roll to a new
segment had put in before).
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_left
from pathlib import Path
from typing import BinaryIO

from pzq.archive.format.codec import encode_record, encode_records
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.index import OffsetIndex, index_path, open_index
from pzq.archive.format.raw import is_raw_topic, mark_raw
from pzq.archive.format.records import MessageRecord, walk
from pzq.archive.format.segments import Segment, segment_path
from pzq.archive.format.segments import list_segments as list_segments
from pzq.archive.tier.segment_reads import TopicReads, mapped_bytes
from pzq.errors import ArchiveError
from pzq.fsync import make_directories, sync_directory
from pzq.logs import get_logger

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
        self.flushed_offset = 0  # the end of what the last fsync made durable
        self.bytes = 0
        self._active: BinaryIO | None = None
        self._active_size = 0
        self._unsynced = 0
        self.unsynced_since: float | None = None  # when the oldest unsynced record came
        self.synced_at = 0.0  # when the last fsync (or the opening) was
        self._reads = TopicReads(directory.name)
        self._failure: tuple[float, str] | None = None  # (when, why) until reopened
        self._cut_to: tuple[int, int] | None = None  # (segment start, size) for the reopen

    # -- opening and recovery ------------------------------------------------------

    def open(self, now: float) -> None:
        """Open for appending; cut a torn tail back."""
        try:
            make_directories(self.directory)
            self._reads.raw = is_raw_topic(self.directory)
            self.segments = list_segments(self.directory) or [self._new_segment(0)]
            self._open_active()
        except OSError as exc:
            raise ArchiveError(f"cannot open archive topic {self.directory}: {exc}") from None
        self.flushed_offset = self.end_offset
        self.bytes = sum(segment.size for segment in self.segments)
        self.synced_at = now

    def _open_active(self) -> None:
        last = self.segments[-1]
        self._reads.forget(last.start)
        self._recover(last)
        self._active_size = last.size
        self._active = last.path.open("ab", buffering=0)
        self.end_offset = last.start + self._active_size

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
            self._cut_failed_run()
            self._open_active()
            self.bytes = sum(segment.size for segment in self.segments)
        except OSError as exc:
            self._failure = (now, str(exc))
            raise ArchiveError(f"archive not writable: {exc}") from None
        self._failure = None
        self._cut_to = None
        self._unsynced = 0
        self.flushed_offset = min(self.flushed_offset, self.end_offset)

    def _cut_failed_run(self) -> None:
        """What a failed write of several records left, cut if that failed at once."""
        if self._cut_to is None:
            return
        start, size = self._cut_to
        last = self.segments[-1]
        if last.start == start and last.path.stat().st_size > size:
            os.truncate(last.path, size)

    def _recover(self, segment: Segment) -> None:
        """Cut a tail that ends inside a record or is not records, with no whole record
        after it: a crash's torn or zero-filled write. Damage with a whole record after
        it stays (readers skip it), so no record after it is lost. The walk starts at
        the offset index's last entry: only the tail is read."""
        size = segment.size
        whole = self._open_index(segment).covered
        if whole < size:
            with segment.path.open("r+b") as handle:
                handle.truncate(whole)
                os.fsync(handle.fileno())
            # said, so that the bytes gone from the archive are not gone without a word
            get_logger("pzq.archive").warning(
                "archive_tail_cut", topic=self.directory.name, segment=segment.path.name,
                offset=segment.start + whole, bytes=size - whole)

    def _open_index(self, segment: Segment) -> OffsetIndex:
        data = mapped_bytes(segment)
        try:
            index = open_index(segment.path, data, self._reads.raw)
        finally:
            if isinstance(data, mmap.mmap):
                data.close()
        self._reads.install(segment.start, index)
        return index

    def tail(self, max_bytes: int) -> list[ArchivedMessage]:
        """pzq's records of the active segment's last ``max_bytes`` (from the indexed
        record start before them), oldest first; none for a ZPER producers' topic."""
        if self.raw or self._active is None or not self._active_size:
            return []
        segment = self.segments[-1]
        data = mapped_bytes(segment)
        try:
            start = self._reads.index(segment.start).floor(
                max(0, self._active_size - max_bytes))
            return [item.message for item in walk(data, segment.start, start,
                                                  self._active_size)
                    if isinstance(item, MessageRecord)]
        finally:
            if isinstance(data, mmap.mmap):
                data.close()

    @property
    def raw(self) -> bool:
        """The topic holds raw ZPER records (see pzq.archive.format.raw)."""
        return self._reads.raw

    def make_raw(self) -> None:
        """Mark an empty topic as a ZPER writer's; ArchiveError if it holds pzq's records."""
        if self.raw:
            return
        if self.end_offset:
            raise ArchiveError(f"topic {self.directory.name} holds pzq's archived messages")
        try:
            mark_raw(self.directory)
            sync_directory(self.directory)  # the marker's name decides how it is read
        except OSError as exc:
            raise ArchiveError(f"cannot mark topic {self.directory.name}: {exc}") from None
        self._reads.raw = True

    def _new_segment(self, start: int) -> Segment:
        """An empty segment whose name survives a power cut (the directory is fsync'd):
        records fsync'd into it later must not vanish with their file."""
        path = segment_path(self.directory, start)
        path.touch()
        sync_directory(self.directory)
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
        self._reads.index(self.segments[-1].start).note(self._active_size, len(record))
        self.end_offset += len(record)
        self._active_size += len(record)
        self.bytes += len(record)
        self._note_unsynced(1, now)
        if self._unsynced >= self.flush_messages:
            self.sync(now)
        return offset

    def append_many(self, records: list[list[bytes]], now: float) -> list[int]:
        """Write several records with one write per segment they go to (a batch of a
        ZPER producer's messages); their offsets. ArchiveError as ``append``."""
        data, starts = encode_records(records)
        first = self.append_encoded(data, starts, now)
        return [first + start for start in starts]

    def append_encoded(self, data: bytes | bytearray, starts: list[int], now: float) -> int:
        """Write records already encoded end to end in ``data``, each starting at its
        entry of ``starts`` (ascending, the first 0), with one write per segment they
        go to; the offset of the first (the others follow without a gap). A record
        goes where ``append`` would put it. ArchiveError as ``append``; then none of
        the records is in the segment the failure was in (its ``written``: how many
        went in before, into segments rolled from)."""
        if self._failure is not None:
            self._reopen(now)
        first = self.end_offset
        view = memoryview(data)
        begin = 0  # the first byte of data not written yet, a record start
        written = 0  # records in the log already (in segments rolled from)
        try:
            while starts:
                # A record starting before the active segment is full goes in it.
                room = self.segment_size - self._active_size
                split = bisect_left(starts, begin + room)
                stop = starts[split] if split < len(starts) else len(data)
                run = starts[bisect_left(starts, begin):split]
                self._write_run(view[begin:stop], run, begin, now)
                written += len(run)
                if split == len(starts):
                    break
                self._roll(now)
                begin = stop
        except OSError as exc:
            self._failure = (now, str(exc))
            raise ArchiveError(f"archive write failed: {exc}", written) from None
        except ArchiveError as exc:  # the fsync of the segment rolled from
            raise ArchiveError(str(exc), written) from None
        if self._unsynced >= self.flush_messages:
            self.sync(now)
        return first

    def _write_run(self, run: memoryview, starts: list[int], begin: int, now: float) -> None:
        """``run``: the records at ``starts`` (positions in the caller's data, from
        ``begin``) to the active segment."""
        assert self._active is not None, "open() first"
        if run:
            try:
                self._write_all(self._active, run)
            except OSError:
                self._cut_back()
                raise
        shift = self._active_size - begin
        size = len(run)
        self._reads.index(self.segments[-1].start).note_run(starts, shift,
                                                            self._active_size + size)
        self.end_offset += size
        self._active_size += size
        self.bytes += size
        self._note_unsynced(len(starts), now)

    def _note_unsynced(self, count: int, now: float) -> None:
        if count and self.unsynced_since is None:
            self.unsynced_since = now
        self._unsynced += count

    def _cut_back(self) -> None:
        """Cut the active segment back to the records it holds after a failed write
        (what of the run went in, whole records too); left to the reopen if this
        fails as well."""
        assert self._active is not None
        try:
            os.ftruncate(self._active.fileno(), self._active_size)
        except OSError:
            self._cut_to = (self.segments[-1].start, self._active_size)

    @staticmethod
    def _write_all(handle: BinaryIO, record: bytes | memoryview) -> None:
        view = memoryview(record)
        while view:  # an unbuffered write may take part of it (a disk filling up)
            view = view[handle.write(view):]

    def _roll(self, now: float) -> None:
        self.sync(now)
        if self._active is not None:
            self._active.close()
        self._reads.seal(self.segments[-1])
        segment = self._new_segment(self.end_offset)
        self.segments.append(segment)
        self._reads.install(segment.start, OffsetIndex())
        self._active = segment.path.open("ab", buffering=0)
        self._active_size = 0

    def sync(self, now: float) -> None:
        if self._failure is not None:
            self._sync_written_before_failure(now)
            return
        if self._active is None:
            return
        try:
            if self.unsynced_since is not None:  # also what a failed write left
                os.fsync(self._active.fileno())
        except OSError as exc:
            self._failure = (now, str(exc))
            raise ArchiveError(f"archive fsync failed: {exc}") from None
        self._unsynced = 0
        self.unsynced_since = None
        self.synced_at = now
        self.flushed_offset = self.end_offset
        self._save_index()

    def _sync_written_before_failure(self, now: float) -> None:
        """A write failed (a full disk): the records written whole before it still reach
        the disk now, as the store's fsync of their messages' deletes waits for (see
        pzq.archive.tier.tier's before_commit); skipped, the deletes were made
        durable and the records not, and a power cut lost those messages from both.
        What the failure left half written is past ``end_offset``, cut at the reopen."""
        if self.unsynced_since is None:
            return
        try:
            if self._active is not None:
                os.fsync(self._active.fileno())
            else:  # (closed by a reopen that failed)
                with self.segments[-1].path.open("rb") as handle:
                    os.fsync(handle.fileno())
        except OSError as exc:
            raise ArchiveError(f"archive fsync failed: {exc}") from None
        self._unsynced = 0
        self.unsynced_since = None
        self.synced_at = now
        self.flushed_offset = self.end_offset

    def _save_index(self) -> None:
        """The active segment's new index entries to its file (a hint: no fsync)."""
        active = self.segments[-1]
        try:
            self._reads.index(active.start).save(index_path(active.path))
        except OSError:
            pass  # rebuilt from the segment when the topic is next opened

    def flush_due_at(self) -> float | None:
        """When the oldest unsynced record will have waited --flush-interval (None:
        nothing waits): the log is fsync'd then, whenever the last fsync was."""
        if self.unsynced_since is None:
            return None
        return self.unsynced_since + self.flush_interval_s

    def tick(self, now: float) -> None:
        due = self.flush_due_at()
        if due is not None and now >= due:
            self.sync(now)

    # -- retention and reading --------------------------------------------------------

    def apply_retention(self, now: float, retain_s: float, retain_bytes: int = 0) -> int:
        """Delete the oldest whole segments while their newest data is older than
        ``retain_s`` or, with ``retain_bytes``, while the topic is larger than that;
        never the active one. Returns how many were deleted."""
        deleted = 0
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_old = now - oldest.path.stat().st_mtime > retain_s
            too_big = 0 < retain_bytes < self.bytes
            if not (too_old or too_big):
                break
            size = oldest.size
            oldest.path.unlink()
            index_path(oldest.path).unlink(missing_ok=True)
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

    def read(self, offset: int, max_bytes: int, up_to: int | None = None
             ) -> bytes | memoryview:
        """Whole records from ``offset`` (a record start), at most ``max_bytes`` but at
        least one record, none past ``up_to`` (a record boundary; the log's end when
        None); empty at the end. At a damaged record, exactly its bytes (see
        pzq.archive.format.records). A view of the segment's mapping, no copy. ValueError if
        out of range or not a record start."""
        if not self.start_offset <= offset <= self.end_offset:
            raise ValueError(f"offset {offset} is outside {self.start_offset}..{self.end_offset}")
        end = self.end_offset if up_to is None else min(up_to, self.end_offset)
        if offset >= end:
            return b""
        for index, segment in enumerate(self.segments):
            following = (self.segments[index + 1].start if index + 1 < len(self.segments)
                         else end)
            if segment.start <= offset < following:
                return self._reads.read(segment, offset - segment.start,
                                        following - segment.start, max_bytes,
                                        active=index + 1 == len(self.segments))
        return b""

    def close(self, now: float) -> None:
        if self._active is not None:
            try:
                self.sync(now)
            finally:
                self._active.close()
                self._active = None

