"""A topic's log (its messages' seqs by TAG, in blocks: pzq.store.log_blocks): walks of
a topic's messages, and the backfill that indexes a topic's stored messages when its
first named group needs them.

Only topics with a named group keep a log (see pzq.store.topic_model). When the first
named group of a topic is made, the log starts at the next seq (``log_from``); a group
that starts earlier (``earliest``, or a time) needs the topic's stored messages below
that indexed too. The backfill walks the own messages down from ``log_from``, a
bounded chunk per batch, sets the log's bit of each message of the topic and lowers
``log_from`` in the same batch: after a crash the log is complete from the stored
``log_from`` on and the backfill goes on from there. A group delivers nothing until
the log reaches back to its start.
"""

from __future__ import annotations

from collections.abc import Iterator

from pzq.protocol.headers import topic_and_tag
from pzq.store import keyspace, record
from pzq.store.batch import Batch
from pzq.store.log_blocks import LogBlocks
from pzq.store.store import Store
from pzq.store.topic_model import Topic

BACKFILL_CHUNK = 5000  # own messages looked at per batch


def topic_of(value: bytes, default_topic: str) -> tuple[str, bytes] | None:
    """(topic name, tag) of a stored record; None for one whose topic cannot be one."""
    try:
        return topic_and_tag(record.headers_of(value), default_topic)
    except ValueError:
        return None


def walk(store: Store, logs: LogBlocks, topic: Topic, default_topic: str
         ) -> Iterator[tuple[int, bytes]]:
    """(seq, tag) of every stored message of the topic, in arrival order: the own
    messages below ``log_from`` read one by one (an operator's command, not the hot
    path), the log from there (as it is when the walk reaches it)."""
    log_from = topic.log_from
    for key, value in store.iterate(keyspace.OWN_PREFIX):
        seq = keyspace.own_seq(key)
        if log_from is not None and seq >= log_from:
            break
        found = topic_of(value, default_topic)
        if found is not None and found[0] == topic.name:
            yield seq, found[1]
    if log_from is not None:
        yield from logs.walk(topic.id, log_from)


def first_stored_since(store: Store, logs: LogBlocks, topic: Topic, default_topic: str,
                       since_us: int) -> int:
    """The seq of the topic's first stored message stored at or after ``since_us``
    (the next seq when none is)."""
    for seq, _ in walk(store, logs, topic, default_topic):
        value = store.get_own(seq)
        if value is not None and record.stored_us_of(value) >= since_us:
            return seq
    return store.next_seq


def backfill_chunk(store: Store, logs: LogBlocks, batch: Batch, topic: Topic, down_to: int,
                   default_topic: str, limit: int = BACKFILL_CHUNK
                   ) -> tuple[list[tuple[int, bytes]], int]:
    """Index up to ``limit`` own messages below ``topic.log_from`` (not below
    ``down_to``) into ``batch``; returns the (seq, tag) indexed and the new
    ``log_from``."""
    assert topic.log_from is not None
    indexed: list[tuple[int, bytes]] = []
    looked = 0
    for key, value in store.iterate_back(keyspace.OWN_PREFIX, keyspace.own_key(topic.log_from)):
        seq = keyspace.own_seq(key)
        if seq < down_to:
            break
        found = topic_of(value, default_topic)
        if found is not None and found[0] == topic.name:
            indexed.append((seq, found[1]))
        looked += 1
        if looked >= limit:
            logs.add_tagged(batch, topic.id, indexed)
            return indexed, seq
    logs.add_tagged(batch, topic.id, indexed)
    return indexed, down_to
