"""The archive: one TopicLog per topic under one directory, used by the loop thread."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.topiclog import TopicLog
from pzq.errors import ArchiveError
from pzq.fsync import make_directories
from pzq.protocol.headers import validate_topic


@dataclass(frozen=True)
class TopicInfo:
    start_offset: int
    last_offset: int  # the end of the log: where the next record will go
    flushed_offset: int  # the end of what the last fsync made durable
    bytes: int
    segments: int
    damaged_records: int  # met by ZPER readers since the node started
    raw: bool  # written by ZPER producers (pzq.archive.format.raw)


class Archive:
    present = True  # an archive a replay reads (pzq.archive.contract.ArchiveLogs)

    def __init__(self, directory: Path, segment_size: int = 536_870_912,
                 flush_messages: int = 10_000, flush_interval_ms: int = 1000,
                 retain_hours: float = 168, retain_bytes: int = 0) -> None:
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.flush_messages = flush_messages
        self.flush_interval_s = flush_interval_ms / 1000
        self.retain_s = retain_hours * 3600
        self.retain_bytes = retain_bytes  # per topic; 0: no limit
        self.logs: dict[str, TopicLog] = {}
        self._next_flush: float | None = None  # no later than any log's flush_due_at
        self.opened_at = 0.0

    def open(self, now: float) -> None:
        self.opened_at = now
        try:
            make_directories(self.directory)
        except OSError as exc:
            raise ArchiveError(f"cannot create archive directory {self.directory}: {exc}") \
                from None
        for path in sorted(self.directory.iterdir()):
            if path.is_dir():
                try:
                    validate_topic(path.name)
                except ValueError:
                    continue  # not ours
                self._log(path.name, now)

    def _log(self, topic: str, now: float) -> TopicLog:
        log = self.logs.get(topic)
        if log is None:
            log = TopicLog(self.directory / validate_topic(topic), self.segment_size,
                           self.flush_messages, self.flush_interval_s)
            log.open(now)
            self.logs[topic] = log
        return log

    def log(self, topic: str) -> TopicLog | None:
        return self.logs.get(topic)

    def append(self, message: ArchivedMessage, now: float) -> int:
        """Write one message to its topic's log; returns its offset. ArchiveError on failure."""
        offset = self._log(message.topic, now).append(message.frames(), now)
        self._flush_by(now)
        return offset

    def append_records(self, topic: str, data: bytearray, starts: list[int],
                       now: float) -> int:
        """Write pzq's records, encoded end to end (each starting at its entry of
        ``starts``), to their topic's log with one write (a roll to a new segment
        aside); the offset of the first. ArchiveError on failure, with none of them
        written but its ``written`` first ones (see TopicLog.append_encoded)."""
        first = self._log(topic, now).append_encoded(data, starts, now)
        self._flush_by(now)
        return first

    def append_raw(self, topic: str, messages: list[list[bytes]],
                   now: float) -> list[int]:
        """Write ZPER producers' messages, frames as they are, to their topic (marked
        raw on its first write); their offsets. ArchiveError on failure or when the
        topic holds pzq's records; ValueError for a topic that is not a name."""
        log = self._log(topic, now)
        log.make_raw()
        offsets = log.append_many(messages, now)
        self._flush_by(now)
        return offsets

    def append_encoded(self, topic: str, data: bytes | bytearray, starts: list[int],
                       now: float) -> int:
        """As ``append_raw``, for records already encoded end to end (each starting at
        its entry of ``starts``); the offset of the first."""
        log = self._log(topic, now)
        log.make_raw()
        first = log.append_encoded(data, starts, now)
        self._flush_by(now)
        return first

    def is_raw(self, topic: str) -> bool:
        log = self.logs.get(topic)
        return log is not None and log.raw

    def sync(self, now: float) -> None:
        for log in self.logs.values():
            log.sync(now)

    def _flush_by(self, now: float) -> None:
        """A record appended at ``now`` is fsync'd --flush-interval later at the latest."""
        if self._next_flush is None:
            self._next_flush = now + self.flush_interval_s

    def flush_wait_s(self, now: float) -> float | None:
        """Seconds until a log must be fsync'd (the loop wakes for it); None: none waits."""
        return None if self._next_flush is None else max(0.0, self._next_flush - now)

    def tick(self, now: float) -> None:
        """fsync every log whose oldest unsynced record has waited --flush-interval."""
        if self._next_flush is None or now < self._next_flush:
            return
        failure: ArchiveError | None = None
        for log in self.logs.values():
            try:
                log.tick(now)
            except ArchiveError as exc:  # the other topics are still flushed
                failure = failure or exc
        self._next_flush = self._earliest_flush(now)
        if failure is not None:
            raise failure

    def _earliest_flush(self, now: float) -> float | None:
        due = [at for at in (log.flush_due_at() for log in self.logs.values()) if at is not None]
        if not due:
            return None
        # A log that could not sync (a failing disk) is tried again an interval later.
        return min(due) if min(due) > now else now + self.flush_interval_s

    def unsynced_s(self, now: float) -> float:
        """Age of the oldest record not yet fsync'd: what a power cut would lose now."""
        oldest = [log.unsynced_since for log in self.logs.values()
                  if log.unsynced_since is not None]
        return max(0.0, now - min(oldest)) if oldest else 0.0

    def fsync_age_s(self, now: float) -> float:
        """Seconds since the archive's last fsync (or its opening)."""
        return max(0.0, now - max((log.synced_at for log in self.logs.values()),
                                  default=self.opened_at))

    def apply_retention(self, now: float) -> int:
        return sum(log.apply_retention(now, self.retain_s, self.retain_bytes)
                   for log in self.logs.values())

    def topics(self) -> dict[str, TopicInfo]:
        return {topic: TopicInfo(log.start_offset, log.end_offset, log.flushed_offset, log.bytes,
                                 len(log.segments), log.damaged_records, log.raw)
                for topic, log in self.logs.items()}

    def close(self, now: float) -> None:
        for log in self.logs.values():
            log.close(now)
