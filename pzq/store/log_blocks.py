"""The topics' logs in blocks (format 5): which own messages each topic with a named
group holds, with their tags, for its groups' reads (see pzq.store.topic_log).

On disk a topic's log is a key a block of MARK_BLOCK seqs and TAG (``j <topic> <block>
<tag>``, pzq.store.keyspace), its value the bitmap of the block's stored messages of
that tag, as a group's marks are kept (pzq.store.group_marks): storing a run of
messages sets their bits, one write a block, and messages leaving (one ACKed alone,
or many) clear their bits in memory, each changed block written once a batch just
before the batch is (``flush``, from pzq.store.topic_registry's ``before_write``; a
block left empty is deleted). The tag in the key lets a group's filter pass over
whole blocks of tags it does not take without reading a body.

In memory the logs are ints, a topic's blocks by their first seq with a bitmap a tag,
read with one walk of the area at the first question (at start) and changed with the
batch that writes them: every group of a topic reads the same blocks, expanded into
seqs in C, without a walk of LevelDB. A failed batch has them read again.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from itertools import repeat
from operator import itemgetter

from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.group_marks import BLOCK_BITS, Masks, ascending_masks, block_masks
from pzq.store.keyspace import MARK_BLOCK, MARK_BLOCK_OF, SEQ, encode_bits, marked_seqs
from pzq.store.store import Store

FIRST, SECOND = itemgetter(0), itemgetter(1)
EVERY_SEQ = 1 << 63
READS_KEPT = 64  # reads kept for a topic's other groups (the oldest let go first)
READ_KEPT_AT_MOST = 1024  # seqs of a read kept (a longer one is each group's own)
Read = tuple[list[int], list[bytes], bool]


class TopicLog:
    """One topic's log: each block's first seq -> {tag: its bitmap, never 0}, and the
    blocks' first seqs ascending."""

    __slots__ = ("blocks", "firsts")

    def __init__(self) -> None:
        self.blocks: dict[int, dict[bytes, int]] = {}
        self.firsts: list[int] = []

    def block(self, first: int) -> dict[bytes, int]:
        block = self.blocks.get(first)
        if block is None:
            block = self.blocks[first] = {}
            insort(self.firsts, first)  # (mostly at the end)
        return block

    def drop(self, first: int) -> None:
        """An empty block goes (mostly the first)."""
        del self.blocks[first]
        self.firsts.pop(bisect_left(self.firsts, first))


