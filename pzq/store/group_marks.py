"""Marks: the messages a group is done with (acked, dead or filtered out) that other
groups still hold. The last group done deletes the message and the marks (see
pzq.store.topics).

On disk a group's marks are blocks of MARK_BLOCK seqs, a bitmap each (pzq.store.keyspace,
format 4): a group's ACK of a run of messages writes the block or two the run falls in,
not a key a message, and the last group's ACK clears the run's bits in the other
groups' blocks (a block left empty is deleted).

Marks are read on every ACK (is the message done for every other holder?) and when a
group reads on after a restart. Each group's marks are kept in memory as they are on
disk, its blocks as ints (read from the store once, at the group's first question or
mark, and changed with the batch that writes them; a failed batch has them read
again): an ACK's seqs are cut into their blocks' masks once (``block_masks``, made in
C), and a question of them is a mask test a block, a mark or an unmark one ``|`` or
``& ~`` a block, not a set's add and remove a seq. A group with more than MARKS_KEPT
marks (one far ahead of a slow one) is asked in its blocks in the store instead, a
read a block; it is read again once its marks are down to half that (counted as its
bits are set and cleared).
"""

from __future__ import annotations

from functools import partial
from itertools import repeat
from operator import and_, itemgetter, lshift, sub

from pzq.bulk import low_high
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.keyspace import MARK_BLOCK, MARK_BLOCK_OF
from pzq.store.store import Store

# A kept block costs some 200 bytes (its int and dict entry) for up to MARK_BLOCK
# marks: a group's marks kept are at most some 13 MB when each block has one.
MARKS_KEPT = 65_536
SPAN_AT_ONCE = 1 << 16  # seqs a change spans at most for its masks made in one int
BLOCK_BITS = (1 << MARK_BLOCK) - 1
ONE_SHIFTED = partial(lshift, 1)  # 1 << n

Masks = list[tuple[int, int]]  # (block's first seq, bits of some seqs in it): block_masks
FIRST_OF, MASK_OF = itemgetter(0), itemgetter(1)  # of a Masks' pair, in C


