"""Marks: the messages a group is done with (acked, dead or filtered out) that other
groups still hold. The last group done deletes the message and the marks (see
pzq.store.topics).

On disk a group's marks are blocks of MARK_BLOCK seqs, a bitmap each (pzq.store.keyspace,
format 4): a group's ACK of a run of messages writes the block or two the run falls in,
not a key a message, and the last group's ACK clears the run's bits in the other
groups' blocks (a block left empty is deleted). The blocks a batch changes are kept in
memory as ints as they are with the batch, so a run's bits are set or cleared with one
mask a block, made in C.

Marks are read on every ACK (is the message done for every other holder?) and when a
group reads on after a restart. Each group's marks are kept in memory as a set of
seqs, read from the store once (at the group's first question or mark) and changed
with the batch that writes them, so an ACK's questions are set lookups made in C, not
a read per key; a failed batch has them read again. A group with more than
MARKS_KEPT marks (one far ahead of a slow one) is asked in its blocks instead, a
look a seq; it is read again once its marks are down to half that (counted as they
are made and deleted).
"""

from __future__ import annotations

from functools import partial
from itertools import compress, repeat
from operator import and_, lshift, sub

from pzq.bulk import low_high
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.keyspace import MARK_BLOCK, MARK_BLOCK_OF
from pzq.store.store import Store

# A set of seqs costs about 74 bytes a mark: at most about 5 MB a group.
MARKS_KEPT = 65_536
SPAN_AT_ONCE = 1 << 16  # seqs a change spans at most for its masks made in one int
BLOCK_BITS = (1 << MARK_BLOCK) - 1
ONE_SHIFTED = partial(lshift, 1)  # 1 << n


class GroupMarks:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[int, set[int]] = {}  # group id -> the seqs of its marks
        self._unkept: dict[int, int] = {}  # groups with too many marks -> about how many
        # (group id, block's first seq) -> its bitmap as it is with this batch (never 0)
        self._blocks: dict[tuple[int, int], int] = {}

    def is_done(self, group_id: int, seq: int) -> bool:
        kept = self._kept_of(group_id)
        if kept is not None:
            return seq in kept
        first = seq & MARK_BLOCK_OF
        return bool(self._bits(group_id, first) >> (seq - first) & 1)

    def done_among(self, group_id: int, seqs: list[int]) -> set[int]:
        """Which of ``seqs`` ``group_id`` is done with."""
        kept = self._kept_of(group_id)
        if kept is not None:
            return kept.intersection(seqs)
        return set(compress(seqs, self._done_each(group_id, seqs)))

    def done_by_all(self, group_ids: list[int], seqs: list[int]) -> list[bool]:
        """For each seq whether every one of ``group_ids`` is done with it, made in C
        (an ACK's many). Where each group's marks are kept, mostly by a lookup or a
        few a group and no list or set made: the first groups to ACK find some other
        group done with none of the seqs (``isdisjoint``, which stops at a seq it has),
        the last finds every other done with all (``issuperset``, which stops at one
        missing); else the seqs all of them are done with are a set made by
        intersections, a lookup a seq."""
        if not seqs:
            return []
        kept_sets = []
        for group_id in group_ids:
            kept = self._kept_of(group_id)
            if kept is None:
                return self._done_by_all_each(group_ids, seqs)
            if kept.isdisjoint(seqs):
                return [False] * len(seqs)
            kept_sets.append(kept)
        if all(map(set.issuperset, kept_sets, repeat(seqs))):
            return [True] * len(seqs)
        common: set[int] | None = None
        for kept in kept_sets:
            common = kept.intersection(seqs) if common is None else common & kept
            if not common:
                return [False] * len(seqs)
        if common is None or len(common) == len(seqs):  # (each seq once, and done)
            return [True] * len(seqs)
        return list(map(common.__contains__, seqs))

    def _done_by_all_each(self, group_ids: list[int], seqs: list[int]) -> list[bool]:
        """``done_by_all`` a group at a time (some group's marks not kept)."""
        done = [True] * len(seqs)
        for group_id in group_ids:
            done = list(map(and_, done, self._done_each(group_id, seqs)))
        return done

    def _done_each(self, group_id: int, seqs: list[int]) -> list[bool]:
        kept = self._kept_of(group_id)
        if kept is not None:
            return list(map(kept.__contains__, seqs))
        return list(map(self.is_done, repeat(group_id), seqs))  # (many marks: a look each)

    def _bits(self, group_id: int, first: int) -> int:
        """The bitmap of the group's block from ``first``, as it is with this batch."""
        bits = self._blocks.get((group_id, first))
        if bits is None:
            stored = self.store.get(keyspace.mark_block_key(group_id, first))
            bits = 0 if stored is None else int.from_bytes(stored, "little")
        return bits

    def _kept_of(self, group_id: int) -> set[int] | None:
        """The group's marks in memory (read from the store the first time, its blocks
        with them); None: too many to keep, asked in the store."""
        kept = self._kept.get(group_id)
        if kept is None and group_id not in self._unkept:
            kept = set()
            for key, value in self.store.iterate(keyspace.group_done_prefix(group_id)):
                first = keyspace.seq_at_end(key)
                bits = self._blocks.setdefault((group_id, first), int.from_bytes(value, "little"))
                kept.update(keyspace.marked_seqs(first, bits))  # (as with this batch)
                if len(kept) > MARKS_KEPT:
                    self._unkept[group_id] = len(kept)  # (at least)
                    return None
            self._kept[group_id] = kept
        return kept

    def mark(self, batch: Batch, group_id: int, seq: int) -> None:
        self.mark_all(batch, group_id, [seq])

    def mark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """The group is done with ``seqs`` (others still hold them): their bits are set
        in the group's blocks, one write a block."""
        if not seqs:
            return
        kept = self._kept_of(group_id)  # (read before the blocks change)
        self._change(batch, group_id, seqs, True)
        if kept is not None:
            kept.update(seqs)  # past MARKS_KEPT: let go once written
        else:
            self._unkept[group_id] += len(seqs)

    def unmark(self, batch: Batch, group_id: int, seq: int) -> None:
        """The group's mark of ``seq`` goes (the message left, or is to go again)."""
        self.unmark_all(batch, group_id, [seq])

    def unmark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """``unmark`` of each seq: their bits cleared, one write a block."""
        self.unmark_groups(batch, [group_id], seqs)

    def unmark_groups(self, batch: Batch, group_ids: list[int], seqs: list[int]) -> None:
        """``unmark_all`` of the same seqs for each of ``group_ids`` (the other holders
        of messages that leave), their blocks' masks made once."""
        if not seqs:
            return
        masks = block_masks(seqs)
        for group_id in group_ids:
            kept = self._kept_of(group_id)
            self._change_masks(batch, group_id, masks, False)
            if kept is not None:
                kept.difference_update(seqs)
            else:
                self._unkept[group_id] -= len(seqs)

    def _change(self, batch: Batch, group_id: int, seqs: list[int], marked: bool) -> None:
        """The bits of ``seqs`` set (``marked``) or cleared in the group's blocks, each
        block changed written once (deleted when left empty)."""
        self._change_masks(batch, group_id, block_masks(seqs), marked)

    def _change_masks(self, batch: Batch, group_id: int, masks: list[tuple[int, int]],
                      marked: bool) -> None:
        """``_change`` by the blocks' masks (``block_masks``)."""
        blocks = self._blocks
        for first, mask in masks:
            old = self._bits(group_id, first)
            bits = old | mask if marked else old & ~mask
            if bits == old:
                continue
            key = keyspace.mark_block_key(group_id, first)
            if bits:
                blocks[group_id, first] = bits
                batch.put(key, keyspace.encode_bits(bits))
            else:
                blocks.pop((group_id, first), None)
                batch.delete(key)

    def written(self) -> None:
        """The batch's marks are stored; a group with too many lets its set go, one
        with few again is read at its next question."""
        if not self._kept and not self._unkept:  # (no named group has asked)
            return
        for group_id in [group_id for group_id, kept in self._kept.items()
                         if len(kept) > MARKS_KEPT]:
            self._unkept[group_id] = len(self._kept.pop(group_id))
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
        self._blocks = {}


