"""Marks ``a <group> <seq>``: the messages a group is done with (acked, dead or filtered
out) that other groups still hold. The last group done deletes the message and the
marks (see pzq.store.topics).

Marks are read on every ACK (is the message done for every other holder?) and when a
group reads on after a restart. Each group's marks are kept in memory as a set of
seqs, read from the store once (at the group's first question or mark) and changed
with the batch that writes them, so an ACK's questions are set lookups made in C, not
a read per key; a failed batch has them read again. A group with more than
MARKS_KEPT marks (one far ahead of a slow one) is asked in the store instead, a read
per key, none past its highest mark, which is kept in memory; it is read again once
its marks are down to half that (counted as they are made and deleted).
"""

from __future__ import annotations

from itertools import compress, islice, repeat
from operator import and_, is_not, itemgetter

from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store

# A set of seqs costs about 74 bytes a mark: at most about 5 MB a group.
MARKS_KEPT = 65_536


class GroupMarks:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[int, set[int]] = {}  # group id -> the seqs of its marks
        self._unkept: dict[int, int] = {}  # groups with too many marks -> about how many
        self._marking: set[tuple[int, int]] = set()  # (unkept group id, seq) in this batch
        self._highest: dict[int, int] = {}  # unkept group id -> its highest mark's seq

    def is_done(self, group_id: int, seq: int) -> bool:
        kept = self._kept_of(group_id)
        if kept is not None:
            return seq in kept
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
        """Which of ``seqs`` (ascending) ``group_id`` is done with: in memory, or one walk
        of its marks, none when it has no mark that far (a group reading new ones)."""
        kept = self._kept_of(group_id)
        if kept is not None:
            return kept.intersection(seqs)
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
        """For each seq whether every one of ``group_ids`` is done with it, made in C
        (an ACK's many)."""
        done = [True] * len(seqs)
        for group_id in group_ids:
            done = list(map(and_, done, self._done_each(group_id, seqs)))
        return done

    def _done_each(self, group_id: int, seqs: list[int]) -> list[bool]:
        kept = self._kept_of(group_id)
        if kept is not None:
            return list(map(kept.__contains__, seqs))
        if not seqs or min(seqs) > self.highest(group_id):  # no mark that far
            return [False] * len(seqs)
        stored = list(map(is_not, self.store.get_all(self.keys(group_id, seqs)), repeat(None)))
        if not self._marking:
            return stored
        marking = set(compress(seqs, map(self._marking.__contains__,
                                         zip(repeat(group_id), seqs))))
        return list(map(bool.__or__, stored, map(marking.__contains__, seqs)))

    def _kept_of(self, group_id: int) -> set[int] | None:
        """The group's marks in memory (read from the store the first time); None: too
        many to keep, asked in the store."""
        kept = self._kept.get(group_id)
        if kept is None and group_id not in self._unkept:
            keys = self.store.iterate(keyspace.group_done_prefix(group_id), values=False)
            kept = set(map(keyspace.seq_at_end,
                           map(itemgetter(0), islice(keys, MARKS_KEPT + 1))))
            if len(kept) > MARKS_KEPT:
                self._unkept[group_id] = len(kept)
                self._highest.pop(group_id, None)  # (may be from when it last had many)
                return None
            self._kept[group_id] = kept
        return kept

    @staticmethod
    def keys(group_id: int, seqs: list[int]) -> list[bytes]:
        """The mark keys of ``seqs`` for ``group_id``, made in C."""
        return list(map(keyspace.group_done_prefix(group_id).__add__,
                        map(keyspace.SEQ.pack, seqs)))

    def mark(self, batch: Batch, group_id: int, seq: int) -> None:
        self.mark_all(batch, group_id, [seq])

    def mark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """The group is done with ``seqs`` (others still hold them): their marks are
        written, the keys made in C."""
        if not seqs:
            return
        batch.put_all(list(zip(self.keys(group_id, seqs), repeat(b""))))
        kept = self._kept_of(group_id)
        if kept is not None:
            kept.update(seqs)  # past MARKS_KEPT: let go once written
        else:
            self._marking.update(zip(repeat(group_id), seqs))
            self._highest[group_id] = max(self.highest(group_id), max(seqs))
            self._unkept[group_id] += len(seqs)

    def unmark(self, batch: Batch, group_id: int, seq: int) -> None:
        """The group's mark of ``seq`` goes (the message left, or is to go again)."""
        self.unmark_all(batch, group_id, [seq])

    def unmark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """``unmark`` of each seq, the keys made in C."""
        if not seqs:
            return
        batch.delete_keys(self.keys(group_id, seqs))
        kept = self._kept_of(group_id)
        if kept is not None:
            kept.difference_update(seqs)
        else:
            self._unkept[group_id] -= len(seqs)
            if self._marking:
                self._marking.difference_update(zip(repeat(group_id), seqs))

    def written(self) -> None:
        """The batch's marks are stored; a group with too many lets its set go, one
        with few again is read at its next question."""
        self._marking = set()
        for group_id in [group_id for group_id, kept in self._kept.items()
                         if len(kept) > MARKS_KEPT]:
            self._unkept[group_id] = len(self._kept.pop(group_id))
            self._highest.pop(group_id, None)  # not kept while its marks were
        if self._unkept:
            for group_id in [group_id for group_id, count in self._unkept.items()
                             if count <= MARKS_KEPT // 2]:
                del self._unkept[group_id]

    def kept(self) -> int:
        """How many marks are kept in memory (of every group)."""
        return sum(map(len, self._kept.values()))

    def failed(self) -> None:
        """Nothing of the batch is stored (the delivery states redo the marks they still
        owe): what was changed in memory is read again."""
        self.reread()

    def reread(self) -> None:
        """Marks changed other than by this batch's calls (a failed batch, an operator's
        walk): each group's are read again at its next question."""
        self._kept = {}
        self._unkept = {}
        self._marking = set()
        self._highest = {}