class LogBlocks:
    """The logs of every topic, by topic id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._logs: dict[int, TopicLog] | None = None  # None: to be read from the store
        # Blocks cleared by ``clear`` (topic id, first seq, tag) and the batch that
        # cleared them, written once by ``flush`` before that batch is: ACKs of one
        # message a frame would rewrite their block's bitmap at each. (``changed_in``
        # None: nothing to flush, which a batch looks at before asking ``flush``.)
        self._changed: set[tuple[int, int, bytes]] = set()
        self.changed_in: Batch | None = None
        # Reads of every tag lately answered, by (topic id, first, newest, count): the
        # topic's other groups, reading the same stretch, get the same lists (one walk
        # and one set of ints for all of them). A read depends on the log from its first
        # to its newest alone: a change there lets it go (messages leaving are mostly
        # below where every group reads, messages coming past every read's newest).
        self._reads: dict[tuple[int, int, int, int], Read] = {}

    def _all(self) -> dict[int, TopicLog]:
        """The logs, read with one walk of the area the first time (and after a failed
        batch)."""
        logs = self._logs
        if logs is None:
            logs = self._logs = {}
            for key, value in self.store.iterate(keyspace.LOG_BLOCK_PREFIX):
                topic_id, first, tag = keyspace.split_log_block_key(key)
                log = logs.get(topic_id)
                if log is None:
                    log = logs[topic_id] = TopicLog()
                log.block(first)[tag] = int.from_bytes(value, "little")
        return logs

    def _of(self, topic_id: int) -> TopicLog:
        logs = self._all()
        log = logs.get(topic_id)
        if log is None:
            log = logs[topic_id] = TopicLog()
        return log

    # -- changes, with the batch -------------------------------------------------------

    def add(self, batch: Batch, topic_id: int, tag: bytes, seqs: list[int]) -> None:
        """New messages of the topic with ``tag`` (``seqs`` ascending, each once): their
        bits set, one write a block."""
        log = self._of(topic_id)
        if seqs:
            self._changed_reads(topic_id, seqs[0], seqs[-1])
        prefix = keyspace.log_block_prefix(topic_id)
        for first, mask in ascending_masks(seqs):
            block = log.block(first)
            bits = block[tag] = block.get(tag, 0) | mask
            batch.put(prefix + SEQ.pack(first) + tag, encode_bits(bits))

    def add_tagged(self, batch: Batch, topic_id: int, found: list[tuple[int, bytes]]) -> None:
        """``add`` of messages of any tags, (seq, tag) each (a backfill's chunk)."""
        by_tag: dict[bytes, list[int]] = {}
        for seq, tag in found:
            by_tag.setdefault(tag, []).append(seq)
        for tag, seqs in by_tag.items():
            self.add(batch, topic_id, tag, sorted(seqs))

    def remove(self, batch: Batch, topic_id: int, seqs: list[int],
               masks: Masks | None = None) -> None:
        """Messages of the topic left the store: ``clear`` of their bits, a block at a
        time (whatever their tags; ``masks``: the seqs' ``block_masks``, when made
        already)."""
        if not seqs:
            return
        clear = self.clear
        for first, mask in block_masks(seqs) if masks is None else masks:
            clear(batch, topic_id, first, mask)

    def clear(self, batch: Batch, topic_id: int, first: int, mask: int) -> None:
        """Messages of the topic left the store: the bits of ``mask`` cleared in its
        block from ``first`` (whatever their tags), in memory, and the block noted; each
        block noted is written once by ``flush``, just before ``batch`` is. (A message
        ACKed alone comes here straight, its one bit: no list, no call more.)"""
        logs = self._logs
        log = (logs if logs is not None else self._all()).get(topic_id)
        if log is None:
            return
        block = log.blocks.get(first)
        if block is None:
            return
        self._changed_reads(topic_id, first + (mask & -mask).bit_length() - 1,
                            first + mask.bit_length() - 1)
        if self.changed_in is not batch and self._changed:  # another batch's: put first
            self.flush()
        self.changed_in = batch
        changed = self._changed
        emptied: tuple[bytes, ...] = ()  # (tags whose last bit goes: deleted after the walk)
        for tag, bits in block.items():
            if bits & mask:
                changed.add((topic_id, first, tag))
                left = bits & ~mask
                if left:
                    block[tag] = left  # (a value replaced: the walk goes on)
                else:
                    emptied += (tag,)
        if emptied:
            for tag in emptied:
                del block[tag]
            if not block:
                log.drop(first)

    def flush(self) -> None:
        """The blocks changed since the last flush put into their batch (about to be
        written), each once and as memory holds it now, or deleted when left empty."""
        batch, self.changed_in = self.changed_in, None
        if batch is None:
            return
        logs = self._all()
        for topic_id, first, tag in self._changed:
            log = logs.get(topic_id)
            block = log.blocks.get(first) if log is not None else None
            bits = block.get(tag, 0) if block is not None else 0
            key = keyspace.log_block_key(topic_id, first, tag)
            if bits:
                batch.put(key, encode_bits(bits))
            else:
                batch.delete(key)
        self._changed = set()

    def failed(self) -> None:
        """Nothing of the batch is stored: the logs are read again at the next question
        (the changed blocks with them: nothing is left to write)."""
        self._logs = None
        self._changed, self.changed_in = set(), None
        self._reads.clear()

    # -- questions ---------------------------------------------------------------------

    def read(self, topic_id: int, first: int, newest: int, count: int,
             takes: Callable[[bytes], bool] | None = None
             ) -> tuple[list[int], list[bytes], bool]:
        """The seqs and tags of up to ``count`` messages of the topic from ``first`` to
        ``newest`` (of the tags ``takes``, if given), ascending; and whether they are
        the last up to ``newest``. A read of every tag may answer with the lists of the
        same read before (while no log changed): not to be changed by the caller."""
        if takes is not None:
            return self._read(topic_id, first, newest, count, takes)
        key = (topic_id, first, newest, count)
        reads = self._reads
        found = reads.get(key)
        if found is None:
            found = self._read(topic_id, first, newest, count, None)
            if len(found[0]) <= READ_KEPT_AT_MOST:  # (what is kept: a few MB at most)
                if len(reads) >= READS_KEPT:
                    del reads[next(iter(reads))]  # (the oldest)
                reads[key] = found
        return found

    def _changed_reads(self, topic_id: int, low: int, high: int) -> None:
        """The topic's log changed from ``low`` to ``high``: the reads kept whose stretch
        holds some of that go."""
        reads = self._reads
        if reads:
            for key in [key for key in reads
                        if key[0] == topic_id and key[1] <= high and low <= key[2]]:
                del reads[key]

    def _read(self, topic_id: int, first: int, newest: int, count: int,
              takes: Callable[[bytes], bool] | None) -> Read:
        log = self._all().get(topic_id)
        seqs: list[int] = []
        tags: list[bytes] = []
        if log is None:
            return seqs, tags, True
        firsts, blocks = log.firsts, log.blocks
        for at in range(bisect_left(firsts, first & MARK_BLOCK_OF), len(firsts)):
            start = firsts[at]
            if start > newest:
                break
            # the seqs a dense block holds first, then the rest only if they fall short
            block = blocks[start]
            low, top = max(first, start), min(newest + 1, start + MARK_BLOCK)
            cut = low + count - len(seqs)
            if cut < top:
                _expand(block, start, low, window(start, low, cut), takes, seqs, tags)
                if len(seqs) < count:
                    _expand(block, start, cut, window(start, cut, top), takes, seqs, tags)
            else:
                _expand(block, start, low, window(start, low, top), takes, seqs, tags)
            if len(seqs) >= count:
                del seqs[count:], tags[count:]
                return seqs, tags, seqs[-1] >= newest
        return seqs, tags, True

    def walk(self, topic_id: int, first: int = 0) -> list[tuple[int, bytes]]:
        """(seq, tag) of every message of the topic's log from ``first`` (an operator's
        walk: a list, so that the walk may change the log)."""
        seqs, tags, _ = self._read(topic_id, first, EVERY_SEQ, EVERY_SEQ, None)
        return list(zip(seqs, tags, strict=True))

    def count(self, topic_id: int, first: int, below: int | None,
              takes: Callable[[bytes], bool]) -> int:
        """How many messages of the topic's log from ``first`` and below ``below`` (None:
        every one) have tags ``takes`` (a new group's backlog, a seek's)."""
        log = self._all().get(topic_id)
        if log is None:
            return 0
        total = 0
        top = EVERY_SEQ if below is None else below
        for at in range(bisect_left(log.firsts, first & MARK_BLOCK_OF), len(log.firsts)):
            start = log.firsts[at]
            if start >= top:
                break
            bounds = window(start, first, top)
            for tag, bits in log.blocks[start].items():
                if takes(tag):
                    total += (bits & bounds).bit_count()
        return total

    def oldest(self, topic_id: int) -> int | None:
        """The seq of the topic's oldest logged message (None: it has none)."""
        log = self._all().get(topic_id)
        if log is None or not log.firsts:
            return None
        start = log.firsts[0]
        return start + min((bits & -bits).bit_length() - 1
                           for bits in log.blocks[start].values())

    def kept(self) -> int:
        """Blocks kept in memory, of every topic."""
        return sum(len(log.blocks) for log in (self._logs or {}).values())


def window(start: int, first: int, top: int) -> int:
    """The bits of the block from ``start`` for seqs from ``first`` and below ``top``."""
    bits = BLOCK_BITS
    if first > start:
        bits &= ~((1 << (first - start)) - 1)
    if top - start < MARK_BLOCK:
        bits &= (1 << (top - start)) - 1
    return bits


def _expand(block: dict[bytes, int], start: int, low: int, bounds: int,
            takes: Callable[[bytes], bool] | None, seqs: list[int], tags: list[bytes]) -> None:
    """The seqs (and tags) of the block from ``start`` within ``bounds`` (none below
    ``low``) of the tags ``takes``, added to ``seqs`` and ``tags`` in order, expanded
    in C from ``low``."""
    shift = low - start
    if len(block) == 1:  # (mostly: one tag)
        ((tag, bits),) = block.items()
        if takes is None or takes(tag):
            found = marked_seqs(low, (bits & bounds) >> shift)
            seqs += found
            tags += repeat(tag, len(found))
        return
    pairs: list[tuple[int, bytes]] = []
    for tag, bits in block.items():
        if takes is None or takes(tag):
            pairs += zip(marked_seqs(low, (bits & bounds) >> shift), repeat(tag))
    pairs.sort(key=FIRST)
    seqs += map(FIRST, pairs)
    tags += map(SECOND, pairs)