def run_masks(low: int, count: int) -> list[tuple[int, int]]:
    """``block_masks`` of the ``count`` seqs from ``low`` on, a run: one shift, with no
    look at each seq (a batch's new messages)."""
    start = low & MARK_BLOCK_OF
    span = ((1 << count) - 1) << (low - start)
    return [(first, span >> (first - start) & BLOCK_BITS)
            for first in range(start, low + count, MARK_BLOCK)]


def ascending_masks(seqs: list[int]) -> list[tuple[int, int]]:
    """``block_masks`` of ascending seqs, each once (a read's, a batch's): a run's by
    ``run_masks``, without a look at each."""
    low = seqs[0]
    if seqs[-1] - low == len(seqs) - 1:
        return run_masks(low, len(seqs))
    return block_masks(seqs)


def block_masks(seqs: list[int]) -> list[tuple[int, int]]:
    """(block's first seq, the bits of ``seqs`` in it) for each block ``seqs`` fall in:
    one int over the span made in C (a run: one shift), cut a block at a time."""
    if len(seqs) == 1:  # (a message ACKed alone: its one bit, without the span's work)
        first = seqs[0] & MARK_BLOCK_OF
        return [(first, 1 << (seqs[0] - first))]
    low, high = low_high(seqs)
    if high - low >= SPAN_AT_ONCE:  # far apart: a block each, seq by seq
        masks: dict[int, int] = {}
        for seq in set(seqs):
            first = seq & MARK_BLOCK_OF
            masks[first] = masks.get(first, 0) | 1 << (seq - first)
        return sorted(masks.items())
    distinct = set(seqs)
    if len(distinct) == high - low + 1:
        span = (1 << len(distinct)) - 1  # a run: every seq from low to high
    else:
        span = sum(map(ONE_SHIFTED, map(sub, distinct, repeat(low))))
    start = low & MARK_BLOCK_OF
    span <<= low - start
    return [(first, span >> (first - start) & BLOCK_BITS)
            for first in range(start, high + 1, MARK_BLOCK)]
