"""Producer de-duplication: the DEDUP-IDs a topic has stored, for a window of time.

A producer that sends a message again after a lost ACK gives it the same ``DEDUP-ID``
header; within the topic's window the node stores it once and ACKs the repeat as
``DUPLICATE``. An id is written with the batch that stores its message (``u`` to look
it up, ``U`` in time order to let it go), so it is known across restarts exactly when
the message is. Ids older than every window are deleted a chunk at a time, on the
reaper's tick, as part of a batch; a tick before the oldest id known to be stored
reads nothing (no iterator for an index that is empty or all young).
"""

from __future__ import annotations

import math

from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store

SEEN = keyspace.SEQ  # the value of ``u``: when the id was seen (µs)
EXPIRED_PER_BATCH = 10_000  # ids let go in one batch, so a burst cannot stall a wake


class DedupIndex(Participant):
    def __init__(self, store: Store) -> None:
        self.store = store
        self._batch_ids: dict[tuple[int, bytes], int] = {}  # in the batch being built
        self._expire_before_us: int | None = None  # set by the reaper's tick
        # no stored id was seen before this (µs; 0: not known, as at the start: look)
        self._oldest_us: float = 0
        self.idle = True  # (Participant) until an id is remembered or ids expire

    def seen_at(self, topic_id: int, dedup_id: bytes) -> int | None:
        """When the topic last stored a message with this id (µs; None: never, or so
        long ago that it was let go)."""
        found = self._batch_ids.get((topic_id, dedup_id))
        if found is not None:
            return found
        stored = self.store.get(keyspace.dedup_key(topic_id, dedup_id))
        return None if stored is None else int(SEEN.unpack(stored)[0])

    def seen(self, topic_id: int, dedup_id: bytes, now_us: int, window_us: int) -> bool:
        """Whether the topic stored a message with this id within the window."""
        seen_us = self.seen_at(topic_id, dedup_id)
        return seen_us is not None and seen_us > now_us - window_us

    def in_batch(self, topic_id: int, dedup_id: bytes) -> bool:
        """Whether the id's message is in the batch being built (not yet written)."""
        return (topic_id, dedup_id) in self._batch_ids

    def remember(self, batch: Batch, topic_id: int, dedup_id: bytes, now_us: int,
                 seen_before: int | None) -> None:
        """The id's message is in ``batch``; ``seen_before`` is what seen_at said."""
        if seen_before is not None:  # seen before the window: its old age entry goes
            batch.delete(keyspace.dedup_age_key(seen_before, topic_id, dedup_id))
        batch.put(keyspace.dedup_key(topic_id, dedup_id), SEEN.pack(now_us))
        batch.put(keyspace.dedup_age_key(now_us, topic_id, dedup_id), b"")
        self._batch_ids[(topic_id, dedup_id)] = now_us
        self._oldest_us = min(self._oldest_us, now_us)
        self.idle = False

    def expire(self, before_us: int) -> None:
        """Let ids seen before ``before_us`` go, with the next batch (none is read
        while every stored id is known to be younger)."""
        if before_us <= self._oldest_us:
            return
        self._expire_before_us = before_us
        self.idle = False

    def prepare(self, batch: Batch) -> None:
        if self._expire_before_us is None:
            return
        expired, oldest = 0, math.inf  # (the index read to its end: no id left)
        for key, _ in self.store.iterate(keyspace.DEDUP_AGE_PREFIX, values=False):
            seen_us, topic_id, dedup_id = keyspace.split_dedup_age_key(key)
            if seen_us >= self._expire_before_us or expired >= EXPIRED_PER_BATCH:
                oldest = seen_us if expired < EXPIRED_PER_BATCH else 0
                break
            batch.delete(key)
            batch.delete(keyspace.dedup_key(topic_id, dedup_id))
            expired += 1
        # (this batch's own ids are not stored yet)
        self._oldest_us = min(oldest, *self._batch_ids.values(), math.inf)
        if expired < EXPIRED_PER_BATCH:
            self._expire_before_us = None  # else the next batch goes on

    def written(self) -> None:
        self._batch_ids.clear()
        self.idle = self._expire_before_us is None

    def failed(self) -> None:
        self._batch_ids.clear()
        self._oldest_us = 0  # the deletes were not written: not known
        self.idle = self._expire_before_us is None
