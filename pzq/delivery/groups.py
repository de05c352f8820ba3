"""The store area of a named consumer group, for DeliveryState: what it delivers, and
what its ACK does (see pzq.store.topics for who holds a message). ``GroupArea`` is
one named group of one topic: that topic's log from the group's start, less what its
filter leaves out and what it is done with (``default``'s is
pzq.delivery.default_area).

A group's delivery counts are its own: the stored record's bookkeeping belongs to
``default``, so a named group reads records with it replaced by the group's own count
(``c <group> <seq>``, kept for messages it delivered more than once) or zeroed.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import compress
from operator import itemgetter
from typing import cast

from pzq.delivery.areas import (
    LOOK_AT_MOST,
    Chunk,
    load_delivered_below,
    names_each,
    release_each,
)
from pzq.delivery.kept_tags import KeptTags
from pzq.delivery.recent import longest
from pzq.delivery.settings import DeliverySettings
from pzq.store import keyspace, record
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import Group, Topic, Topics


def group_settings(node: DeliverySettings, group: Group) -> DeliverySettings:
    """The node's delivery settings, with what the group declared of its own."""
    return replace(node, ack_timeout_us=group.ack_timeout_us or node.ack_timeout_us,
                   max_deliveries=(node.max_deliveries if group.max_deliveries is None
                                   else group.max_deliveries),
                   backoff_us=group.backoff_us)


DENSE_AT_LEAST = 16  # messages a read must want before it walks the own messages


ZERO_BOOKKEEPING = bytes(record.BOOKKEEPING.size)
BOOKKEEPING_END = record.BOOKKEEPING_OFFSET + record.BOOKKEEPING.size
ONCE = record.BOOKKEEPING.pack(0, 1)  # a group's count of a message it delivered once
BOOKKEEPING_OF = itemgetter(slice(record.BOOKKEEPING_OFFSET, BOOKKEEPING_END))
KEY, VALUE = itemgetter(0), itemgetter(1)
OWN_SEQ = itemgetter(slice(len(keyspace.OWN_PREFIX), None))  # an own key: prefix, seq


def as_kept(records: list[bytes | None]) -> list[bytes | None]:
    """A kept read's records, one for each of its seqs (KeptReads.each_of's made_of)."""
    return records


def without_bookkeeping(value: bytes) -> bytes:
    """The record with ``default``'s delivery counts zeroed (copied only when set)."""
    if value[record.BOOKKEEPING_OFFSET:BOOKKEEPING_END] == ZERO_BOOKKEEPING:
        return value
    return record.with_bookkeeping(value, 0, 0)


