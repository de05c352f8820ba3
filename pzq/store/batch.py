"""The changes of one wake of the loop, and the parts whose memory follows them.

A Batch gathers every put and delete of a wake with the counter deltas they imply;
the Store (pzq.store.store) writes it with one write, the sequence high-water mark
and the counters beside it. A Participant registered with the store prepares each
batch (adds what earlier batches left to write), has a last word before the write,
and learns whether it was written or failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import plyvel

from pzq.bulk import each
from pzq.store import keyspace


class Participant:
    """A part whose in-memory state follows the store's batches (hooks do nothing
    unless overridden)."""

    # True while no hook but ``failed`` has anything to do: a batch asks it nothing.
    # A participant that keeps this sets it False as soon as it is given work (for
    # the next batch, or for this one's write) and True again once that is done.
    idle = False

    def prepare(self, batch: Batch) -> None:
        """Add to a new batch what earlier batches left to write."""

    def before_write(self) -> None:
        """Last chance before the write (e.g. fsync what must be durable first);
        raising a PzqError fails the batch."""

    def written(self) -> None:
        """The batch is in the store: apply what it changed."""

    def failed(self) -> None:
        """The batch was not written: keep what must be tried again."""


class Batch:
    """The changes of one wake: puts and deletes plus the counter deltas they imply."""

    def __init__(self, take_seq: Callable[[], int], take_seqs: Callable[[int], range],
                 raw: plyvel.WriteBatch, sync: bool) -> None:
        self._take_seq = take_seq  # the store's next sequence number
        self._take_seqs = take_seqs  # its next n
        self._batch = raw
        # a timed sync may make this batch durable: the one it starts, or the one
        # running (see Store.begin); under --hard-sync, every batch
        self.sync = sync
        self.message_delta = 0
        self.byte_delta = 0
        self.dead_delta = 0
        self.operations = 0

    def take_seq(self) -> int:
        """A new sequence number for a record kept outside the own messages (a
        scheduled message's, see pzq.store.scheduled)."""
        return self._take_seq()

    def add_message(self, value: bytes) -> int:
        """Store a new own message; returns its sequence number."""
        seq = self._take_seq()
        self._batch.put(keyspace.own_key(seq), value)
        self.message_delta += 1
        self.byte_delta += len(value)
        self.operations += 1
        return seq

    def add_messages(self, values: Sequence[bytes], size: int) -> range:
        """add_message for each value (``size``: their bytes together), the keys made
        and put in C; returns their sequence numbers."""
        seqs = self._take_seqs(len(values))
        each(self._batch.put, keyspace.own_keys_of_run(seqs), values)
        self.message_delta += len(values)
        self.byte_delta += size
        self.operations += len(values)
        return seqs

    def rewrite_message(self, seq: int, value: bytes) -> None:
        """Replace a stored message with the same length (delivery bookkeeping)."""
        self._batch.put(keyspace.own_key(seq), value)
        self.operations += 1

    def delete_message(self, seq: int, size: int) -> None:
        self._batch.delete(keyspace.own_key(seq))
        self.message_delta -= 1
        self.byte_delta -= size
        self.operations += 1

    def delete_messages(self, seqs: list[int], size: int) -> None:
        """delete_message for each seq (``size``: their bytes together), the counters
        changed once."""
        each(self._batch.delete, keyspace.own_keys(seqs))
        self.message_delta -= len(seqs)
        self.byte_delta -= size
        self.operations += len(seqs)

    def dead_letter(self, seq: int, value: bytes, stored_size: int) -> None:
        """Move an own message that was delivered too often to the dead letters."""
        self.delete_message(seq, stored_size)
        self.put(keyspace.dead_key(seq), value)
        self.dead_delta += 1

    def add_dead_letter(self, value: bytes) -> int:
        """A dead letter that was not one of this node's messages (a takeover's)."""
        seq = self._take_seq()
        self.put(keyspace.dead_key(seq), value)
        self.dead_delta += 1
        return seq

    def drop_dead_letter(self, seq: int) -> None:
        self.delete(keyspace.dead_key(seq))
        self.delete(keyspace.dead_reason_key(seq))
        self.dead_delta -= 1

    def put(self, key: bytes, value: bytes) -> None:
        """Any other area of the key layout (replicas, tombstones)."""
        self._batch.put(key, value)
        self.operations += 1

    def put_all(self, items: list[tuple[bytes, bytes]]) -> None:
        put = self._batch.put
        for key, value in items:
            put(key, value)
        self.operations += len(items)

    def put_many(self, keys: Iterable[bytes], values: Iterable[bytes], count: int) -> None:
        """put of each key with its value in step (``count`` of them), in C."""
        each(self._batch.put, keys, values)
        self.operations += count

    def delete(self, key: bytes) -> None:
        self._batch.delete(key)
        self.operations += 1

    def delete_keys(self, keys: list[bytes]) -> None:
        each(self._batch.delete, keys)
        self.operations += len(keys)

    def clear(self) -> None:
        """Empty again, once written: the store's next batch (none is made a wake)."""
        self._batch.clear()
        self.message_delta = self.byte_delta = self.dead_delta = self.operations = 0

    def write_with_metadata(self, next_seq: int, counters: bytes) -> None:
        """Write (Store.commit's job) with the metadata that moves with every batch."""
        self._batch.put(keyspace.META_NEXT_SEQ, keyspace.SEQ.pack(next_seq))
        self._batch.put(keyspace.META_COUNTERS, counters)
        self._batch.write()
