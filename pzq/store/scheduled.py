"""Scheduled messages: stored and ACKed at once, delivered to no group before their time.

A message whose ``DELAY:`` or ``NOT-BEFORE:`` (pzq.protocol.time_headers) puts its due
time in the future is kept outside the areas the groups read, under ``w <topic> <due
µs:8> <seq:8>`` with its record as produced, so the groups' cursors never meet it and
the live path pays nothing for it: each topic's keys sort by due time, then arrival,
and a topic's next due time is its first key (one seek after a batch changed the
topic's scheduled messages, none otherwise). When due, the node releases it
(pzq.node.release): in one batch the record becomes a new own message, with a fresh
seq that every cursor meets in order, and its scheduled key is deleted. How many
each topic has waiting rides along with the batches (``Z <topic>``), as every count
does: nothing is counted by a scan, and memory holds two numbers per topic with
scheduled messages, whatever their number. ``v <seq:8>`` leads from a seq to its
key: a peer that released the message in a takeover (pzq.node.copy_release) names
the seq alone, and the message is then dropped here (``drop``), not released again.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from pzq.hooks import nothing
from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store

COUNT = keyspace.SEQ  # a topic's scheduled messages


class Due:
    """A scheduled message that is due: its key, topic and record."""

    __slots__ = ("key", "topic", "value", "due_us", "seq")

    def __init__(self, key: bytes, topic: str, value: bytes) -> None:
        self.key, self.topic, self.value = key, topic, value
        self.due_us, self.seq = keyspace.split_scheduled_key(key)


class ScheduledArea(Participant):
    def __init__(self, store: Store) -> None:
        self.store = store
        self.counts: dict[str, int] = {}  # topic -> messages waiting (as written)
        for key, value in store.iterate(keyspace.SCHEDULED_COUNT_PREFIX):
            self.counts[key[1:].decode()] = COUNT.unpack(value)[0]
        self._next: dict[str, int] = {}  # topic -> its earliest due µs (looked up once)
        self._deltas: dict[str, int] = {}  # this batch's changes
        self._gone: set[bytes] = set()  # keys this batch deletes (not released twice)
        self._batch: Batch | None = None
        self.on_change: Callable[[], None] = nothing  # told when a batch changed the times
        self.idle = True  # (Participant) until a batch adds or deletes one

    @property
    def waiting(self) -> int:
        return sum(self.counts.values())

    def next_due_us(self, topic: str | None = None) -> int | None:
        """When the topic's (or any topic's) earliest scheduled message is due (µs;
        None: none waits)."""
        topics = self.counts if topic is None else [topic] if topic in self.counts else []
        if not topics:  # (the common case, asked every wake)
            return None
        return min(map(self._first_due, topics))

    def _first_due(self, topic: str) -> int:
        found = self._next.get(topic)
        if found is None:
            found = 0  # counted but gone (cannot be: the counts move with the keys)
            for key, _ in self.store.iterate(keyspace.scheduled_prefix(topic), values=False):
                found = keyspace.split_scheduled_key(key)[0]
                break
            self._next[topic] = found
        return found

    def add(self, batch: Batch, topic: str, due_us: int, seq: int, value: bytes) -> None:
        key = keyspace.scheduled_key(topic, due_us, seq)
        batch.put(key, value)
        batch.put(keyspace.scheduled_seq_key(seq), key)
        self._deltas[topic] = self._deltas.get(topic, 0) + 1
        self._batch = batch
        self.idle = False

    def due(self, now_us: int, limit: int) -> list[Due]:
        """Up to ``limit`` messages due at ``now_us``, every topic's, in due-time order,
        then arrival order."""
        walks = [self._due_of(topic, now_us, limit) for topic in self.counts
                 if self._first_due(topic) <= now_us]
        merged = heapq.merge(*walks, key=lambda due: (due.due_us, due.seq))
        return [due for due, _ in zip(merged, range(limit), strict=False)]

    def _due_of(self, topic: str, now_us: int, limit: int) -> list[Due]:
        """Up to ``limit`` of the topic's due messages (a range read that stops at the
        first one not due)."""
        stop = keyspace.scheduled_key(topic, now_us + 1, 0)
        found: list[Due] = []
        for key, value in self.store.iterate(keyspace.scheduled_prefix(topic)):
            if key >= stop or len(found) >= limit:
                break
            if key not in self._gone:
                found.append(Due(key, topic, value))
        return found

    def released(self, batch: Batch, due: Due) -> None:
        self._delete(batch, due.key, due.topic, due.seq)

    def drop(self, batch: Batch, seq: int) -> bool:
        """A peer released the message while this node was down: it goes without a
        release here. False: no scheduled message has that seq."""
        key = self.store.get(keyspace.scheduled_seq_key(seq))
        if key is None or key in self._gone:
            return False
        topic = key[2:2 + key[1]].decode()
        self._delete(batch, key, topic, seq)
        return True

    def _delete(self, batch: Batch, key: bytes, topic: str, seq: int) -> None:
        batch.delete(key)
        batch.delete(keyspace.scheduled_seq_key(seq))
        self._gone.add(key)
        self._deltas[topic] = self._deltas.get(topic, 0) - 1
        self._batch = batch
        self.idle = False

    # -- batches -------------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        self._batch = batch

    def before_write(self) -> None:
        """The counts go with the batch that changed them."""
        if self._batch is None:
            return
        for topic, change in self._deltas.items():
            left = self.counts.get(topic, 0) + change
            key = keyspace.scheduled_count_key(topic)
            if left > 0:
                self._batch.put(key, COUNT.pack(left))
            else:
                self._batch.delete(key)

    def written(self) -> None:
        if not self._deltas and not self._gone:  # a batch that scheduled nothing
            self._batch = None
            self.idle = True
            return
        for topic, change in self._deltas.items():
            left = self.counts.get(topic, 0) + change
            if left > 0:
                self.counts[topic] = left
            else:
                self.counts.pop(topic, None)
            self._next.pop(topic, None)  # looked up again when asked
        self.failed()
        self.on_change()

    def failed(self) -> None:
        self._deltas = {}
        self._gone = set()
        self._batch = None
        self.idle = True
