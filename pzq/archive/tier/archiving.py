"""Acked and dead-lettered messages into the archive, before they leave the store.

A message is appended before its store delete is written; under --hard-sync, and
before a batch that the store's timed sync (--sync-interval) may make durable (the
batch it starts after, and those written while it runs), the archive is fsync'd before
that write (``before_write``, as a batch participant): a delete never reaches the
disk before its message's record.
When the archive cannot be written, an acked message is not removed: it is
delivered again later, and the failure is logged once per failing spell.
"""

from __future__ import annotations

import time
from operator import attrgetter

from pzq.archive.tier.archive import Archive
from pzq.archive.tier.archived_at_start import StoredAt
from pzq.archive.tier.lock import ArchiveLock
from pzq.archive.tier.part import ArchivePart
from pzq.archive.tier.tier import ArchiveTier
from pzq.delivery.inflight import InFlight
from pzq.delivery.state import DeliveryState
from pzq.errors import ArchiveError
from pzq.logs import get_logger
from pzq.parts import Part
from pzq.protocol.message_keys import message_key
from pzq.store.batch import Batch, Participant

log = get_logger("pzq.archive")
SEQ_OF = attrgetter("seq")  # of entries, in C


class Archiving(Participant):
    """The node's archive (pzq.archive.contract.ArchiveWrites; without --archive-dir the
    node has pzq.archive.contract.NoArchiving)."""

    writes = True

    def __init__(self, tier: ArchiveTier, stored_at: StoredAt | None = None) -> None:
        """``stored_at``: the store's (pzq.archive.tier.archived_at_start.stored_at_in),
        to archive once a message a kill left archived and still stored."""
        self.tier = tier
        self.stored_at = stored_at
        self.lock = ArchiveLock(tier.archive.directory)
        self._failing = False
        # when (seconds since the epoch) the writes began to fail; None while they succeed
        self._failing_since: float | None = None
        # a timed sync may make the batch being written durable (pzq.store.batch)
        self._batch_syncs = False

    def open(self, now: float) -> None:
        """Take the directory's lock for the node's life, then open the archive (which
        may cut a torn tail: never one another node is writing)."""
        self.lock.acquire()
        try:
            self.tier.open(now, self.stored_at)
        except BaseException:
            self.lock.release()
            raise

    def close(self, now: float) -> None:
        try:
            self.tier.close(now)
        finally:
            self.lock.release()

    @property
    def logs(self) -> Archive:
        """Its topic logs, as a replay reads them."""
        return self.tier.archive

    def part(self) -> Part:
        """Its part of the loop: the wake's time, timed fsyncs, retention."""
        return ArchivePart(self)

    def acked(self, state: DeliveryState, batch: Batch, key: bytes, seq: int,
              now_us: int) -> bool:
        """Archive a message a consumer acked; False if that failed (keep it stored)."""
        entry = state.peek(batch, seq)
        if entry is None:
            return True  # unknown: nothing to archive, the ACK path counts it
        return self._append(key, entry, now_us, state.area.node_id, "acked",
                            state.area.group_names(seq))

    def acked_all(self, state: DeliveryState, batch: Batch, seqs: list[int],
                  now_us: int) -> set[int]:
        """Archive the messages of one ACK whose last holder the group is (``seqs``,
        each once), each topic's in one write; the seqs that could not be written
        (kept stored, to be delivered again)."""
        entries = state.peek_all(batch, seqs)
        if not entries:  # (an unknown one: nothing to archive, the ACK path counts it)
            return set()
        unwritten, error = self.tier.append_acked(
            state.area.node_id, entries,
            state.area.group_names_all(list(map(SEQ_OF, entries))), now_us)
        if error is not None:
            self.failed_with(error, len(unwritten))
        else:
            self._recovered()
        return set(unwritten)

    def given_up_by_last_group(self, entry: InFlight, now_us: int, origin: bytes,
                               groups: tuple[str, ...]) -> bool:
        """A message the last group holding it gave up, naming the groups that held
        it (it stays in the store's dead letters if this fails); False if it failed."""
        return self._append(message_key(origin, entry.seq), entry, now_us, origin,
                            "dead_letter", groups)

    def _append(self, key: bytes, entry: InFlight, now_us: int, origin: bytes,
                outcome: str, groups: tuple[str, ...] = ()) -> bool:
        try:
            self.tier.append(key, entry.value, entry.first_delivered_us, entry.deliveries,
                             now_us, origin.decode(), outcome=outcome, groups=groups)
        except ArchiveError as exc:
            self.failed_with(exc)
            return False
        self._recovered()
        return True

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            self._failing_since = None
            log.warning("archive_write_recovered")

    def failed_with(self, exc: ArchiveError, messages: int = 1) -> None:
        """``messages``: how many it left stored (archive.failures counts each)."""
        self.tier.failures += messages
        if not self._failing:  # once per failing spell
            self._failing = True
            self._failing_since = time.time()
            log.error("archive_write_failed", error=str(exc))

    def wake_at(self, now: float) -> None:
        """The time of the loop's wake (seconds since the epoch)."""
        self.tier.wake_at(now)

    def flush(self, now: float) -> None:
        """fsync what has waited --flush-interval (``now``: seconds since the epoch)."""
        try:
            self.tier.flush(now)
        except ArchiveError as exc:
            self.failed_with(exc)

    def apply_retention(self, now: float) -> None:
        try:
            self.tier.apply_retention(now)
        except ArchiveError as exc:
            self.failed_with(exc)

    def figures(self, now: float) -> dict[str, object]:
        """The archive's figures for STATS (``now``: seconds since the epoch): with
        whether its writes fail now (the failures' count moves only while messages are
        acked: a full archive disk with no consumer ACKing read healthy)."""
        since = self._failing_since
        return {**self.tier.snapshot(now), "write_failing": int(since is not None),
                "write_failing_s": 0.0 if since is None else round(max(0.0, now - since), 3)}

    def prepare(self, batch: Batch) -> None:
        self._batch_syncs = batch.sync

    def before_write(self) -> None:
        self.tier.before_commit(self._batch_syncs)
