"""Marks ``a <group> <seq>``: the messages a group is done with (acked, dead or filtered
out) that other groups still hold. The last group done deletes the message and the
marks (see pzq.store.topics).

Marks are read on an ACK (is the message done for every other holder?) and when a
group reads on after a restart; a group with no mark as far as a seq has none there,
which the highest mark of each group, kept in memory, says without a read.
"""

from __future__ import annotations

from itertools import repeat
from operator import and_

from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store


class GroupMarks:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._marking: set[tuple[int, int]] = set()  # (group id, seq) marks in this batch
        self._highest: dict[int, int] = {}  # group id -> its highest mark's seq

    def is_done(self, group_id: int, seq: int) -> bool:
        if (group_id, seq) in self._marking:
            return True
        if seq > self.highest(group_id):  # no mark that far: no read
            return False
        return self.store.get(keyspace.group_done_key(group_id, seq)) is not None

    def highest(self, group_id: int) -> int:
        """The highest seq ``group_id`` has a mark for (-1: none); one seek per group
        and run, then kept as marks are made (a deleted mark leaves it an upper bound)."""
        found = self._highest.get(group_id)
        if found is None:
            found = -1
            for key, _ in self.store.iterate_reverse(keyspace.group_done_prefix(group_id)):
                found = keyspace.seq_at_end(key)
                break
            self._highest[group_id] = found
        return found

    def done_among(self, group_id: int, seqs: list[int]) -> set[int]:
        """Which of ``seqs`` (ascending) ``group_id`` is done with: one walk of its marks,
        none when it has no mark that far (a group reading new messages)."""
        if not seqs or seqs[0] > self.highest(group_id):
            return set()
        prefix = keyspace.group_done_prefix(group_id)
        done = {seq for seq in seqs if (group_id, seq) in self._marking}
        for key, _ in self.store.iterate(prefix, keyspace.group_done_key(group_id, seqs[0]),
                                         values=False):
            seq = keyspace.seq_at_end(key)
            if seq > seqs[-1]:
                break
            done.add(seq)
            if seq == seqs[-1]:
                break  # not on past deleted keys to find the end (see GroupArea.read)
        return done

    def done_by_all(self, group_ids: list[int], seqs: list[int]) -> list[bool]:
        """For each seq whether every one of ``group_ids`` is done with it: a read of
        each mark, made in C (an ACK's many), none past a group's highest mark."""
        done = [True] * len(seqs)
        for group_id in group_ids:
            done = list(map(and_, done, self._done_each(group_id, seqs)))
        return done

    def _done_each(self, group_id: int, seqs: list[int]) -> list[bool]:
        if not seqs or min(seqs) > self.highest(group_id):  # no mark that far
            return [False] * len(seqs)
        stored = self.store.get_all(self.keys(group_id, seqs))
        marking = self._marking
        return [value is not None or (group_id, seq) in marking
                for seq, value in zip(seqs, stored, strict=True)]

    @staticmethod
    def keys(group_id: int, seqs: list[int]) -> list[bytes]:
        """The mark keys of ``seqs`` for ``group_id``, made in C."""
        return list(map(keyspace.group_done_prefix(group_id).__add__,
                        map(keyspace.SEQ.pack, seqs)))

    def mark(self, batch: Batch, group_id: int, seq: int) -> None:
        batch.put(keyspace.group_done_key(group_id, seq), b"")
        self._marking.add((group_id, seq))
        self._highest[group_id] = max(self.highest(group_id), seq)

    def mark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """``mark`` of each seq, the keys made in C."""
        if not seqs:
            return
        batch.put_all(list(zip(self.keys(group_id, seqs), repeat(b""))))
        self._marking.update(zip(repeat(group_id), seqs))
        self._highest[group_id] = max(self.highest(group_id), max(seqs))

    def batch_ended(self) -> None:
        """Written (the marks are in the store) or failed (the delivery states redo
        the marks they still owe)."""
        self._marking = set()
