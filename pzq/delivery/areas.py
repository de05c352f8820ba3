"""The store areas a DeliveryState can deliver from: this node's own messages, or
the replicas of a node that is down and whose delivery this node has taken over."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import NamedTuple, Protocol

from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.replicas import ReplicaStore
from pzq.store.store import Store
from pzq.store.topic_model import DEFAULT_GROUP_ID

# Keys one read walks at most, so a long run of messages the reader skips (done with,
# filtered out, another holder's) cannot stall the loop: the next read goes on from there.
LOOK_AT_MOST = 4096
SEQ_OF, VALUE_OF, VALUE_OF_TRIPLE = itemgetter(0), itemgetter(1), itemgetter(2)


class Chunk(NamedTuple):
    """What one read found (``seqs`` ascending, each with its record in ``values``), and
    where the next read starts. The reader looked at every message below ``next_seq``:
    a cursor moved there passes nothing it did not see. It may have found nothing while
    ``next_seq`` is still short of the end."""

    seqs: list[int]
    values: list[bytes]
    next_seq: int
    fresh: bool = False  # the reader saw that no record found has a delivery count

    @classmethod
    def of_pairs(cls, found: list[tuple[int, bytes]], next_seq: int) -> Chunk:
        """The chunk of a read that found (seq, record) pairs."""
        return cls(list(map(SEQ_OF, found)), list(map(VALUE_OF, found)), next_seq)

    @property
    def found(self) -> list[tuple[int, bytes]]:
        """(seq, record) of each message found (for a look at a few, not per message)."""
        return list(zip(self.seqs, self.values, strict=True))


class Area(Protocol):
    node_id: bytes  # the node whose message keys these are

    def end_seq(self) -> int: ...
    def read(self, start_seq: int, limit: int) -> Chunk: ...
    def delivered_below(self) -> int: ...
    def keep_delivered_below(self, batch: Batch, seq: int) -> None: ...
    def get(self, seq: int) -> bytes | None: ...
    def delete(self, batch: Batch, seq: int, size: int) -> None: ...
    def delete_all(self, batch: Batch, seqs: list[int], sizes: list[int],
                   ascending: bool = False) -> list[bool]: ...
    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None: ...
    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None: ...
    def group_names(self, seq: int) -> tuple[str, ...]: ...
    def group_names_all(self, seqs: list[int]) -> list[tuple[str, ...]]: ...
    def would_release(self, seq: int) -> bool: ...
    def would_release_all(self, seqs: list[int]) -> list[bool]: ...
    def holds(self, seq: int, value: bytes) -> bool: ...


def load_delivered_below(store: Store, group_id: int) -> int:
    stored = store.get(keyspace.delivered_key(group_id))
    return 0 if stored is None else int(keyspace.SEQ.unpack(stored)[0])


def delete_each(area: Area, batch: Batch, seqs: list[int], sizes: list[int]) -> list[bool]:
    """Area.delete_all one seq (and its size) at a time: for each, whether no group held
    it any more (asked before its delete)."""
    finals = []
    for seq, size in zip(seqs, sizes, strict=True):
        finals.append(area.would_release(seq))
        area.delete(batch, seq, size)
    return finals


def release_each(area: Area, seqs: list[int]) -> list[bool]:
    """Area.would_release_all one seq at a time."""
    return list(map(area.would_release, seqs))


def names_each(area: Area, seqs: list[int]) -> list[tuple[str, ...]]:
    """Area.group_names_all one seq at a time."""
    return list(map(area.group_names, seqs))


class OwnArea:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.node_id = store.node_id

    def end_seq(self) -> int:
        return self.store.next_seq

    def read(self, start_seq: int, limit: int) -> Chunk:
        found = self.store.read_own(start_seq, limit)
        if len(found) < limit:  # the walk reached the end
            return Chunk.of_pairs(found, max(start_seq, self.end_seq()))
        return Chunk.of_pairs(found, found[-1][0] + 1)

    def get(self, seq: int) -> bytes | None:
        return self.store.get_own(seq)

    def delivered_below(self) -> int:
        """Where ``default``'s first deliveries had gone when the node last wrote it."""
        return load_delivered_below(self.store, DEFAULT_GROUP_ID)

    def keep_delivered_below(self, batch: Batch, seq: int) -> None:
        batch.put(keyspace.delivered_key(DEFAULT_GROUP_ID), keyspace.SEQ.pack(seq))

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        batch.delete_message(seq, size)

    def delete_all(self, batch: Batch, seqs: list[int], sizes: list[int],
                   ascending: bool = False) -> list[bool]:
        """Each seq (of its size) deleted; for each, whether it left the store (always)."""
        batch.delete_messages(seqs, sum(sizes))
        return [True] * len(seqs)

    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None:
        batch.rewrite_message(seq, value)

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        batch.dead_letter(seq, value, len(value))

    def group_names(self, seq: int) -> tuple[str, ...]:
        """Consumer groups done with the message, for the archive (none: only default)."""
        return ()

    def group_names_all(self, seqs: list[int]) -> list[tuple[str, ...]]:
        """``group_names`` of each (an ACK's many, archived)."""
        return [()] * len(seqs)

    def would_release(self, seq: int) -> bool:
        """Whether being done with the message deletes it (no other group holds it)."""
        return True

    def would_release_all(self, seqs: list[int]) -> list[bool]:
        """``would_release`` of each (an ACK's many, archived)."""
        return [True] * len(seqs)

    def holds(self, seq: int, value: bytes) -> bool:
        """Whether the group holds a stored message and is not done with it (every own
        message, without named groups)."""
        return True


class TakeoverArea:
    """Replicas of a down node that this node is first in line to deliver, to one of
    the origin's groups: ``default`` (on --send-dsn) or a named group of ``topic`` (on
    --consume-dsn). A group reads only the copies it holds and is not done with; a
    copy goes when every group holding it is done (see ReplicaStore.group_done)."""

    def __init__(self, replicas: ReplicaStore, origin: bytes,
                 is_mine: Callable[[int, tuple[bytes, ...]], bool], group: str = DEFAULT_GROUP,
                 topic: str | None = None) -> None:
        self.replicas = replicas
        self.node_id = origin
        self.is_mine = is_mine
        self.group = group
        self.topic = topic  # None for ``default``, which reads across topics

    def end_seq(self) -> int:
        return self.replicas.end_seq(self.node_id)

    def read(self, start_seq: int, limit: int) -> Chunk:
        found, next_seq = self.replicas.read(self.node_id, start_seq, limit, self._serves,
                                             LOOK_AT_MOST)
        return Chunk(list(map(SEQ_OF, found)), list(map(VALUE_OF_TRIPLE, found)),
                     max(start_seq, self.end_seq()) if next_seq is None else next_seq)

    def _serves(self, seq: int, holders: tuple[bytes, ...], value: bytes) -> bool:
        return self.is_mine(seq, holders) and self._holds(seq, value)

    def _holds(self, seq: int, value: bytes) -> bool:
        return self.replicas.group_holds(self.node_id, seq, value, self.group, self.topic)

    def holds(self, seq: int, value: bytes) -> bool:
        return self._holds(seq, value)

    def get(self, seq: int) -> bytes | None:
        found = self.replicas.get(self.node_id, seq)
        if found is None or not self._holds(seq, found[1]):
            return None
        return found[1]

    def delivered_below(self) -> int:
        """How far the origin's first deliveries to this group had gone, as it last told
        (a copy below it was delivered there at least once)."""
        return self.replicas.delivered_below(self.node_id, self.group, self.topic)

    def keep_delivered_below(self, batch: Batch, seq: int) -> None:
        """The origin's numbering: its own figure is what counts when it returns."""

    def would_release(self, seq: int) -> bool:
        """Whether this group being done with the copy leaves no group holding it."""
        return self.replicas.would_release(self.node_id, seq, self.group)

    def would_release_all(self, seqs: list[int]) -> list[bool]:
        return release_each(self, seqs)

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        """Done with by this group. When ``default`` is the last, a tombstone tells the
        origin when it comes back (as before groups); any other group's done travels
        in a DONE frame (see ClusterCore.removed_taken_over)."""
        self.replicas.group_done(batch, self.node_id, seq, self.group,
                                 tombstone=self.group == DEFAULT_GROUP)

    def delete_all(self, batch: Batch, seqs: list[int], sizes: list[int],
                   ascending: bool = False) -> list[bool]:
        return delete_each(self, batch, seqs, sizes)

    def group_names(self, seq: int) -> tuple[str, ...]:
        """For the archive: the groups holding the copy (none named: only default)."""
        found = self.replicas.get(self.node_id, seq)
        holders = [] if found is None else self.replicas.holding_groups(self.node_id, seq,
                                                                         found[1])
        return () if holders in ([], [DEFAULT_GROUP]) else tuple(sorted(holders))

    def group_names_all(self, seqs: list[int]) -> list[tuple[str, ...]]:
        return names_each(self, seqs)

    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None:
        """Delivery bookkeeping of replicas stays in memory: the origin owns the record."""

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        """Given up while its origin is down: the group is done with it, as after an
        ACK, and the last group holding it keeps it in this node's own dead letters."""
        if self.would_release(seq):
            batch.add_dead_letter(value)
        self.delete(batch, seq, len(value))
