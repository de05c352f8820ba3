"""Replicas this node holds for other nodes, and tombstones of those acked here.

A replica's value is the list of its holders (node ids, in the origin's order)
followed by the origin's stored record. The holder order is the takeover rule
every node applies alone: the first live holder delivers while the origin is down.

Who reads each origin's topics (``DefaultReads``, sent by the origin in TOPICS) is
kept too, so a takeover serves each group (``default`` on --send-dsn, the named ones
on --consume-dsn) only the copies it holds, also after this node restarts while the
origin is down. A group done with a copy others still hold leaves a mark; the copy
goes when every group holding it is done. A group's done that comes before its copy
(a takeover node finished it while the origin, cut off, had not yet sent this node
its copy) is remembered, as a remove is, and marks the copy when it comes.

Counts per origin are kept in memory (counted once at start) and change only when
a batch that changed them has been written (the replica store is a batch participant).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from itertools import repeat

from pzq.bulk import each
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.protocol.cluster import DefaultReads, decode_default_reads
from pzq.protocol.headers import topic_and_tag
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.store import keyspace, record
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store

log = get_logger("pzq.cluster")

Holders = tuple[bytes, ...]
NO_READS = DefaultReads()
REMEMBERED_REMOVES = 100_000  # removes of copies not held yet, kept in case one comes
REMEMBERED_DONES = 100_000  # copies not held yet with groups' dones, kept for the copy
FORGOTTEN_SAID_EVERY_S = 60.0
NOT_IN_BATCH = object()  # a copy neither put nor deleted in the batch being built


def encode_holders(holders: Holders) -> bytes:
    return bytes([len(holders)]) + b"".join(holders)


def split_value(value: bytes) -> tuple[Holders, bytes]:
    """(holders, record) of a stored replica value."""
    if not value:
        raise DecodeError("empty replica value")
    count = value[0]
    end = 1 + count * keyspace.NODE_ID_LENGTH
    if len(value) < end:
        raise DecodeError("replica value is truncated")
    holders = tuple(value[1 + i * keyspace.NODE_ID_LENGTH:1 + (i + 1) * keyspace.NODE_ID_LENGTH]
                    for i in range(count))
    return holders, value[end:]


def decode_holders(blob: bytes) -> Holders:
    """A holder list as it travels in REPLICATE (nothing after it)."""
    holders, rest = split_value(blob)
    if rest:
        raise DecodeError("holder list has trailing bytes")
    return holders


class ReplicaStore(Participant):
    """Copies and tombstones, with the batch being built seen as if it were written:
    a copy added and removed in one wake, or removed twice, is counted once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.counts: defaultdict[bytes, int] = defaultdict(int)
        self.tombstones: defaultdict[bytes, int] = defaultdict(int)
        self._next_seq: defaultdict[bytes, int] = defaultdict(int)
        # The batch being built: copies put (their stored value) or deleted (None),
        # tombstones put (True) or deleted (False), and what that changes in the counts
        # once it is written.
        self._copies: dict[tuple[bytes, int], bytes | None] = {}
        self._tombs: dict[tuple[bytes, int], bool] = {}
        self._count_delta: defaultdict[bytes, int] = defaultdict(int)
        self._tomb_delta: defaultdict[bytes, int] = defaultdict(int)
        self._marks: dict[tuple[bytes, int], set[str]] = {}  # group marks in the batch
        # Removes that named a copy not (yet) here: a late REPLICATE of it is dropped.
        self._removed_early: OrderedDict[tuple[bytes, int], None] = OrderedDict()
        # Groups done with a copy not (yet) here (a survivor's DONE): the late copy
        # comes marked.
        self.early_dones: OrderedDict[tuple[bytes, int], set[str]] = OrderedDict()
        self._done_applied: dict[tuple[bytes, int], set[str]] = {}  # in the batch being built
        self.dones_forgotten = 0  # remembered dones dropped past REMEMBERED_DONES
        self._forgotten_said: float | None = None
        self.default_reads: dict[bytes, DefaultReads] = {}
        self._load()

    def _load(self) -> None:
        """Count what is held; a start-up pass, never repeated while running."""
        for store_key, _ in self.store.iterate(keyspace.REPLICA_PREFIX, values=False):
            origin, seq = keyspace.split_node_key(store_key)
            self.counts[origin] += 1
            self._next_seq[origin] = max(self._next_seq[origin], seq + 1)
        for store_key, _ in self.store.iterate(keyspace.TOMBSTONE_PREFIX, values=False):
            self.tombstones[keyspace.split_node_key(store_key)[0]] += 1
        for store_key, value in self.store.iterate(keyspace.READS_PREFIX):
            try:
                self.default_reads[store_key[1:]] = decode_default_reads(value)
            except DecodeError:
                pass  # unreadable: default reads everything until the origin says again

    def holds(self, origin: bytes, seq: int) -> bool:
        if (origin, seq) in self._copies:
            return self._copies[(origin, seq)] is not None
        return self.store.get(keyspace.replica_key(origin, seq)) is not None

    def _has_tombstone(self, origin: bytes, seq: int) -> bool:
        pending = self._tombs.get((origin, seq))
        if pending is not None:
            return pending
        return self.store.get(keyspace.tombstone_key(origin, seq)) is not None

    # -- batches -----------------------------------------------------------------

    def add(self, batch: Batch, origin: bytes, seq: int, holders: Holders,
            record_value: bytes) -> bool:
        """Hold a copy; False if it is held already or was removed before it came."""
        self._next_seq[origin] = max(self._next_seq[origin], seq + 1)
        if (origin, seq) in self._removed_early or self.holds(origin, seq):
            return False
        value = encode_holders(holders) + record_value
        batch.put(keyspace.replica_key(origin, seq), value)
        self._copies[(origin, seq)] = value
        self._count_delta[origin] += 1
        return True

    def mark_late_copies(self, batch: Batch, origin: bytes, seqs: Iterable[int]) -> None:
        """Copies just added that groups were done with before they came: marked
        (asked only while ``early_dones`` holds any)."""
        for seq in seqs:
            groups = self.early_dones.pop((origin, seq), None)
            if groups is None or self.get(origin, seq) is None:  # (removed before: dropped)
                continue
            self._done_applied[(origin, seq)] = groups  # remembered again if not written
            for group in sorted(groups):
                if self.group_done(batch, origin, seq, group, tombstone=False):
                    # Every group is done: a copy sent again later is dropped as well
                    self.remember_removed(origin, [seq])
                    break

    def remove(self, batch: Batch, origin: bytes, seq: int, tombstone: bool) -> bool:
        """Delete a copy if held; with ``tombstone``, remember the ack for the origin.
        A copy not held yet is remembered, so that it is dropped if it comes later."""
        if not self.holds(origin, seq):
            self.early_dones.pop((origin, seq), None)  # every group is done: a remove now
            self._removed_early[(origin, seq)] = None
            if len(self._removed_early) > REMEMBERED_REMOVES:
                self._removed_early.popitem(last=False)
            return False
        batch.delete(keyspace.replica_key(origin, seq))
        self._copies[(origin, seq)] = None
        self._count_delta[origin] -= 1
        self._drop_marks(batch, origin, seq)
        if tombstone:
            self.tombstone(batch, origin, seq)
        return True

    def remember_removed(self, origin: bytes, seqs: list[int]) -> None:
        """Copies removed (held or not): one that comes again later is dropped."""
        self._removed_early.update(zip(zip(repeat(origin), seqs), repeat(None)))
        if self.early_dones:
            each(self.early_dones.pop, zip(repeat(origin), seqs), repeat(None))
        while len(self._removed_early) > REMEMBERED_REMOVES:
            self._removed_early.popitem(last=False)

    def removed_before(self, origin: bytes, seq: int) -> bool:
        """Whether a remove named this copy before it came."""
        return (origin, seq) in self._removed_early

    def tombstone(self, batch: Batch, origin: bytes, seq: int) -> None:
        """Remember, for the origin's return, that its message was done with here
        (acked, or a scheduled copy released in a takeover)."""
        if not self._has_tombstone(origin, seq):
            batch.put(keyspace.tombstone_key(origin, seq), b"")
            self._tombs[(origin, seq)] = True
            self._tomb_delta[origin] += 1

    def remove_all(self, batch: Batch, origin: bytes, seqs: list[int], tombstone: bool) -> None:
        """``remove`` of each seq: in bulk (the keys made, looked up and deleted in C)
        when every copy is here and no tombstone or group mark is involved; else one
        by one."""
        reads = self.default_reads.get(origin)
        if tombstone or (reads is not None and reads.groups) or len(set(seqs)) < len(seqs):
            self._remove_each(batch, origin, seqs, tombstone)
            return
        pending = [(origin, seq) for seq in seqs]
        store_keys = list(map(keyspace.replica_prefix(origin).__add__,
                              map(keyspace.SEQ.pack, seqs)))
        # What the batch being built says of each (a value, or None: deleted in it);
        # the store for the others.
        found: list[object] = list(map(self._copies.get, pending, repeat(NOT_IN_BATCH)))
        if NOT_IN_BATCH in found:
            stored = self.store.get_all(store_keys)
            found = [value if in_batch is NOT_IN_BATCH else in_batch
                     for in_batch, value in zip(found, stored, strict=True)]
        if None in found:  # some not here (yet): remembered one by one
            self._remove_each(batch, origin, seqs, tombstone)
            return
        batch.delete_keys(store_keys)
        self._copies.update(zip(pending, repeat(None)))
        self._count_delta[origin] -= len(seqs)
        each(self._marks.pop, pending, repeat(None))  # (no groups: no marks stored)

    def _remove_each(self, batch: Batch, origin: bytes, seqs: list[int],
                     tombstone: bool) -> None:
        for seq in seqs:
            self.remove(batch, origin, seq, tombstone)

    def describe_topics(self, batch: Batch, origin: bytes, reads: DefaultReads) -> None:
        """The origin said what ``default`` reads of its topics: kept from now on."""
        if self.default_reads.get(origin) != reads:
            self.default_reads[origin] = reads
            batch.put(keyspace.reads_key(origin), reads.encode())

    # -- groups ---------------------------------------------------------------------

    def topic_of(self, origin: bytes, record_value: bytes) -> tuple[str, bytes] | None:
        """The copy's topic and tag, as its origin names them (None: unreadable)."""
        reads = self.default_reads.get(origin, NO_READS)
        try:
            return topic_and_tag(record.headers_of(record_value), reads.default_topic)
        except (DecodeError, ValueError):
            return None

    def holding_groups(self, origin: bytes, seq: int, record_value: bytes) -> list[str]:
        """The origin's groups that hold this copy (``default`` per what it reads)."""
        reads = self.default_reads.get(origin)
        about = self.topic_of(origin, record_value) if reads is not None else None
        if reads is None or about is None:
            return [DEFAULT_GROUP]  # cannot say its topic: delivered, not left behind
        return reads.holders(about[0], seq, about[1])

    def group_holds(self, origin: bytes, seq: int, record_value: bytes, group: str,
                    topic: str | None = None) -> bool:
        """Whether ``group`` (of ``topic``, when named) holds this copy and is not done
        with it yet."""
        if topic is not None:
            about = self.topic_of(origin, record_value)
            if about is None or about[0] != topic:
                return False
        return (group in self.holding_groups(origin, seq, record_value)
                and not self.is_done(origin, seq, group))

    def delivered_below(self, origin: bytes, group: str, topic: str | None) -> int:
        """How far the origin's first deliveries to ``group`` had gone, as it last said
        (0: never said)."""
        reads = self.default_reads.get(origin, NO_READS)
        if topic is None:
            return reads.delivered_below
        found = reads.group(topic, group)
        return 0 if found is None else found.delivered_below

    def is_done(self, origin: bytes, seq: int, group: str) -> bool:
        if group in self._marks.get((origin, seq), ()):
            return True
        return self.store.get(keyspace.replica_done_key(origin, seq, group)) is not None

    def would_release(self, origin: bytes, seq: int, group: str) -> bool:
        """Whether ``group`` being done with the copy leaves no group holding it."""
        found = self.get(origin, seq)
        return found is not None and self._last(origin, seq, found[1], group)

    def _last(self, origin: bytes, seq: int, record_value: bytes, group: str) -> bool:
        return all(holder == group or self.is_done(origin, seq, holder)
                   for holder in self.holding_groups(origin, seq, record_value))

    def group_done(self, batch: Batch, origin: bytes, seq: int, group: str,
                   tombstone: bool, remember_at: float | None = None) -> bool:
        """``group`` is done with the copy: mark it, or drop the copy when every group
        holding it is done (``tombstone`` as in ``remove``). True when dropped. With
        ``remember_at`` (now, monotonic seconds), a copy not here yet is marked when
        it comes."""
        found = self.get(origin, seq)
        if found is None:  # gone, or not here yet (then held for every group: at least once)
            if remember_at is not None and (origin, seq) not in self._removed_early:
                self._remember_done(origin, seq, group, remember_at)
            return False
        if self._last(origin, seq, found[1], group):
            return self.remove(batch, origin, seq, tombstone)
        batch.put(keyspace.replica_done_key(origin, seq, group), b"")
        self._marks.setdefault((origin, seq), set()).add(group)
        return False

    def _remember_done(self, origin: bytes, seq: int, group: str, now: float) -> None:
        groups = self.early_dones.get((origin, seq))
        if groups is not None:
            groups.add(group)
            return
        self.early_dones[(origin, seq)] = {group}
        if len(self.early_dones) > REMEMBERED_DONES:
            self.early_dones.popitem(last=False)
            self.dones_forgotten += 1
            if (self._forgotten_said is None
                    or now - self._forgotten_said >= FORGOTTEN_SAID_EVERY_S):
                self._forgotten_said = now
                # A copy that comes later is served to that group again (at least once)
                log.warning("early_dones_forgotten", total=self.dones_forgotten,
                            limit=REMEMBERED_DONES)

    def _drop_marks(self, batch: Batch, origin: bytes, seq: int) -> None:
        """The copy goes: so do its groups' marks (only an origin with groups has any),
        those of the batch being built too."""
        for group in self._marks.pop((origin, seq), ()):
            batch.delete(keyspace.replica_done_key(origin, seq, group))
        reads = self.default_reads.get(origin)
        if reads is None or not reads.groups:
            return
        for store_key, _ in self.store.iterate(keyspace.replica_done_prefix(origin, seq),
                                               values=False):
            batch.delete(store_key)

    def drop_tombstones(self, batch: Batch, origin: bytes, seqs: Iterable[int]) -> None:
        for seq in seqs:
            if self._has_tombstone(origin, seq):
                batch.delete(keyspace.tombstone_key(origin, seq))
                self._tombs[(origin, seq)] = False
                self._tomb_delta[origin] -= 1

    def written(self) -> None:
        """The batch holding the pending changes was written: count them."""
        for counts, deltas in ((self.counts, self._count_delta),
                               (self.tombstones, self._tomb_delta)):
            for origin, delta in deltas.items():
                counts[origin] += delta
        self._done_applied.clear()
        self.failed()

    def failed(self) -> None:
        if self._done_applied:  # the copies they marked were not written: wait again
            self.early_dones.update(self._done_applied)
            self._done_applied.clear()
        for pending in (self._copies, self._tombs, self._count_delta, self._tomb_delta,
                        self._marks):
            pending.clear()

    # -- reads ---------------------------------------------------------------------

    def origins(self) -> list[bytes]:
        return [origin for origin, count in self.counts.items() if count > 0]

    def end_seq(self, origin: bytes) -> int:
        return self._next_seq[origin]

    def holds_between(self, origin: bytes, first: int, end: int) -> bool:
        """Whether a copy of the origin with a seq in [first, end) is stored (one seek;
        the batch being built is not looked at)."""
        return self.store.any_between(keyspace.replica_key(origin, first),
                                      keyspace.replica_key(origin, end))

    def get(self, origin: bytes, seq: int) -> tuple[Holders, bytes] | None:
        """The copy, as the batch being built leaves it: a DONE read in the wake that
        brought its copy marks that copy, not a copy "not here yet"."""
        if (origin, seq) in self._copies:
            value = self._copies[(origin, seq)]
        else:
            value = self.store.get(keyspace.replica_key(origin, seq))
        return None if value is None else split_value(value)

    def read(self, origin: bytes, start_seq: int, limit: int,
             wanted: Callable[[int, Holders, bytes], bool], look_at_most: int,
             ) -> tuple[list[tuple[int, Holders, bytes]], int | None]:
        """Up to ``limit`` replicas of ``origin`` from ``start_seq`` that ``wanted``
        accepts, looking at no more than ``look_at_most``; with the seq the next read
        starts at (None: this one reached the last replica)."""
        found = []
        looked = 0
        for store_key, value in self.store.iterate(keyspace.replica_prefix(origin),
                                                   keyspace.replica_key(origin, start_seq)):
            holders, record_value = split_value(value)
            seq = keyspace.split_node_key(store_key)[1]
            looked += 1
            if wanted(seq, holders, record_value):
                found.append((seq, holders, record_value))
            if len(found) >= limit or looked >= look_at_most:
                return found, seq + 1
        return found, None

    def tombstone_seqs(self, origin: bytes, limit: int) -> list[int]:
        return [keyspace.split_node_key(key)[1]
                for key, _ in self.store.scan(keyspace.tombstone_prefix(origin), limit=limit)]
