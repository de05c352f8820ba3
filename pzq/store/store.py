"""This node's LevelDB store: its opening, group-committed writes, reads and recovery.

Everything one wake of the loop changes goes into one Batch (pzq.store.batch) and is
committed with one write (``sync=True`` under --hard-sync: one fsync per batch; otherwise the
logs are fsync'd beside the loop after the first batch once --sync-interval has passed,
see pzq.store.log_sync, pzq.store.log_syncer and pzq.store.log_files). The sequence
high-water mark and the message counters ride along in every batch, so they are
exactly as durable as the messages they count and the monitor never scans.

Parts whose memory follows the store (delivery states, replicas, the cluster, the
archive) register as participants (pzq.store.batch.Participant): each batch starts
with their ``prepare`` (what earlier batches left to write), and ends with
``written`` or ``failed``. This module, the batch's and pzq.store.leveldb (opening
LevelDB) are the only ones that touch plyvel.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Iterator
from functools import partial
from itertools import islice
from pathlib import Path

import plyvel

from pzq.errors import PzqError, StoreDamaged, StoreError, StoreUnrecoverable
from pzq.fsync import sync_directory
from pzq.hooks import overriding
from pzq.logs import get_logger
from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.leveldb import (
    REPAIR_HINT,
    leveldb_reason,
    open_leveldb,
    open_store_database,
)
from pzq.store.log_sync import LogSync
from pzq.store.log_syncer import LogSyncer
from pzq.store.store_format import STORE_FORMAT

COUNTERS = struct.Struct(">QQQ")  # stored messages, stored bytes, dead letters
RECOVERY_MARGIN = 256 * 1024  # bytes free beyond the log's size, to reopen after a failure
# A directory's mtime comes from the kernel's coarse clock, up to a tick behind the
# real time: a change this close to the last directory fsync may have followed it.
COARSE_CLOCK_NS = 20_000_000

log = get_logger("pzq.store")


class Store:
    def __init__(self, db: plyvel.DB, path: Path, hard_sync: bool,
                 sync_interval_s: float = 0.0, now: float = 0.0) -> None:
        self._db = db
        self._participants: list[Participant] = []
        self._preparing: list[Participant] = []
        self._checking: list[Participant] = []
        self._writing: list[Participant] = []
        self.path = path
        self.hard_sync = hard_sync
        self.log_sync = LogSync(hard_sync, sync_interval_s, now)
        self.syncer = LogSyncer()  # the timed sync's thread
        if not hard_sync and sync_interval_s > 0:
            self.syncer.prepare()
        self._now = now  # the time of this wake (monotonic seconds), see wake_at
        self.node_id = self._load_node_id()
        self.format = STORE_FORMAT  # checked, or written, as it was opened
        self.next_seq = self._load_next_seq()
        self.messages, self.bytes, self.dead_letters = self._load_counters()
        self.syncs = 0  # batches written (each one fsync'd under --hard-sync)
        self.log_syncs = 0  # batches written with an fsync of the log
        self._torn_log = False  # a write failed: reopen before the next one (see _recover)
        # when (monotonic seconds) the writes began to fail; None while they succeed
        self.write_failing_since: float | None = None
        # The last batch written (or left empty): the next one begun, emptied then,
        # its LevelDB write batch with it (a wake makes neither; a failed one is dropped)
        self._spare: Batch | None = None
        self._directory_synced_ns = 0  # wall clock when the last directory fsync began
        self._sync_failing = False
        self._path_text = os.fspath(path)  # (a stat of a str skips the Path's conversion)
        self._directory = _identity(self._path_text)  # (device, inode): see _check_directory

    @classmethod
    def open(cls, path: str | Path, hard_sync: bool = False, sync_interval_s: float = 0.0,
             now: float = 0.0) -> Store:
        """``now``: monotonic seconds, the clock of ``wake_at``."""
        path = Path(path)
        db = open_store_database(path)
        return cls(db, path, hard_sync, sync_interval_s, now)

    def close(self) -> None:
        """Sync what is not yet on disk (a stopped node loses nothing to a power cut
        after it), then close."""
        if self._db.closed:
            return
        self.wait_for_sync()
        if self.log_sync.unsynced_since is not None and not self._torn_log:
            self._start_sync()
            self.wait_for_sync()
        self.syncer.close()
        self._db.close()

    # -- batches -----------------------------------------------------------

    def register(self, participant: Participant, first: bool = False) -> None:
        """``first``: asked before those registered earlier (the producers' intake,
        whose ACKs go out the moment the batch is written)."""
        if first:
            self._participants.insert(0, participant)
        else:
            self._participants.append(participant)  # (a batch asks only those with a hook)
        self._preparing = overriding(self._participants, Participant, "prepare")
        self._checking = overriding(self._participants, Participant, "before_write")
        self._writing = overriding(self._participants, Participant, "written")

    def wake_at(self, now: float) -> None:
        """The time of the loop's wake (monotonic seconds): batches begun from now on
        are synced once --sync-interval has passed."""
        self._now = now

    def write_failing_s(self, now: float) -> float:
        """Seconds since the store's writes began to fail (0: the last one succeeded)."""
        since = self.write_failing_since
        return 0.0 if since is None else max(0.0, now - since)

    def sync_wait_s(self) -> float | None:
        """Seconds until the log must be synced (the loop wakes for it); None: never."""
        return self.log_sync.wait_s(self._now)

    def begin(self, now: float | None = None) -> Batch:
        """A new batch, holding what the participants left to write. ``now``: the
        loop's wake begins it, at that time (``wake_at`` in the same call)."""
        if now is not None:
            self._now = now
        if self._torn_log:
            self._recover()
        # Under --hard-sync LevelDB fsyncs each batch; a timed sync fsyncs the logs
        # after the write (see pzq.store.log_files for why not sync=True).
        sync = self.log_sync.due_at <= self._now  # (``due``, without its call)
        if sync and not self.hard_sync:
            sync = self._timed_sync_near()
        batch = self._spare
        if batch is None:
            batch = Batch(self.take_seq, self.take_seqs,
                          self._db.write_batch(sync=self.hard_sync), sync)
        else:
            self._spare = None  # (a batch begun while this one is open gets its own)
            if batch.operations:  # (emptied here: what it held is read until then)
                batch.clear()
            batch.sync = sync
        for participant in self._preparing:
            if not participant.idle:
                participant.prepare(batch)
        return batch

    def begin_settled(self) -> Batch:
        """A batch for an operator's walk of the stored messages (a seek, an EMPTY, a
        REMOVE): what the participants owe from earlier wakes (deletes, dead letters,
        expired messages) is written first in a batch of its own, so the walk reads
        the store they left and does not delete a message a second time."""
        self.commit(self.begin())
        return self.begin()

    def skip_seqs(self, count: int) -> None:
        """Never give out the next ``count`` sequence numbers (a node restored from a
        backup: the original gave some of them out after the backup), durably."""
        self.next_seq += count
        self._db.put(keyspace.META_NEXT_SEQ, keyspace.SEQ.pack(self.next_seq), sync=True)

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def take_seqs(self, count: int) -> range:
        """The next ``count`` sequence numbers at once (a run of messages)."""
        first = self.next_seq
        self.next_seq += count
        return range(first, first + count)

    def commit(self, batch: Batch) -> None:
        """Write the batch with the metadata that must move with it, then tell the
        participants. Under --hard-sync one fsync per batch. A batch with nothing in
        it is not written, unless it is due to sync earlier writes. On failure
        (StoreError, or a participant's PzqError before the write) nothing of the
        batch is applied, and the sequence numbers it took are skipped (keys need
        only be unique and increasing, not dense).
        """
        # due, and none runs: a timed sync of this batch and every earlier one
        starts_sync = (batch.sync and self.log_sync.unsynced_since is not None
                       and not self.syncer.running and not self.hard_sync
                       and not self._torn_log)
        try:
            if batch.operations:
                self._write(batch)
            elif starts_sync:
                self._before_write()  # (the archive's fsync, before the sync's)
        except PzqError:
            self.log_sync.failed(self._now)
            if self.write_failing_since is None:
                self.write_failing_since = self._now
            for participant in self._participants:
                participant.failed()
            raise
        self._spare = batch
        if self.write_failing_since is not None and (batch.operations or starts_sync):
            self.write_failing_since = None  # (a batch not written tells nothing)
        if starts_sync:
            self._start_sync()
        for participant in self._writing:
            if not participant.idle:
                participant.written()

    def _write(self, batch: Batch) -> None:
        if self._torn_log:
            self._refuse_until_recovered()
        self._check_directory()
        self._before_write()
        messages = self.messages + batch.message_delta
        stored_bytes = self.bytes + batch.byte_delta
        dead = self.dead_letters + batch.dead_delta
        try:
            batch.write_with_metadata(self.next_seq, COUNTERS.pack(messages, stored_bytes, dead))
        except (plyvel.Error, RuntimeError) as exc:  # RuntimeError: the DB was closed
            self._torn_log = True
            raise StoreError(f"store write failed: {leveldb_reason(exc)}") from None
        self.messages, self.bytes, self.dead_letters = messages, stored_bytes, dead
        self.syncs += 1
        if self.hard_sync:
            self._written_and_synced()
            self._sync_directory_if_changed()
        elif self.log_sync.unsynced_since is None or self.log_sync.running_since is not None:
            # (else already unsynced and no sync runs: the log's state stays, no call)
            self.log_sync.written(False, self._now)

    def _check_directory(self) -> None:
        """Refuse the write when the store's directory was removed, moved or replaced
        while the node ran: LevelDB goes on writing into its open files, gone from the
        path, and every message ACKed then would be lost at the next start (an
        operator's ``rm -rf`` of a running node's store was answered ``ok``, then a new,
        empty store). One stat a batch; what the store held is still read, so
        consumers are served and their ACKs wait in memory."""
        if _identity(self._path_text) != self._directory:
            raise StoreError(f"store write failed: the store's directory {self.path} was "
                             f"removed or replaced while the node ran (put it back, or "
                             f"stop the node and restore it)")

    def _before_write(self) -> None:
        for participant in self._checking:
            if not participant.idle:
                participant.before_write()

    def _written_and_synced(self) -> None:
        self.log_syncs += 1
        self.log_sync.written(True, self._now)

    def _timed_sync_near(self) -> bool:
        """A timed sync is due or runs (see begin): whether the batch begun now may
        reach the disk with one, as the one that starts once it is written or the
        running one (whose fsyncs may catch its pages: the archive fsyncs first).
        Takes the running one's outcome if it finished."""
        if self.syncer.running:
            if not self.syncer.finished():
                return True
            self._sync_finished()
            return self.log_sync.due_at <= self._now
        return True

    def _start_sync(self) -> None:
        """The timed sync, in the syncer's thread: every log, oldest first, and the
        directory; it covers every batch written before it began."""
        self.log_sync.began(self._now)
        self.syncer.start(self.path)

    def wait_for_sync(self) -> None:
        """Waits for a running timed sync and takes its outcome (at a stop)."""
        if self.syncer.running:
            self._sync_finished()

    def _sync_finished(self) -> None:
        """The timed sync's outcome, on the loop: a failure is logged (once per
        failing spell) and tried again an interval later."""
        error = self.syncer.outcome()
        self.log_sync.finished(error is None, self._now)
        if error is not None:
            if not self._sync_failing:
                self._sync_failing = True
                log.error("store_log_sync_failed", error=str(error))
            return
        self._sync_failing = False
        self.log_syncs += 1

    def _sync_directory_if_changed(self) -> None:
        """LevelDB fsyncs its directory only with its MANIFEST, so the name of a new
        log (made when the write buffer fills) is not durable until its memtable is
        written as a table, and synced writes to that log would vanish with the name
        in a power cut. After a synced write, fsync the directory if it changed since
        the last time (one stat otherwise)."""
        started = time.time_ns()
        try:
            if os.stat(self.path).st_mtime_ns < self._directory_synced_ns - COARSE_CLOCK_NS:
                return
            sync_directory(self.path)
        except OSError as exc:  # the data is synced; only new names wait for the next try
            if not self._sync_failing:
                self._sync_failing = True
                log.error("store_directory_sync_failed", error=str(exc))
            return
        self._directory_synced_ns = started
        self._sync_failing = False

    def _recover(self) -> None:
        """Reopen LevelDB after a failed write, before the next batch.

        A write that failed (a full disk) can leave a torn record in LevelDB's log,
        and LevelDB appends the next records after it as if it were whole; after a
        crash its recovery cannot read them, so messages ACKed since would be lost.
        Reopening replays the log up to the torn record and starts a new log. That
        replay writes the log's contents as a table (at most about the log's size),
        so it waits until the disk has room for it; until then every write is
        refused (see _write), and nothing is ACKed.
        """
        if shutil.disk_usage(self.path).free < self._room_to_recover():
            return
        self._db.close()
        self._spare = None  # (its write batch writes to the database closed)
        try:
            self._db = open_leveldb(self.path)
        except plyvel.Error as exc:
            raise StoreUnrecoverable(f"cannot reopen the store after a failed write: "
                                     f"{leveldb_reason(exc)}") from None
        self._torn_log = False
        self.log_sync.written(True, self._now)  # reopening put the replayed log in a table

    def _room_to_recover(self) -> int:
        return sum(log.stat().st_size for log in self.path.glob("*.log")) + RECOVERY_MARGIN

    def _refuse_until_recovered(self) -> None:
        free = shutil.disk_usage(self.path).free
        raise StoreError(f"store write failed earlier; waiting for "
                         f"{_mb(self._room_to_recover())} free on the store's disk to recover "
                         f"its log ({_mb(free)} free)")

    # -- reads -------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._db.get(key, verify_checksums=True)
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None
        return value

    def snapshot(self) -> plyvel.Snapshot:
        """The whole store as of now, for pzq.store.snapshot_copy: read later, across
        wakes, while batches go on being written. Until it is closed LevelDB keeps
        what it needs, so keys deleted since still take their room."""
        return self._db.snapshot()

    def iterate(self, prefix: bytes, start: bytes | None = None,
                values: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs under ``prefix`` from ``start`` on, in key order; with
        ``values=False`` the values are empty (a key-only walk)."""
        try:
            with self._db.iterator(start=start or prefix, stop=keyspace.prefix_end(prefix),
                                   include_value=values, verify_checksums=True) as iterator:
                for item in iterator:
                    yield item if values else (item, b"")
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None

    def any_between(self, start: bytes, stop: bytes) -> bool:
        """Whether a key in [``start``, ``stop``) is stored (one seek)."""
        try:
            with self._db.iterator(start=start, stop=stop, include_value=False,
                                   verify_checksums=True) as iterator:
                return next(iterator, None) is not None
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None

    def _damaged(self, exc: plyvel.Error) -> StoreDamaged:
        return StoreDamaged(f"the store {self.path} is damaged: {leveldb_reason(exc)}; "
                            f"{REPAIR_HINT.format(path=self.path)}")

    def read_up_to(self, prefix: bytes, start: bytes, last: bytes,
                   count: int) -> list[tuple[bytes, bytes]]:
        """Up to ``count`` (key, value) pairs under ``prefix`` from ``start`` on, none past
        the key ``last``: taken in C, and LevelDB is asked for nothing after ``last``
        (finding the key after it walks on past every deleted key, those of acked
        messages until a compaction). With ``last`` not stored, up to ``count`` pairs."""
        if start > last:
            return []
        try:
            with self._db.iterator(start=start, stop=keyspace.prefix_end(prefix),
                                   verify_checksums=True) as iterator:
                # read after the walk's view is taken: stored then, it is stored still
                last_value = self._db.get(last, verify_checksums=True)
                if last_value is None:
                    return list(islice(iterator, count))
                pairs = list(islice(iter(iterator.__next__, (last, last_value)), count))
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None
        if len(pairs) < count and (not pairs or pairs[-1][0] < last):
            pairs.append((last, last_value))  # the walk stopped on it
        return pairs

    def read_run(self, first: bytes, stop: bytes, count: int) -> list[bytes]:
        """The values of the keys from ``first`` on and below ``stop``, up to ``count``,
        without their keys (no key object, no pair a value): where the keys between
        are exactly ``count`` (the own keys of a run of seqs), ``count`` values say
        each is stored, in key order. Fewer: some are not, and the walk went on past
        the last to ``stop`` (over the deleted keys after it: the rare read)."""
        try:
            with self._db.iterator(start=first, stop=stop, include_key=False,
                                   verify_checksums=True) as iterator:
                return list(islice(iterator, count))
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None

    def iterate_back(self, prefix: bytes, below: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs under ``prefix`` and below the key ``below``, last first."""
        try:
            with self._db.iterator(start=prefix, stop=below, reverse=True,
                                   verify_checksums=True) as iterator:
                yield from iterator
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None

    def iterate_reverse(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs under ``prefix``, last key first (checked as every read)."""
        return self.iterate_back(prefix, keyspace.prefix_end(prefix))

    def scan(self, prefix: bytes, start: bytes | None = None,
             limit: int | None = None) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` (key, value) pairs under ``prefix`` from ``start`` on, in C."""
        try:
            with self._db.iterator(start=start or prefix, stop=keyspace.prefix_end(prefix),
                                   verify_checksums=True) as iterator:
                return list(islice(iterator, limit))
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None

    def read_own(self, start_seq: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` own messages with seq >= start_seq, in arrival order."""
        return keyspace.own_messages(self.scan(keyspace.OWN_PREFIX,
                                               keyspace.own_key(start_seq), limit))

    def get_all(self, keys: list[bytes]) -> list[bytes | None]:
        """``get`` of each key, the reads made in C (many at once)."""
        try:
            return list(map(partial(self._db.get, verify_checksums=True), keys))
        except plyvel.CorruptionError as exc:
            raise self._damaged(exc) from None

    def get_own(self, seq: int) -> bytes | None:
        return self.get(keyspace.own_key(seq))

    def get_dead(self, seq: int) -> bytes | None:
        return self.get(keyspace.dead_key(seq))

    # -- metadata ------------------------------------------------------------

    def _load_node_id(self) -> bytes:
        node_id = self.get(keyspace.META_NODE_ID)
        if node_id is None:
            node_id = os.urandom(keyspace.NODE_ID_LENGTH // 2).hex().encode()
            self._db.put(keyspace.META_NODE_ID, node_id, sync=True)
        return node_id

    def _load_next_seq(self) -> int:
        stored = self._db.get(keyspace.META_NEXT_SEQ)
        next_seq = keyspace.SEQ.unpack(stored)[0] if stored else 0
        # One seek to the last own key guards against a high-water mark behind the data.
        with self._db.iterator(prefix=keyspace.OWN_PREFIX, reverse=True,
                              include_value=False) as iterator:
            for store_key in iterator:
                next_seq = max(next_seq, keyspace.own_seq(store_key) + 1)
                break
        return next_seq

    def _load_counters(self) -> tuple[int, int, int]:
        stored = self._db.get(keyspace.META_COUNTERS)
        return COUNTERS.unpack(stored) if stored else (0, 0, 0)


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def _identity(path: str) -> tuple[int, int] | None:
    """The directory's device and inode, None when nothing is at ``path``."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino
