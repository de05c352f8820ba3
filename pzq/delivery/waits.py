"""The due times of a group's waiting deliveries, kept in the store, so that a NACK's
``DELAY:`` and a backoff's wait outlast a restart, a SIGTERM or a SIGKILL.

One key a waiting message of a group, ``W <group:4> <seq:8>``, its value the due µs,
rather than a key a group holding them all in blocks: a NACK with a delay then costs
one put in the batch it comes in, where a block would be a read, a change and a write
of the block each time (a busy group's NACKs rewriting the same block many times a
wake), and a restart reads the group's waits in one walk of its keys all the same, as
it reads its delivery counts (``c``).

A key is there exactly while its delivery waits in the state's ``delayed`` table (see
pzq.delivery.delayed): put as it goes in (a NACK's in the NACK's own batch, a
backoff's in the batch of the wake whose reaper found the deadline), deleted as it
leaves (its time came, an ACK, a REJECT, an expiry, an operator's delete or seek): a
later NACK or backoff puts the key again with its new due time. Nothing is written
for a message that never waits. At start the state takes each kept wait back into
its ``delayed`` table: one not due yet waits until its time, one whose time passed
goes at once; a key whose message the group is done with (a delete cut short by a
crash) goes then.

A taken-over area, and a replay's, keep none (``NO_WAITS``): a survivor that takes
over delivers a waiting message at once, as the copy carries no wait.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from pzq.hooks import nothing
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store

DUE = struct.Struct(">Q")  # a wait's value: when it is due, µs since the epoch
DELETE = -1  # an owed write that deletes the key (a due time is never negative)


def encode_due(due_us: int) -> bytes:
    return DUE.pack(due_us)


def decode_due(value: bytes) -> int:
    """A wait's due µs; ValueError for a value that is not one."""
    if len(value) != DUE.size:
        raise ValueError(f"a wait's value is {DUE.size} bytes, not {len(value)}")
    due_us: int = DUE.unpack(value)[0]
    return due_us


class KeptWaits:
    """The waits of one group's own messages (``group_id``: 0 is ``default``)."""

    def __init__(self, store: Store, group_id: int) -> None:
        self.store = store
        self.group_id = group_id
        self._prefix = keyspace.wait_prefix(group_id)  # a key: this and the seq
        self.stored: set[int] = set()  # seqs whose key is stored, or put by a batch owed
        self._owed: dict[int, int] = {}  # seq -> due µs (DELETE) for the next batch
        self._writing: dict[int, int] = {}  # ... in the batch being built (a failure's)
        # told whenever a write is owed or put in a batch (the state: not idle, so its
        # batch hooks are called)
        self.owing: Callable[[], None] = nothing

    def load(self) -> list[tuple[int, int]]:
        """(seq, due µs) of every wait kept, by seq; a value that is not a due time
        (no release writes one) is taken as due now."""
        found = []
        for key, value in self.store.iterate(self._prefix):
            seq = keyspace.seq_at_end(key)
            try:
                due_us = decode_due(value)
            except ValueError:
                due_us = 0
            self.stored.add(seq)
            found.append((seq, due_us))
        return found

    def keep(self, seq: int, due_us: int, batch: Batch | None = None) -> None:
        """The delivery waits until ``due_us``: its key put in ``batch`` (the one being
        built), else in the next one."""
        self.stored.add(seq)
        if batch is None:
            self._owed[seq] = due_us
        else:
            batch.put(self._prefix + keyspace.SEQ.pack(seq), DUE.pack(due_us))
            self._owed.pop(seq, None)  # (a delete owed from before: this put wins)
            self._writing[seq] = due_us
        self.owing()

    def end(self, seq: int, batch: Batch | None = None) -> None:
        """The delivery waits no more: its key deleted in ``batch``, else in the next."""
        if seq not in self.stored:
            return
        self.stored.discard(seq)
        if batch is None:
            self._owed[seq] = DELETE
        else:
            batch.delete(self._prefix + keyspace.SEQ.pack(seq))
            self._owed.pop(seq, None)
            self._writing[seq] = DELETE
        self.owing()

    def end_all(self, seqs: Iterable[int]) -> None:
        """``end`` of each, in the next batch."""
        for seq in seqs:
            self.end(seq)

    def end_below(self, target: int, batch: Batch) -> None:
        """``end`` of each below ``target``, in ``batch`` (a seek's: the group is done
        with them; the state lets them go after)."""
        for seq in [seq for seq in self.stored if seq < target]:
            self.end(seq, batch)

    def owes(self) -> bool:
        return bool(self._owed)

    def prepare(self, batch: Batch) -> None:
        """The writes owed into a new batch."""
        if not self._owed:
            return
        prefix, pack = self._prefix, keyspace.SEQ.pack
        for seq, due_us in self._owed.items():
            key = prefix + pack(seq)
            if due_us == DELETE:
                batch.delete(key)
            else:
                batch.put(key, DUE.pack(due_us))
        self._writing.update(self._owed)
        self._owed = {}

    def written(self) -> None:
        if self._writing:
            self._writing = {}

    def failed(self) -> None:
        """The batch's writes owed again (a later one of the same seq wins)."""
        if self._writing:
            self._owed = {**self._writing, **self._owed}
            self._writing = {}


class NoWaits:
    """An area whose waits are not kept (a takeover's, a replay's): kept in memory only."""

    stored: frozenset[int] = frozenset()
    owing: Callable[[], None] = nothing

    def load(self) -> list[tuple[int, int]]:
        return []

    def keep(self, seq: int, due_us: int, batch: Batch | None = None) -> None:
        pass

    def end(self, seq: int, batch: Batch | None = None) -> None:
        pass

    def end_all(self, seqs: Iterable[int]) -> None:
        pass

    def end_below(self, target: int, batch: Batch) -> None:
        pass

    def owes(self) -> bool:
        return False

    def prepare(self, batch: Batch) -> None:
        pass

    def written(self) -> None:
        pass

    def failed(self) -> None:
        pass


NO_WAITS = NoWaits()
Waits = KeptWaits | NoWaits
