"""Marks ``a <group> <seq>``: the messages a group is done with (acked, dead or filtered
out) that other groups still hold. The last group done deletes the message and the
marks (see pzq.store.topics).

Marks are read on every ACK (is the message done for every other holder?) and when a
group reads on after a restart. Each group's marks are kept in memory as a set of
seqs, read from the store once at the first question and changed as batches are
written, so an ACK's questions are set lookups made in C, not a read per key. A
group with more than MARKS_KEPT marks (one that ran far ahead of a slow one) is read
from the store instead, as a lookup per key, and with no mark as far as a seq has
none there, which its highest mark, kept in memory, says without a read.
"""

from __future__ import annotations

from itertools import compress, islice, repeat
from operator import and_, is_not, itemgetter, not_

from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store

# A set of seqs costs about 60 bytes a mark: past this many a group's marks are read
# from the store instead (until the node restarts or an operator's walk rereads them).
MARKS_KEPT = 200_000


class GroupMarks:
    def __init__(self, store: Store) -> None:
        self.store = store
        # group id -> seq -> marked (True) or its mark deleted (False), in this batch
        self._pending: dict[int, dict[int, bool]] = {}
        self._kept: dict[int, set[int]] = {}  # group id -> the seqs of its stored marks
        self._unkept: set[int] = set()  # groups with more than MARKS_KEPT marks
        self._highest: dict[int, int] = {}  # group id -> its highest mark's seq

    def is_done(self, group_id: int, seq: int) -> bool:
        pending = self._pending.get(group_id)
        if pending is not None and seq in pending:
            return pending[seq]
        kept = self._kept_of(group_id)
        if kept is not None:
            return seq in kept
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
        """Which of ``seqs`` (ascending) ``group_id`` is done with: from memory, or one
        walk of its marks, none when it has no mark that far (a group reading new
        messages)."""
        if self._kept_of(group_id) is not None:
            return set(compress(seqs, self._done_each(group_id, seqs)))
        if not seqs or seqs[0] > self.highest(group_id):
            return set()
        pending = self._pending.get(group_id, {})
        done = set(compress(pending, pending.values())).intersection(seqs)
        for key, _ in self.store.iterate(keyspace.group_done_prefix(group_id),
                                         keyspace.group_done_key(group_id, seqs[0]),
                                         values=False):
            seq = keyspace.seq_at_end(key)
            if seq > seqs[-1]:
                break
            if pending.get(seq, True):
                done.add(seq)
            if seq == seqs[-1]:
                break  # not on past deleted keys to find the end (see GroupArea.read)
        return done

    def done_by_all(self, group_ids: list[int], seqs: list[int]) -> list[bool]:
        """For each seq whether every one of ``group_ids`` is done with it, made in C
        (an ACK's many)."""
        done = [True] * len(seqs)
        for group_id in group_ids:
            done = list(map(and_, done, self._done_each(group_id, seqs)))
        return done

    def _done_each(self, group_id: int, seqs: list[int]) -> list[bool]:
        kept = self._kept_of(group_id)
        stored: list[bool]
        if kept is not None:
            stored = list(map(kept.__contains__, seqs))
        elif not seqs or min(seqs) > self.highest(group_id):  # no mark that far
            stored = [False] * len(seqs)
        else:
            stored = list(map(is_not, self.store.get_all(self.keys(group_id, seqs)),
                              repeat(None)))
        pending = self._pending.get(group_id)
        return list(map(pending.get, seqs, stored)) if pending else stored

    def _kept_of(self, group_id: int) -> set[int] | None:
        """The group's marks in memory (read from the store at the first question);
        None: too many to keep, read from the store."""
        kept = self._kept.get(group_id)
        if kept is None and group_id not in self._unkept:
            keys = self.store.iterate(keyspace.group_done_prefix(group_id), values=False)
            kept = set(map(keyspace.seq_at_end,
                           map(itemgetter(0), islice(keys, MARKS_KEPT + 1))))
            if len(kept) > MARKS_KEPT:
                self._unkept.add(group_id)
                return None
            self._kept[group_id] = kept
        return kept

    @staticmethod
    def keys(group_id: int, seqs: list[int]) -> list[bytes]:
        """The mark keys of ``seqs`` for ``group_id``, made in C."""
        return list(map(keyspace.group_done_prefix(group_id).__add__,
                        map(keyspace.SEQ.pack, seqs)))

    def mark(self, batch: Batch, group_id: int, seq: int) -> None:
        batch.put(keyspace.group_done_key(group_id, seq), b"")
        self._pending.setdefault(group_id, {})[seq] = True
        self._highest[group_id] = max(self.highest(group_id), seq)

    def mark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """``mark`` of each seq, the keys made in C."""
        if not seqs:
            return
        batch.put_all(list(zip(self.keys(group_id, seqs), repeat(b""))))
        self._pending.setdefault(group_id, {}).update(zip(seqs, repeat(True)))
        self._highest[group_id] = max(self.highest(group_id), max(seqs))

    def unmark(self, batch: Batch, group_id: int, seq: int) -> None:
        """The group's mark of ``seq`` goes (the message left, or is to go again)."""
        batch.delete(keyspace.group_done_key(group_id, seq))
        self._pending.setdefault(group_id, {})[seq] = False

    def unmark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """``unmark`` of each seq, the keys made in C."""
        if not seqs:
            return
        batch.delete_keys(self.keys(group_id, seqs))
        self._pending.setdefault(group_id, {}).update(zip(seqs, repeat(False)))

    def written(self) -> None:
        """The batch's marks are stored: the kept ones change with them, in C."""
        for group_id, pending in self._pending.items():
            kept = self._kept.get(group_id)
            if kept is None:
                continue
            kept.update(compress(pending, pending.values()))
            kept.difference_update(compress(pending, map(not_, pending.values())))
            if len(kept) > MARKS_KEPT:  # read from the store from now on
                del self._kept[group_id]
                self._unkept.add(group_id)
        self._pending = {}

    def batch_ended(self) -> None:
        """Written (applied already) or failed (the delivery states redo the marks
        they still owe)."""
        self._pending = {}

    def reread(self) -> None:
        """An operator's walk changed marks directly: each group's are read again at
        its next question."""
        self._kept = {}
        self._unkept = set()
        self._highest = {}
