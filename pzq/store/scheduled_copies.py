"""Other nodes' scheduled messages held here as copies until their origin releases them.

A peer copies its scheduled message (DELAY:, NOT-BEFORE:) when it stores it, with its
due time as the origin fixed it (absolute µs). The copy waits under ``x <origin>
<due µs:8> <seq:8>`` (holders and record, as a replica's value), in due-time order,
and ``y <origin> <seq:8>`` holds its due time, because a remove names the seq alone.
Nobody delivers it here: when the origin releases it, the message comes as a new
copy (pzq.store.replicas) and a remove drops this one. Only a node that took the
origin over reads the index (pzq.cluster.scheduled_takeover), up to now, so no wake
scans the copies.

The counts per origin are counted once at start (as the replicas are) and move with
the batches that change them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator

from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.replicas import Holders, encode_holders, split_value
from pzq.store.store import Store

DUE = keyspace.SEQ


class HeldCopy:
    """A scheduled copy that is due: its origin, due time, seq, holders and record."""

    __slots__ = ("origin", "due_us", "seq", "holders", "value")

    def __init__(self, origin: bytes, due_us: int, seq: int, holders: Holders,
                 value: bytes) -> None:
        self.origin, self.due_us, self.seq = origin, due_us, seq
        self.holders, self.value = holders, value

    @property
    def key(self) -> bytes:
        return keyspace.scheduled_copy_key(self.origin, self.due_us, self.seq)


class ScheduledCopies(Participant):
    def __init__(self, store: Store, removed_before: Callable[[bytes, int], bool]) -> None:
        """``removed_before``: whether a remove named this copy before it came (the
        replicas remember those); such a copy is dropped as it comes."""
        self.store = store
        self.removed_before = removed_before
        self.counts: defaultdict[bytes, int] = defaultdict(int)
        for key, _ in store.iterate(keyspace.SCHEDULED_COPY_SEQ_PREFIX, values=False):
            self.counts[keyspace.split_node_key(key)[0]] += 1  # a start-up pass
        self.changes = 0  # batches written that changed the copies
        self._pending: dict[tuple[bytes, int], bool] = {}  # put (True) or deleted here
        self._delta: defaultdict[bytes, int] = defaultdict(int)

    @property
    def held(self) -> int:
        return sum(self.counts.values())

    def holds(self, origin: bytes, seq: int) -> bool:
        pending = self._pending.get((origin, seq))
        if pending is not None:
            return pending
        return self.store.get(keyspace.scheduled_copy_seq_key(origin, seq)) is not None

    def holds_between(self, origin: bytes, first: int, end: int) -> bool:
        """Whether a scheduled copy of the origin with a seq in [first, end) is stored
        (one seek when it has any)."""
        return bool(self.counts.get(origin)) and self.store.any_between(
            keyspace.scheduled_copy_seq_key(origin, first),
            keyspace.scheduled_copy_seq_key(origin, end))

    def add(self, batch: Batch, origin: bytes, seq: int, due_us: int, holders: Holders,
            record_value: bytes) -> bool:
        """Hold a copy; False when it is held already or was removed before it came."""
        if self.removed_before(origin, seq) or self.holds(origin, seq):
            return False
        batch.put(keyspace.scheduled_copy_key(origin, due_us, seq),
                  encode_holders(holders) + record_value)
        batch.put(keyspace.scheduled_copy_seq_key(origin, seq), DUE.pack(due_us))
        self._pending[(origin, seq)] = True
        self._delta[origin] += 1
        return True

    def remove(self, batch: Batch, origin: bytes, seq: int) -> bool:
        """Drop the copy (its origin, or a node that took it over, released it); False
        when none is held."""
        if self._pending.get((origin, seq)) is False:
            return False
        found = self.store.get(keyspace.scheduled_copy_seq_key(origin, seq))
        if found is None:
            return False
        self._delete(batch, origin, DUE.unpack(found)[0], seq)
        return True

    def remove_any(self, batch: Batch, origin: bytes,
                   seqs: list[int]) -> tuple[list[int], list[int]]:
        """Drop whichever of ``seqs`` are scheduled copies held of ``origin``; returns
        (those dropped, the others). Nothing is read when none of its copies is held
        or coming: the common case of a REMOVE of ordinary copies costs no lookup."""
        if not self.counts.get(origin) and not self._delta.get(origin):
            return [], seqs
        dropped: list[int] = []
        others: list[int] = []
        for seq in seqs:
            (dropped if self.remove(batch, origin, seq) else others).append(seq)
        return dropped, others

    def released(self, batch: Batch, copy: HeldCopy) -> None:
        self._delete(batch, copy.origin, copy.due_us, copy.seq)

    def _delete(self, batch: Batch, origin: bytes, due_us: int, seq: int) -> None:
        batch.delete(keyspace.scheduled_copy_key(origin, due_us, seq))
        batch.delete(keyspace.scheduled_copy_seq_key(origin, seq))
        self._pending[(origin, seq)] = False
        self._delta[origin] -= 1

    # -- the index, for a node that took the origin over ----------------------------------

    def due(self, origin: bytes, now_us: int, limit: int, after: bytes = b"",
            ) -> list[HeldCopy]:
        """Up to ``limit`` of the origin's copies due at ``now_us`` (after the key
        ``after``), in due-time order, then arrival order: a range read that stops at
        the first one not due."""
        stop = keyspace.scheduled_copy_key(origin, now_us + 1, 0)
        found: list[HeldCopy] = []
        for key, value in self._walk(origin, after):
            if key >= stop or len(found) >= limit:
                break
            due_us, seq = keyspace.split_scheduled_key(key)
            if self._pending.get((origin, seq)) is not False:
                holders, record_value = split_value(value)
                found.append(HeldCopy(origin, due_us, seq, holders, record_value))
        return found

    def next_due_us(self, origin: bytes, after: bytes = b"") -> int | None:
        """When the origin's first copy (after the key ``after``) is due; one seek."""
        for key, _ in self._walk(origin, after, values=False):
            return keyspace.split_scheduled_key(key)[0]
        return None

    def _walk(self, origin: bytes, after: bytes, values: bool = True,
              ) -> Iterator[tuple[bytes, bytes]]:
        start = after + b"\x00" if after else None
        return self.store.iterate(keyspace.scheduled_copy_prefix(origin), start,
                                  values=values)

    # -- batches -----------------------------------------------------------------------

    def written(self) -> None:
        if self._delta:
            self.changes += 1
        for origin, delta in self._delta.items():
            self.counts[origin] += delta
            if self.counts[origin] <= 0:
                del self.counts[origin]
        self.failed()

    def failed(self) -> None:
        self._pending.clear()
        self._delta.clear()
