"""Messages put straight into a real store, for tests of what reads and delivers them;
a store that fails its next write."""

from __future__ import annotations

from collections.abc import Sequence

from pzq.errors import StoreError
from pzq.store import keyspace, record
from pzq.store.batch import Participant
from pzq.store.store import Store


def stored(store: Store, count: int, size: int = 10,
           headers: Sequence[bytes] = ()) -> list[int]:
    """``count`` messages (bodies of ``size`` bytes, ``headers`` each) in one batch;
    their seqs."""
    batch = store.begin()
    seqs = [batch.add_message(record.encode(b"m%d" % i, tuple(headers), (b"x" * size,), 1))
            for i in range(count)]
    store.commit(batch)
    return seqs


def stored_log(store, topic_id):
    """(seq, tag) of every message a topic's stored log holds, ascending, from its blocks
    (none of them empty, none with trailing zero bytes)."""
    found = []
    for key, value in store.iterate(keyspace.log_block_prefix(topic_id)):
        assert value and value[-1], "a block is never empty, nor has trailing zero bytes"
        _, first, tag = keyspace.split_log_block_key(key)
        bits = int.from_bytes(value, "little")
        found += [(seq, tag) for seq in keyspace.marked_seqs(first, bits)]
    return sorted(found)


class FailNext(Participant):
    """Fails the next batch before its write, as a store that cannot write would."""

    armed = False

    def before_write(self) -> None:
        if self.armed:
            self.armed = False
            raise StoreError("the disk is full")
