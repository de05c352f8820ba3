"""The archive: one TopicLog per topic under one directory, used by the loop thread."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pzq.archive.entry import ArchivedMessage
from pzq.archive.topiclog import TopicLog
from pzq.errors import ArchiveError
from pzq.protocol.headers import validate_topic


@dataclass(frozen=True)
class TopicInfo:
    start_offset: int
    last_offset: int  # the end of the log: where the next record will go
    flushed_offset: int  # the end of what the last fsync made durable
    bytes: int
    segments: int
    damaged_records: int  # met by ZPER readers since the node started
    raw: bool  # written by ZPER producers (pzq.archive.raw)


class Archive:
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
        self.repaired_bytes = 0  # torn tails cut at the last open

    def open(self, now: float) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArchiveError(f"cannot create archive directory {self.directory}: {exc}") \
                from None
        for path in sorted(self.directory.iterdir()):
            if path.is_dir():
                try:
                    validate_topic(path.name)
                except ValueError:
                    continue  # not ours
                self.repaired_bytes += self._log(path.name, now, opening=True)[1]

    def _log(self, topic: str, now: float, opening: bool = False) -> tuple[TopicLog, int]:
        log = self.logs.get(topic)
        if log is not None:
            return log, 0
        log = TopicLog(self.directory / validate_topic(topic), self.segment_size,
                       self.flush_messages, self.flush_interval_s)
        cut = log.open(now)
        self.logs[topic] = log
        return log, cut

    def log(self, topic: str) -> TopicLog | None:
        return self.logs.get(topic)

    def append(self, message: ArchivedMessage, now: float) -> int:
        """Write one message to its topic's log; returns its offset. ArchiveError on failure."""
        return self._log(message.topic, now)[0].append(message.frames(), now)

    def append_raw(self, topic: str, messages: list[list[bytes]],
                   now: float) -> list[int]:
        """Write ZPER producers' messages, frames as they are, to their topic (marked
        raw on its first write); their offsets. ArchiveError on failure or when the
        topic holds pzq's records; ValueError for a topic that is not a name."""
        log = self._log(topic, now)[0]
        log.make_raw()
        return log.append_many(messages, now)

    def is_raw(self, topic: str) -> bool:
        log = self.logs.get(topic)
        return log is not None and log.raw

    def sync(self, now: float) -> None:
        for log in self.logs.values():
            log.sync(now)

    def tick(self, now: float) -> None:
        for log in self.logs.values():
            log.tick(now)

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
