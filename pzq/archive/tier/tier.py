"""The device's side of the archive: acked and given-up messages in, fsync'd in time.

A message is appended here before its store delete is written; under --hard-sync
the archive is fsync'd before that write (``before_commit``). Time is passed in
(``now``: seconds since the epoch, the wake's), as everywhere in the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.tier.acked_records import AckedRecords
from pzq.archive.tier.archive import Archive
from pzq.archive.tier.archived_at_start import ArchivedAtStart, StoredAt
from pzq.delivery.inflight import InFlight
from pzq.errors import ArchiveError
from pzq.logs import get_logger
from pzq.protocol.headers import TOPIC_HEADER, topic_and_tag
from pzq.protocol.message_keys import message_keys
from pzq.store import record

log = get_logger("pzq.archive")

@dataclass(frozen=True)
class ArchiveSettings:
    directory: Path
    segment_size: int  # bytes
    flush_messages: int
    flush_interval_ms: int
    retain_hours: int
    default_topic: str
    hard_sync: bool
    retain_bytes: int = 0  # per topic; 0: no limit


class ArchiveTier:
    def __init__(self, settings: ArchiveSettings) -> None:
        self.archive = Archive(settings.directory, settings.segment_size,
                               settings.flush_messages, settings.flush_interval_ms,
                               settings.retain_hours, settings.retain_bytes)
        self.default_topic = settings.default_topic
        self.hard_sync = settings.hard_sync
        self.archived = 0
        self.failures = 0
        self._dirty = False  # appended since the last batch
        self._appended = False  # appended since the last fsync for the store
        self._now = 0.0  # the time of this wake (see wake_at)
        # archived and still stored when the node started: not archived again
        self.archived_at_start = ArchivedAtStart()

    def wake_at(self, now: float) -> None:
        """The time of the loop's wake: the fsyncs before the store's writes are
        stamped with it (a store participant is told no time)."""
        self._now = now

    def open(self, now: float, stored_at: StoredAt | None = None) -> None:
        """``stored_at``: the store's, to find the messages archived and still stored
        (a node killed between the two writes of an ACK; see ArchivedAtStart)."""
        self.archive.open(now)
        if stored_at is None:
            return
        for topic_log in self.archive.logs.values():
            self.archived_at_start.find(topic_log.tail, stored_at)
        if self.archived_at_start:
            log.warning("archived_and_still_stored", messages=len(self.archived_at_start),
                        note="delivered again; not archived a second time")

    def append(self, key: bytes, value: bytes, first_delivered_us: int, deliveries: int,
               acked_us: int, origin: str, outcome: str = "acked",
               groups: tuple[str, ...] = ()) -> None:
        """Archive one acked (or dead-lettered) message; ArchiveError if it failed."""
        stored = record.decode(value)
        if self.archived_at_start and self.archived_at_start.take(key, stored.stored_us):
            return  # archived before the node was killed, its store delete lost
        self.archive.append(ArchivedMessage(
            key=key, msg_id=stored.msg_id, topic=self.topic_of(stored.headers),
            stored_us=stored.stored_us, first_delivered_us=first_delivered_us,
            acked_us=acked_us, deliveries=deliveries, origin=origin,
            parts=stored.parts, outcome=outcome, groups=groups,
            headers=tuple(header for header in stored.headers
                          if header[:6].upper() != TOPIC_HEADER)), acked_us / 1e6)
        self.archived += 1
        self._dirty = self._appended = True

    def append_acked(self, origin: bytes, entries: list[InFlight],
                     groups: list[tuple[str, ...]], acked_us: int
                     ) -> tuple[list[int], ArchiveError | None]:
        """Archive the messages of one ACK (each an entry of a message's last holder,
        with the groups done with it), each topic's in one write; the seqs that were
        not written, and why (None: every one was). A topic's failed write leaves
        none of its messages archived (but those a roll to a new segment had put
        in): they stay stored, to be delivered again."""
        if self.archived_at_start:
            entries, groups = self._not_archived(origin, entries, groups)
        records = AckedRecords(self.topic_of, origin, acked_us)
        records.add_all(entries, groups)
        now = acked_us / 1e6
        unwritten: list[int] = []
        error: ArchiveError | None = None
        written = 0
        for topic, topic_records in records.by_topic.items():
            data, starts = topic_records.encoded()
            try:
                self.archive.append_records(topic, data, starts, now)
                written += len(starts)
            except ArchiveError as exc:
                error = error or exc
                written += exc.written
                unwritten += topic_records.seqs[exc.written:]
        if written:
            self.archived += written
            self._dirty = self._appended = True
        return unwritten, error

    def _not_archived(self, origin: bytes, entries: list[InFlight],
                      groups: list[tuple[str, ...]]
                      ) -> tuple[list[InFlight], list[tuple[str, ...]]]:
        """The entries (and their groups) but those archived before the node was
        killed (see ArchivedAtStart): taken as written."""
        keys = message_keys(origin, [entry.seq for entry in entries])
        kept = [not self.archived_at_start.take(key, record.decode(entry.value).stored_us)
                for key, entry in zip(keys, entries, strict=True)]
        return ([entry for entry, keep in zip(entries, kept, strict=True) if keep],
                [names for names, keep in zip(groups, kept, strict=True) if keep])

    def topic_of(self, headers: tuple[bytes, ...]) -> str:
        """The topic the message was stored under; the default one for a name the
        archive cannot take (stored before names were checked) or a ZPER producers'
        topic, which holds their frames only (pzq.archive.format.raw)."""
        try:
            topic = topic_and_tag(headers, self.default_topic)[0]
        except ValueError:
            return self.default_topic
        return self.default_topic if self.archive.is_raw(topic) else topic

    def before_commit(self, store_syncs: bool = False) -> None:
        """The archive reaches the disk before the store's deletes do: under
        --hard-sync before every batch, otherwise before a batch that a timed sync
        of the store's log may make durable (``store_syncs``)."""
        if (self.hard_sync and self._dirty) or (store_syncs and self._appended):
            self.archive.sync(self._now)
            self._appended = False
        self._dirty = False

    def flush_wait_s(self, now: float) -> float | None:
        """Seconds until --flush-interval is up for the oldest unsynced record."""
        return self.archive.flush_wait_s(now)

    def flush(self, now: float) -> None:
        """fsync what has waited --flush-interval (``now``: seconds since the epoch)."""
        self.archive.tick(now)

    def apply_retention(self, now: float) -> int:
        return self.archive.apply_retention(now)

    def snapshot(self, now: float) -> dict[str, object]:
        """``now``: seconds since the epoch, for the ages of the fsyncs."""
        # archive_dir: where readers on this host find it (a Spark read's ``monitor``)
        return {"archive_dir": str(self.archive.directory.absolute()),
                "archived": self.archived, "failures": self.failures,
                "fsync_age_s": round(self.archive.fsync_age_s(now), 3),
                "unsynced_s": round(self.archive.unsynced_s(now), 3),
                "topics": {topic: {"start_offset": info.start_offset,
                                   "last_offset": info.last_offset,
                                   "flushed_offset": info.flushed_offset, "bytes": info.bytes,
                                   "raw": int(info.raw),
                                   "segments": info.segments,
                                   "damaged_records": info.damaged_records}
                           for topic, info in self.archive.topics().items()}}

    def close(self, now: float) -> None:
        self.archive.close(now)