class GroupArea:
    """One named group of one topic."""

    def __init__(self, store: Store, topics: Topics, group: Group) -> None:
        self.store = store
        self.topics = topics
        self.group = group
        self.node_id = store.node_id
        self._tags = KeptTags()  # tags of messages read and not yet done with
        self._counted: set[int] = set()  # messages with a count in the store (``c``)
        self._highest_count: int | None = None  # seq of the highest ``c`` key (-1: none)

    def end_seq(self) -> int:
        """Nothing to deliver until the topic's log reaches back to the group's start
        (its backfill is under way)."""
        log_from = self.group.topic.log_from
        if log_from is None or log_from > self.group.start_seq:
            return 0
        return self.store.next_seq

    def holds(self, seq: int, value: bytes) -> bool:
        group = self.group
        if seq < max(group.start_seq, group.floor) or self.topics.is_done(group.id, seq):
            return False
        topic, tag = self.topics.describe(value)
        return topic is group.topic and group.takes(tag)

    def read(self, start_seq: int, limit: int) -> Chunk:
        """Up to ``limit`` messages of the topic from ``start_seq`` on that the group
        holds and is not done with. Done messages are dropped before the count is
        cut, so a run of them never reads as the end."""
        next_seq, looked = start_seq, 0
        while looked < LOOK_AT_MOST:
            seqs, tags, next_seq = self._walk_log(next_seq, limit)
            if not seqs:
                break
            looked += len(seqs)
            done = self.topics.done_among(self.group.id, seqs, ascending=True)  # (the log's)
            if done:
                kept = [seq not in done for seq in seqs]
                seqs, tags = list(compress(seqs, kept)), list(compress(tags, kept))
            if seqs:
                return self._found(seqs, tags, next_seq)
        return Chunk([], [], next_seq)

    def _walk_log(self, start_seq: int, limit: int) -> tuple[list[int], list[bytes], int]:
        """The seqs and tags of up to ``limit`` messages of the topic's log (in memory,
        shared by its groups) the group's filter takes, no more than LOOK_AT_MOST; with
        the seq the next walk starts at."""
        group = self.group
        first = max(start_seq, group.start_seq, group.floor)
        # a read stops at the topic's newest message (the seqs past it are other topics')
        newest = group.topic.newest if group.topic.newest >= 0 else self.store.next_seq - 1
        end = max(first, self.end_seq())
        if first > newest:
            return [], [], end  # newer messages are other topics'
        count = min(limit, LOOK_AT_MOST)
        seqs, tags, reached = self.topics.logs.read(group.topic.id, first, newest, count,
                                                    group.takes if group.filter else None)
        if not seqs or reached:
            return seqs, tags, end
        return seqs, tags, seqs[-1] + 1

    def _found(self, seqs: list[int], tags: list[bytes], next_seq: int) -> Chunk:
        """The stored records of the log entries ``seqs`` (with their ``tags``), tags kept
        for their ACKs, with the group's own delivery counts; fresh when none of them
        has a count (so a run of first deliveries need not look again)."""
        values, plain = self._values(seqs)
        if all(values) and seqs[0] > self._highest_counted():  # (a record is never empty)
            records = cast(list[bytes], values)
            if plain or not any(map(ZERO_BOOKKEEPING.__ne__, map(BOOKKEEPING_OF, records))):
                # the common read: every record stored, no count kept, none set by default
                self._tags.keep_all(seqs, tags)
                return Chunk(seqs, records, next_seq, True)
        counts = self._counts(seqs[0], seqs[-1])
        found_seqs: list[int] = []
        found_tags: list[bytes] = []
        found_values: list[bytes] = []
        for seq, tag, value in zip(seqs, tags, values, strict=True):
            if value is None:
                continue
            found_tags.append(tag)
            if counts or value[record.BOOKKEEPING_OFFSET:BOOKKEEPING_END] != ZERO_BOOKKEEPING:
                value = self._with_count(seq, value, counts.get(seq))
            found_seqs.append(seq)  # (as stored: no count kept, none set by default)
            found_values.append(value)
        self._tags.keep_all(found_seqs, found_tags)
        return Chunk(found_seqs, found_values, next_seq)

    def _counts(self, first: int, last: int) -> dict[int, bytes]:
        """The group's kept counts from ``first`` to ``last``: one short walk, and none
        at all past its highest count (only messages delivered more than once have one)."""
        group_id = self.group.id
        if first > self._highest_counted():
            return {}
        counts = {}
        for key, count in self.store.iterate(keyspace.group_count_prefix(group_id),
                                             keyspace.group_count_key(group_id, first)):
            seq = keyspace.seq_at_end(key)
            if seq > last:
                break
            counts[seq] = count
        return counts

    def _highest_counted(self) -> int:
        """An upper bound of the seqs with a count: one seek a run, then kept."""
        if self._highest_count is None:
            self._highest_count = -1
            for key, _ in self.store.iterate_reverse(keyspace.group_count_prefix(self.group.id)):
                self._highest_count = keyspace.seq_at_end(key)
                break
        return self._highest_count

    def _with_count(self, seq: int, value: bytes, count: bytes | None) -> bytes:
        """The record with this group's bookkeeping (the stored one is ``default``'s)."""
        if count is None:
            return without_bookkeeping(value)
        self._counted.add(seq)
        return value[:record.BOOKKEEPING_OFFSET] + count + value[BOOKKEEPING_END:]

    def delivered_below(self) -> int:
        self.group.delivered_below = load_delivered_below(self.store, self.group.id)
        return self.group.delivered_below

    def keep_delivered_below(self, batch: Batch, seq: int) -> None:
        batch.put(keyspace.delivered_key(self.group.id), keyspace.SEQ.pack(seq))
        below, self.group.delivered_below = self.group.delivered_below, seq
        if self._highest_counted() >= below:  # (mostly a priority message's count)
            self._drop_passed_counts(batch, below, seq)

    def _drop_passed_counts(self, batch: Batch, start: int, end: int) -> None:
        """The counts kept from ``start`` to ``end`` of messages the group is done with
        (priority messages delivered ahead of its first deliveries: see _forget_count)
        go: how far its first deliveries went now covers them."""
        group_id = self.group.id
        for key, _ in self.store.iterate(keyspace.group_count_prefix(group_id),
                                         keyspace.group_count_key(group_id, start),
                                         values=False):
            seq = keyspace.seq_at_end(key)
            if seq >= end:
                break
            if self.topics.is_done(group_id, seq) or self.store.get_own(seq) is None:
                batch.delete(key)
                self._counted.discard(seq)

    def rewrite(self, batch: Batch, seq: int, value: bytes) -> None:
        """The group's count of a message delivered again (the record's is default's)."""
        batch.put(keyspace.group_count_key(self.group.id, seq),
                  value[record.BOOKKEEPING_OFFSET:BOOKKEEPING_END])
        self._counted.add(seq)
        self._highest_count = max(self._highest_counted(), seq)

    def _forget_count(self, batch: Batch, seq: int) -> None:
        """The group is done with the message: its count goes. One at or past how far
        the group's first deliveries went (a priority message, sent ahead of them)
        keeps a count of 1 instead, the only record that it went out, so a seek back
        counts it from 2 as any other; it goes once they pass it."""
        if seq in self._counted:
            self._counted.discard(seq)
            key = keyspace.group_count_key(self.group.id, seq)
            if seq < self.group.delivered_below:
                batch.delete(key)
            else:
                batch.put(key, ONCE)

    def _values(self, seqs: list[int]) -> tuple[list[bytes | None], bool]:
        """The stored records of ``seqs`` (ascending; None: not stored), from the reads
        kept for the topic's other groups where it has others; else one walk of the own
        messages when the topic fills most of the span, or a read each. (The log walk
        found the seqs: a record kept of a message deleted since is never asked for.)
        Where the topic has other groups, the records come with ``default``'s counts
        zeroed, as kept for them (so each group need not look: True)."""
        shared = len(self.group.topic.groups) > 1
        kept: list[bytes | None] | None = None
        if shared:
            reads = self.topics.recent_reads
            kept = reads.get(seqs)  # another group's of the same stretch
            if kept is not None:
                return kept, True
            # not that list: what the kept reads hold of its seqs (none, at once, for
            # the first group's read of new messages, mostly)
            kept = reads.each_of(seqs, as_kept)
            if all(kept):  # (no None: a record is never empty)
                reads.keep(seqs, kept, kept)
                return kept, True
        found = self._stored(seqs, kept)
        if not shared:
            return found, False
        if any(map(ZERO_BOOKKEEPING.__ne__, map(BOOKKEEPING_OF, filter(None, found)))):
            found = [None if value is None else without_bookkeeping(value) for value in found]
        self.topics.recent_reads.keep(seqs, found, found, longest(found))
        return found, True

    def _stored(self, seqs: list[int], kept: list[bytes | None] | None
                ) -> list[bytes | None]:
        """The records of ``seqs`` read from the store: a run's values alone in one walk
        (no keys), a span the topic fills most of in one walk of its keys and values,
        else a read each of those not ``kept`` (where the topic's groups share them)."""
        if len(seqs) >= DENSE_AT_LEAST and seqs[-1] - seqs[0] == len(seqs) - 1:
            # a run (ascending, each once: every seq of the span): its values alone
            run = self.store.read_run(keyspace.own_key(seqs[0]), keyspace.own_key(seqs[-1] + 1),
                                      len(seqs))
            if len(run) == len(seqs):
                return cast(list[bytes | None], run)  # every record of the run, in order
        if len(seqs) >= DENSE_AT_LEAST and seqs[-1] - seqs[0] < 2 * len(seqs):
            first, last = seqs[0], seqs[-1]
            last_key = keyspace.own_key(last)
            pairs = self.store.read_up_to(keyspace.OWN_PREFIX, keyspace.own_key(first),
                                          last_key, last - first + 1)
            if len(pairs) == len(seqs) == last - first + 1 and pairs[-1][0] == last_key:
                return list(map(VALUE, pairs))  # every seq of the span, in order
            walked = dict(zip(map(int.from_bytes, map(OWN_SEQ, map(KEY, pairs))),
                              map(VALUE, pairs), strict=True))
            return list(map(walked.get, seqs))
        if kept is not None:
            get_own = self.store.get_own
            return [value or get_own(seq) for seq, value in zip(seqs, kept, strict=True)]
        return self.store.get_all(list(keyspace.own_keys(seqs)))

    def get(self, seq: int) -> bytes | None:
        value = self.store.get_own(seq)
        if value is None or self.topics.is_done(self.group.id, seq):
            return None
        topic, tag = self.topics.describe(value)
        if topic is not self.group.topic or not self.group.holds(seq, tag):
            return None
        self._tags.keep(seq, tag)
        return self._with_count(seq, value,
                                self.store.get(keyspace.group_count_key(self.group.id, seq)))

    def _tag(self, seq: int) -> bytes | None:
        tag = self._tags.pop(seq)
        if tag is None:
            value = self.store.get_own(seq)
            tag = None if value is None else self.topics.describe(value)[1]
        return tag

    def group_names(self, seq: int) -> tuple[str, ...]:
        """For the archive: the groups that were done with the message."""
        tag = self._tags.get(seq)
        return () if tag is None else self.group.topic.holder_names(seq, tag)

    def would_release(self, seq: int) -> bool:
        tag = self._tags.get(seq)
        if tag is None:
            tag = self._tag(seq)
            if tag is None:
                return False
            self._tags.keep(seq, tag)
        return self.topics.would_release(seq, self.group.topic, tag, self.group.id)

    def group_names_all(self, seqs: list[int]) -> list[tuple[str, ...]]:
        tags, every = self._tags.get_all(seqs)
        if not every:
            return names_each(self, seqs)
        return self.group.topic.holder_names_all(seqs, cast(list[bytes], tags))

    def would_release_all(self, seqs: list[int]) -> list[bool]:
        """``would_release`` of each, in bulk where every tag was kept (an ACK's many)."""
        tags, every = self._tags.get_all(seqs)
        if not every:
            return release_each(self, seqs)
        return self.topics.would_release_all(self.group.topic, self.group.id, seqs,
                                             cast(list[bytes], tags))

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        self._forget_count(batch, seq)
        tag = self._tag(seq)
        if tag is not None:
            self.topics.done(batch, seq, self.group.topic, tag, size, self.group.id)

    def delete_all(self, batch: Batch, seqs: list[int], sizes: list[int],
                   ascending: bool = False) -> list[bool]:
        """``delete`` of each seq, the topic's bookkeeping done for all at once; for
        each, whether it left the store (no other group holds it). ``ascending``: the
        seqs are ascending, each once (an ACK of a read's runs: a run's blocks' masks
        are made with one shift, no look at each seq)."""
        if self._counted:  # delivered more than once: their counts go
            for seq in self._counted.intersection(seqs):
                self._forget_count(batch, seq)
        tags, every, masks = self._tags.pop_all_masked(seqs, ascending)
        if not every:
            return self._delete_read_again(batch, seqs, tags, sizes)
        return self.topics.done_all(batch, self.group.topic, self.group.id, seqs,
                                    cast(list[bytes], tags), sizes, masks)

    def _delete_read_again(self, batch: Batch, seqs: list[int], tags: list[bytes | None],
                           sizes: list[int]) -> list[bool]:
        """``delete_all`` where some tags were not kept (read from the store again);
        a message no longer stored is not done with here (not final)."""
        tags = [self._tag(seq) if tag is None else tag
                for seq, tag in zip(seqs, tags, strict=True)]
        known = [tag is not None for tag in tags]
        released = iter(self.topics.done_all(
            batch, self.group.topic, self.group.id, list(compress(seqs, known)),
            cast(list[bytes], list(compress(tags, known))), list(compress(sizes, known))))
        return [next(released) if stored else False for stored in known]

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        self._forget_count(batch, seq)
        tag = self._tag(seq)
        if tag is not None:
            give_up(self.topics, batch, seq, self.group.topic, tag, value, self.group.id)


def give_up(topics: Topics, batch: Batch, seq: int, topic: Topic, tag: bytes, value: bytes,
            group_id: int) -> None:
    """A group gave the message up (delivered too often). The last group holding it
    moves it to the node's dead letters, where it stays whether or not archiving it
    works, as pzq-ctl shows and requeues it; else the group is done and the others go on."""
    if topics.would_release(seq, topic, tag, group_id):
        batch.dead_letter(seq, value, len(value))
        topics.drop(batch, seq, topic, tag, len(value), group_id)
    else:
        topics.done(batch, seq, topic, tag, len(value), group_id)