class GroupMarks:
    def __init__(self, store: Store) -> None:
        self.store = store
        # group id -> every block of its marks (first seq -> bitmap, never 0), as with
        # this batch; and how many marks each has
        self._kept: dict[int, dict[int, int]] = {}
        self._counts: dict[int, int] = {}
        self._unkept: dict[int, int] = {}  # groups with too many marks -> about how many
        # a group not kept -> its blocks changed (first seq -> bitmap, 0: deleted), as
        # with this batch (the store has them once it is written)
        self._changed: dict[int, dict[int, int]] = {}

    def is_done(self, group_id: int, seq: int) -> bool:
        first = seq & MARK_BLOCK_OF
        return bool(self._bits(group_id, first) >> (seq - first) & 1)

    def done_among(self, group_id: int, seqs: list[int], ascending: bool = False) -> set[int]:
        """Which of ``seqs`` ``group_id`` is done with. ``ascending``: the seqs are
        ascending, each once (a read's), and mostly the group is done with none of
        them: its blocks over their span are asked first, with no look at each seq."""
        if not seqs:
            return set()
        if not ascending or seqs[-1] - seqs[0] >= SPAN_AT_ONCE:
            # (far apart, as across a restored node's skip of 2**48 seqs: one int over
            # the span would not fit in memory)
            masks = block_masks(seqs)
            firsts = list(map(FIRST_OF, masks))
            return marked_in(firsts, list(map(and_, map(MASK_OF, masks),
                                              self._blocks_at(group_id, firsts))))
        low, high = seqs[0], seqs[-1]
        first = low & MARK_BLOCK_OF
        kept = self._kept_of(group_id)
        if (kept is not None and high - first < MARK_BLOCK  # (one block: most reads)
                and not kept.get(first, 0) >> (low - first) & ((1 << (high - low + 1)) - 1)):
            return set()
        span = run_masks(low, high - low + 1)
        firsts = list(map(FIRST_OF, span))
        done = list(map(and_, map(MASK_OF, span), self._blocks_at(group_id, firsts)))
        if not any(done):
            return set()
        within = marked_in(firsts, done)  # (those of the span: of a run, the answer)
        return within if high - low == len(seqs) - 1 else within.intersection(seqs)

    def done_by_all(self, group_ids: list[int], seqs: list[int],
                    masks: Masks | None = None) -> list[bool]:
        """For each seq whether every one of ``group_ids`` is done with it (an ACK's
        many; ``masks``: their ``block_masks``, when made already): the seqs' masks
        and'ed with each group's blocks, a block at a time. Mostly the answer is the
        same for all (the first groups to ACK: none, once some group has none of the
        seqs; the last: every one), and no list a seq is looked at; else the seqs
        every one is done with are picked from the blocks' bits in C, a lookup a seq."""
        if not seqs:
            return []
        if masks is None:
            masks = block_masks(seqs)
        return answers_of(seqs, masks, self.done_by_all_masks(group_ids, masks))

    def done_by_all_masks(self, group_ids: list[int], masks: Masks) -> list[int]:
        """For each block of ``masks`` (``block_masks``), the bits of its mask every one
        of ``group_ids`` is done with (all 0 once some group is done with none)."""
        if len(masks) == 1:  # (one block: most ACKs) its one int, no lists
            first, bits = masks[0]
            for group_id in group_ids:
                bits &= self._bits(group_id, first)
                if not bits:
                    break
            return [bits]
        firsts = list(map(FIRST_OF, masks))
        common = list(map(MASK_OF, masks))
        for group_id in group_ids:
            common = list(map(and_, common, self._blocks_at(group_id, firsts)))
            if not any(common):
                break
        return common

    def _blocks_at(self, group_id: int, firsts: list[int]) -> list[int]:
        """The group's bitmaps of the blocks from ``firsts`` (0: none)."""
        kept = self._kept_of(group_id)
        if kept is not None:
            return list(map(kept.get, firsts, repeat(0)))
        return list(map(self._bits, repeat(group_id), firsts))

    def _bits(self, group_id: int, first: int) -> int:
        """The bitmap of the group's block from ``first``, as it is with this batch."""
        kept = self._kept_of(group_id)
        if kept is not None:
            return kept.get(first, 0)
        changed = self._changed.get(group_id)
        bits = None if changed is None else changed.get(first)
        if bits is None:
            stored = self.store.get(keyspace.mark_block_key(group_id, first))
            bits = 0 if stored is None else int.from_bytes(stored, "little")
        return bits

    def _kept_of(self, group_id: int) -> dict[int, int] | None:
        """The group's blocks in memory (read from the store the first time); None: too
        many marks to keep, asked in the store. (A group is read only while nothing of
        it is changed in memory: its changes go to its kept blocks, or to the changed
        ones of a group not kept, which is read again only once written.)"""
        kept = self._kept.get(group_id)
        if kept is None and group_id not in self._unkept:
            kept, count = {}, 0
            for key, value in self.store.iterate(keyspace.group_done_prefix(group_id)):
                bits = int.from_bytes(value, "little")
                if bits:
                    kept[keyspace.seq_at_end(key)] = bits
                    count += bits.bit_count()
                if count > MARKS_KEPT:
                    self._unkept[group_id] = count  # (at least)
                    return None
            self._kept[group_id], self._counts[group_id] = kept, count
        return kept

    def mark(self, batch: Batch, group_id: int, seq: int) -> None:
        self.mark_all(batch, group_id, [seq])

    def mark_all(self, batch: Batch, group_id: int, seqs: list[int],
                 masks: Masks | None = None) -> None:
        """The group is done with ``seqs`` (others still hold them): their bits are set
        in the group's blocks, one write a block (``masks``: their ``block_masks``,
        when made already)."""
        if seqs:
            self._change_masks(batch, group_id, block_masks(seqs) if masks is None else masks,
                               True)

    def unmark(self, batch: Batch, group_id: int, seq: int) -> None:
        """The group's mark of ``seq`` goes (the message left, or is to go again)."""
        self.unmark_all(batch, group_id, [seq])

    def unmark_all(self, batch: Batch, group_id: int, seqs: list[int]) -> None:
        """``unmark`` of each seq: their bits cleared, one write a block."""
        self.unmark_groups(batch, [group_id], seqs)

    def unmark_groups(self, batch: Batch, group_ids: list[int], seqs: list[int],
                      masks: Masks | None = None) -> None:
        """``unmark_all`` of the same seqs for each of ``group_ids`` (the other holders
        of messages that leave), their blocks' masks made once (``masks``: made
        already)."""
        if not seqs:
            return
        if masks is None:
            masks = block_masks(seqs)
        for group_id in group_ids:
            self._change_masks(batch, group_id, masks, False)

    def _change_masks(self, batch: Batch, group_id: int, masks: Masks, marked: bool) -> None:
        """The bits of ``masks`` set (``marked``) or cleared in the group's blocks, each
        block changed written once (deleted when left empty), its marks counted."""
        blocks = self._kept_of(group_id)
        kept = blocks is not None
        if blocks is None:
            blocks = self._changed.setdefault(group_id, {})
        moved = 0
        for first, mask in masks:
            old = blocks.get(first)
            if old is None:
                old = 0 if kept else self._bits(group_id, first)
            bits = old | mask if marked else old & ~mask
            if bits == old:
                continue
            moved += (bits ^ old).bit_count()
            key = keyspace.mark_block_key(group_id, first)
            if bits:
                blocks[first] = bits
                batch.put(key, keyspace.encode_bits(bits))
            else:
                if kept:
                    del blocks[first]
                else:
                    blocks[first] = 0
                batch.delete(key)
        if moved:
            counts = self._counts if kept else self._unkept
            counts[group_id] += moved if marked else -moved

    def written(self) -> None:
        """The batch's marks are stored; a group with too many lets its blocks go, one
        with few again is read at its next question."""
        if not self._kept and not self._unkept:  # (no named group has asked)
            return
        for group_id in [group_id for group_id, count in self._counts.items()
                         if count > MARKS_KEPT]:
            self._unkept[group_id] = self._counts.pop(group_id)
            del self._kept[group_id]
        if self._unkept:
            for group_id in [group_id for group_id, count in self._unkept.items()
                             if count <= MARKS_KEPT // 2]:
                del self._unkept[group_id]
                self._changed.pop(group_id, None)

    def kept(self) -> int:
        """How many marks are kept in memory (of every group)."""
        return sum(self._counts.values())

    def failed(self) -> None:
        """Nothing of the batch is stored (the delivery states redo the marks they still
        owe): what was changed in memory is read again."""
        self.reread()

    def reread(self) -> None:
        """Marks changed other than by this batch's calls (a failed batch, an operator's
        walk): each group's are read again at its next question."""
        self._kept = {}
        self._counts = {}
        self._unkept = {}
        self._changed = {}


def marked_in(firsts: list[int], bits: list[int]) -> set[int]:
    """The seqs the bitmaps of the blocks from ``firsts`` mark, each picked from its
    lowest bit on in C (``keyspace.marked_seqs``: a character a bit from there)."""
    marked: set[int] = set()
    for first, block in zip(firsts, bits, strict=True):
        if block:
            lowest = (block & -block).bit_length() - 1
            marked.update(keyspace.marked_seqs(first + lowest, block >> lowest))
    return marked


def answers_of(seqs: list[int], masks: Masks, done: list[int]) -> list[bool]:
    """For each seq whether its bit is in ``done`` (the bits of each block of
    ``masks``, the seqs' ``block_masks``, that are done): one list made at once
    where all or none are, else the seqs done picked from the bits in C and each
    looked up."""
    if not any(done):
        return [False] * len(seqs)
    if done == list(map(MASK_OF, masks)):
        return [True] * len(seqs)
    return list(map(marked_in(list(map(FIRST_OF, masks)), done).__contains__, seqs))


def lowest_masked(masks: Masks) -> int:
    """The lowest seq of ``block_masks`` (its first block's lowest bit: no look at
    each seq)."""
    first, mask = masks[0]
    return first + (mask & -mask).bit_length() - 1


def run_masks(low: int, count: int) -> list[tuple[int, int]]:
    """``block_masks`` of the ``count`` seqs from ``low`` on, a run: one shift, with no
    look at each seq (a batch's new messages)."""
    start = low & MARK_BLOCK_OF
    span = ((1 << count) - 1) << (low - start)
    if low + count <= start + MARK_BLOCK:  # (one block: most reads and ACKs, no loop)
        return [(start, span)]
    return [(first, span >> (first - start) & BLOCK_BITS)
            for first in range(start, low + count, MARK_BLOCK)]


def ascending_masks(seqs: list[int]) -> list[tuple[int, int]]:
    """``block_masks`` of ascending seqs, each once (a read's, a batch's): a run's by
    ``run_masks``, without a look at each."""
    low = seqs[0]
    if seqs[-1] - low == len(seqs) - 1:
        return run_masks(low, len(seqs))
    return block_masks(seqs)


def block_masks(seqs: list[int]) -> Masks:
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
