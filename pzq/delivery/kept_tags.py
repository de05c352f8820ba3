"""The tags a named group keeps for the messages it read and is not done with yet
(pzq.delivery.groups): its ACK, the archive's group names and its release decisions
ask them, and a tag not kept says that the message was done with already (or never
read), which the archive relies on not to write a message twice.

Most reads find messages of one tag: those are kept as bits, a bitmap a block of
MARK_BLOCK seqs beside the block's one tag, set and cleared with one mask a block
made in C (pzq.store.group_marks.block_masks), where a dict entry a message cost
about a thousand instructions from its read to its ACK. A message whose tag is not
its block's (a read of several tags, or one kept alone) has a dict entry instead,
which comes first.
"""

from __future__ import annotations

from itertools import repeat

from pzq.store.group_marks import Masks, ascending_masks, block_masks
from pzq.store.keyspace import MARK_BLOCK, MARK_BLOCK_OF


class KeptTags:
    __slots__ = ("_each", "_bits", "_block_tags")

    def __init__(self) -> None:
        self._each: dict[int, bytes] = {}  # seq -> tag, kept one by one
        self._bits: dict[int, int] = {}  # block's first seq -> its seqs kept (never 0)
        self._block_tags: dict[int, bytes] = {}  # block's first seq -> their tag

    def keep(self, seq: int, tag: bytes) -> None:
        self._each[seq] = tag

    def keep_all(self, seqs: list[int], tags: list[bytes]) -> None:
        """``keep`` of each seq with its tag (``seqs`` ascending, each once: a read's)."""
        if not seqs:
            return
        tag = tags[0]
        if tags.count(tag) != len(tags):  # several tags (mostly the same object: no compare)
            self._each.update(zip(seqs, tags, strict=True))
            return
        bits, block_tags = self._bits, self._block_tags
        for first, mask in ascending_masks(seqs):
            if not mask:  # (a block the seqs pass over)
                continue
            kept = block_tags.get(first)
            if kept is None:
                block_tags[first] = tag
                bits[first] = mask
            elif kept is tag or kept == tag:
                bits[first] |= mask
            else:  # the block keeps another tag's bits: these go one by one
                self._each.update(zip([seq for seq in seqs if seq & MARK_BLOCK_OF == first],
                                      repeat(tag)))

    def get(self, seq: int) -> bytes | None:
        tag = self._each.get(seq)
        if tag is None and self._has_bit(seq):
            tag = self._block_tags[seq & MARK_BLOCK_OF]
        return tag

    def pop(self, seq: int) -> bytes | None:
        """The tag of ``seq``, kept no longer (None: it was not kept)."""
        tag = self._each.pop(seq, None)
        first = seq & MARK_BLOCK_OF
        bits = self._bits.get(first, 0)
        bit = 1 << (seq - first)
        if bits & bit:
            if tag is None:
                tag = self._block_tags[first]
            self._clear(first, bits & ~bit)
        return tag

    def get_all(self, seqs: list[int]) -> tuple[list[bytes | None], bool]:
        """``get`` of each seq, and whether every one is kept: in C where all are kept
        as bits of one tag."""
        found = self._all_bits_of_one_tag(seqs)
        if found is None:
            tags = list(map(self.get, seqs))
            return tags, None not in tags
        return [found[0]] * len(seqs), True

    def pop_all(self, seqs: list[int]) -> tuple[list[bytes | None], bool]:
        """``pop`` of each seq, in turn (a seq given twice: None the second time), and
        whether every one was kept: in C where all are kept as bits of one tag, each
        once."""
        tags, every, _ = self.pop_all_masked(seqs)
        return tags, every

    def pop_all_masked(self, seqs: list[int], ascending: bool = False
                       ) -> tuple[list[bytes | None], bool, Masks | None]:
        """``pop_all``, with the seqs' ``block_masks`` where it made them (all kept as
        bits of one tag: an ACK's mostly), for the topic's marks and log to use
        (``ascending``: the seqs are ascending, each once: a run's masks by a shift)."""
        if ascending and not self._each:
            run = self._pop_run(seqs)
            if run is not None:
                return run
        found = self._all_bits_of_one_tag(seqs, once=True, ascending=ascending)
        if found is None:
            tags = list(map(self.pop, seqs))
            return tags, None not in tags, None
        tag, masks = found
        bits = self._bits
        for first, mask in masks:
            if mask:
                self._clear(first, bits[first] & ~mask)
        return [tag] * len(seqs), True, masks

    def _pop_run(self, seqs: list[int]
                 ) -> tuple[list[bytes | None], bool, Masks | None] | None:
        """``pop_all_masked`` of a run within one block, all kept as its bits (the
        common ACK: of a BATCH that was a read's run), with one mask and no list of
        masks made first; None: not that case, nothing done (``seqs`` ascending, each
        once, and nothing kept one by one: the caller's to know)."""
        count = len(seqs)
        if not count:
            return None
        low, high = seqs[0], seqs[-1]
        first = low & MARK_BLOCK_OF
        if high - low != count - 1 or high - first >= MARK_BLOCK:
            return None
        mask = ((1 << count) - 1) << (low - first)
        bits = self._bits.get(first, 0)
        if bits & mask != mask:
            return None
        tag = self._block_tags[first]
        self._clear(first, bits & ~mask)
        return [tag] * count, True, [(first, mask)]

    def _all_bits_of_one_tag(self, seqs: list[int], once: bool = False,
                             ascending: bool = False
                             ) -> tuple[bytes, list[tuple[int, int]]] | None:
        """The one tag of ``seqs`` (and their blocks' masks) where every one is kept as
        a bit of a block of that tag and none one by one (``once``: and none is given
        twice); else None."""
        if not seqs or (self._each and not self._each.keys().isdisjoint(seqs)):
            return None
        bits, block_tags = self._bits, self._block_tags
        masks = ascending_masks(seqs) if ascending else block_masks(seqs)
        tag = block_tags.get(masks[0][0])  # (the first block holds the lowest seq)
        if tag is None:
            return None
        for first, mask in masks:
            if not mask:  # (a block the seqs pass over)
                continue
            if bits.get(first, 0) & mask != mask:
                return None
            kept = block_tags[first]
            if kept is not tag and kept != tag:
                return None
        if once and sum(mask.bit_count() for _, mask in masks) != len(seqs):
            return None
        return tag, masks

    def _has_bit(self, seq: int) -> bool:
        first = seq & MARK_BLOCK_OF
        return bool(self._bits.get(first, 0) >> (seq - first) & 1)

    def _clear(self, first: int, bits: int) -> None:
        """The block's bits as they are now (0: it keeps none, and no tag)."""
        if bits:
            self._bits[first] = bits
        else:
            del self._bits[first], self._block_tags[first]

