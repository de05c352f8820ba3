"""The store's format version: written when a store is made, checked at every start.

The version counts changes of the key layout (pzq.store.keyspace) and of the stored
values that an earlier release of pzq could not read. It is kept as ASCII digits
under ``M format``. A store made before the version was kept has no such key: its
format is 1, the format of every store so far, and the node writes the key and
goes on (the upgrade in place from the releases before versions). A store of a
newer format than this release reads is refused at start, naming both versions,
before anything is written to it.

Format 2 adds the scheduled messages' areas (``w`` by due time, ``Z`` their counts
per topic; pzq.store.scheduled): a release of format 1 would not see them, and would
lose every scheduled message, so it must refuse such a store. A store of format 1
is brought up to 2 at start by writing the version alone: its areas are read as
they were, and the new ones start empty.

Format 3 adds the scheduled messages' keys by seq (``v``) and the scheduled copies
held for peers (``x`` by due time, ``y`` by seq; pzq.store.scheduled_copies): a
release of format 2 would not see the copies, and would release a scheduled message
a peer released in a takeover again. A store of format 2 is brought up to 3 at start
by one pass over its scheduled messages, writing each one's ``v`` key; one of format 1
has none, and takes the version alone.

Format 4 keeps a group's marks (``a``: the messages it is done with that other groups
still hold) in blocks of seqs, a bitmap each, where earlier formats kept a key a mark
with an empty value (pzq.store.group_marks): a release of format 3 would take a block
for the mark of its first seq alone and deliver the others again. A store of any
earlier format is brought up to 4 at start by one pass over its marks, the keys of a
block replaced by the block in one write; a block's value is never empty, so a pass
cut short by a crash is taken up again at the next start without reading a block as a
mark.

Format 5 keeps a topic's log (the own messages of a topic with a named group, by tag)
in blocks of seqs, a key a block and tag under ``j`` with the block's bitmap
(pzq.store.log_blocks), where earlier formats kept an entry a message under ``i``,
its value the tag: a release of format 4 would find no log and deliver nothing to a
named group. A store of any earlier format is brought up to 5 at start by one pass
over its log entries, those of a block replaced by its keys in one write, a bounded
number of entries a write (ENTRIES_A_BATCH, whole blocks); the entries left are
still under ``i``, so a pass cut short by a crash goes on at the next start with
them (a block it meets made already is merged with them).

Format 6 keeps the wait of a delivery given back to go again later (a NACK's
``DELAY:``, a group's backoff), a key a waiting message and group under ``W`` with its
due time (pzq.delivery.waits), so that the wait outlasts a restart: a release of
format 5 would deliver such a message at once and leave its key behind for good. A
store of any earlier format has no waits, and is brought up to 6 by writing the
version alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plyvel

from pzq.errors import StoreError
from pzq.store import keyspace

STORE_FORMAT = 6  # what this release writes and reads (and 1 to 5, brought up to 6)
UNVERSIONED = 1  # the format of a store without the key (made before versions were kept)


def format_of(found: bytes | None) -> int:
    """The format a stored version says (UNVERSIONED without one); ValueError for a
    value that is not a version."""
    if found is None:
        return UNVERSIONED
    text = found.decode(errors="replace")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"its format version {text[:20]!r} is not a whole number from 1")
    return int(text)


def encode_format(version: int = STORE_FORMAT) -> bytes:
    return str(version).encode()


def refuse_newer(path: Path, version: int) -> None:
    """StoreError when the store at ``path`` has a format this release cannot read."""
    if version > STORE_FORMAT:
        raise StoreError(
            f"the store {path} has format {version}, newer than this pzq reads "
            f"(format {STORE_FORMAT}): run a release that reads format {version}, or "
            f"start this one on a backup taken before the upgrade")


def upgrade(db: plyvel.DB, version: int) -> None:
    """Bring a store of format ``version`` up to STORE_FORMAT (the version is written
    after, by the caller): format 2's scheduled messages get their keys by seq, the
    marks of every format before 4 go into blocks, and the topics' logs of every
    format before 5 (format 6's waits start empty: nothing to do)."""
    if version == 2:
        with db.write_batch() as batch:
            for key in db.iterator(prefix=keyspace.SCHEDULED_PREFIX, include_value=False):
                batch.put(keyspace.scheduled_seq_key(keyspace.split_scheduled_key(key)[1]),
                          key)
    if version < 4:
        marks_into_blocks(db)
    if version < 5:
        for _ in log_into_blocks(db):
            pass


def marks_into_blocks(db: plyvel.DB) -> None:
    """Each group's marks of a key a seq (empty values) into blocks of MARK_BLOCK seqs
    (a bitmap each, merged with a block already made), a block's keys deleted and the
    block written in the same batch (the block's key may be one of them: deleted
    first); a batch written every BLOCKS_A_BATCH blocks."""
    seq_at = len(keyspace.group_done_prefix(0))
    block: tuple[bytes, int] | None = None  # (group's prefix, first seq) being gathered
    bits, old_keys, written = 0, list[bytes](), 0
    batch = db.write_batch(sync=True)
    for key, value in db.iterator(prefix=keyspace.GROUP_DONE_PREFIX):  # (a snapshot)
        seq = keyspace.SEQ.unpack_from(key, seq_at)[0]
        first = seq & keyspace.MARK_BLOCK_OF
        at = (key[:seq_at], first)
        if at != block:
            written += _write_block(batch, block, bits, old_keys)
            if written >= BLOCKS_A_BATCH:
                batch.write()
                batch, written = db.write_batch(sync=True), 0
            block, bits, old_keys = at, 0, []
        if value:  # a block made already (a pass cut short)
            bits |= int.from_bytes(value, "little")
        else:
            bits |= 1 << (seq - first)
            old_keys.append(key)
    _write_block(batch, block, bits, old_keys)
    batch.write()


BLOCKS_A_BATCH = 1024


def _write_block(batch: plyvel.WriteBatch, block: tuple[bytes, int] | None, bits: int,
                 old_keys: list[bytes]) -> int:
    """The block's keys of one seq replaced by the block; 1 if written."""
    if block is None or not old_keys:
        return 0
    for key in old_keys:
        batch.delete(key)
    batch.put(block[0] + keyspace.SEQ.pack(block[1]),
              keyspace.encode_bits(bits))
    return 1


ENTRIES_A_BATCH = 65_536  # log entries a write of the log's upgrade replaces, at least


def log_into_blocks(db: plyvel.DB, entries_a_batch: int = ENTRIES_A_BATCH
                    ) -> Iterator[int]:
    """Each topic's log of an entry a message (``i``, value its tag) into blocks of
    MARK_BLOCK seqs by tag (``j``), the block's entries deleted and its keys written in
    the same batch (merged with a key made already); a batch written at the end of
    the block that brings it to ``entries_a_batch`` entries. Yields the entries
    replaced so far after each write (a step of a pass that a crash may cut)."""
    blocks: dict[bytes, int] = {}  # the block being gathered: its keys by tag -> bits
    block: tuple[int, int] | None = None  # its (topic id, first seq)
    old_keys: list[bytes] = []
    batch, in_batch, done = db.write_batch(sync=True), 0, 0
    topic_at, seq_at = len(keyspace.TOPIC_LOG_PREFIX), len(keyspace.TOPIC_LOG_PREFIX) + 4
    for key, tag in db.iterator(prefix=keyspace.TOPIC_LOG_PREFIX):  # (a snapshot)
        seq = keyspace.SEQ.unpack_from(key, seq_at)[0]
        at = (keyspace.ID.unpack_from(key, topic_at)[0], seq & keyspace.MARK_BLOCK_OF)
        if at != block:
            in_batch += _write_log_block(db, batch, block, blocks, old_keys)
            if in_batch >= entries_a_batch:
                batch.write()
                done += in_batch
                yield done
                batch, in_batch = db.write_batch(sync=True), 0
            block, blocks, old_keys = at, {}, []
        blocks[tag] = blocks.get(tag, 0) | 1 << (seq - at[1])
        old_keys.append(key)
    in_batch += _write_log_block(db, batch, block, blocks, old_keys)
    batch.write()
    if in_batch:
        yield done + in_batch


def _write_log_block(db: plyvel.DB, batch: plyvel.WriteBatch, block: tuple[int, int] | None,
                     blocks: dict[bytes, int], old_keys: list[bytes]) -> int:
    """The block's entries replaced by its keys, a key a tag; how many entries went."""
    if block is None:
        return 0
    for key in old_keys:
        batch.delete(key)
    for tag, bits in blocks.items():
        key = keyspace.log_block_key(block[0], block[1], tag)
        made = db.get(key)  # (by a pass cut short)
        if made:
            bits |= int.from_bytes(made, "little")
        batch.put(key, keyspace.encode_bits(bits))
    return len(old_keys)
