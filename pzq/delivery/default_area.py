"""The store area of the group ``default`` on --send-dsn, for DeliveryState: every own
message in arrival order, as before, less what ``default`` is done with while other
groups still hold it (see pzq.store.topics for who holds a message)."""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import cast

from pzq.bulk import each
from pzq.delivery.areas import (
    LOOK_AT_MOST,
    Chunk,
    OwnArea,
    delete_each,
    names_each,
    release_each,
)
from pzq.delivery.groups import give_up
from pzq.store import record
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import DEFAULT_GROUP_ID, DEFAULT_UNCLAIMED, Topic, Topics

SEQ_OF, VALUE_OF = itemgetter(0), itemgetter(1)  # of what a read found


class DefaultArea(OwnArea):
    def __init__(self, store: Store, topics: Topics) -> None:
        super().__init__(store)
        self.topics = topics
        # Topic and tag of messages read and not yet done with, so an ACK needs no read.
        self._described: dict[int, tuple[Topic, bytes]] = {}

    def read(self, start_seq: int, limit: int) -> Chunk:
        """Up to ``limit`` messages from ``start_seq`` on that ``default`` still holds,
        reading on past those it does not (within LOOK_AT_MOST)."""
        looked = 0
        while True:
            chunk = self.store.read_own(start_seq, limit)
            kept = self._keep(chunk)
            if len(chunk) < limit:  # the walk reached the end
                return Chunk.of_pairs(kept, max(start_seq, self.end_seq()))
            start_seq = chunk[-1][0] + 1
            looked += len(chunk)
            if kept or looked >= LOOK_AT_MOST:
                return Chunk.of_pairs(kept, start_seq)

    def holds(self, seq: int, value: bytes) -> bool:
        return bool(self._keep([(seq, value)]))

    def _keep(self, chunk: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        # ``default`` leaves marks only while named groups exist
        done = (self.topics.done_among(DEFAULT_GROUP_ID, [seq for seq, _ in chunk],
                                       ascending=True)  # (a walk of the store's keys)
                if self.topics.named_groups else set())
        if self.topics.default_restricted:
            return self._keep_held(chunk, done)
        kept = [found for found in chunk if found[0] not in done] if done else chunk
        if kept:  # each distinct header group described once (mostly one a read)
            values = list(map(VALUE_OF, kept))
            groups = record.header_groups(values)
            firsts = dict(zip(reversed(groups), reversed(values), strict=True))
            about = dict(zip(firsts, map(self.topics.describe, firsts.values()), strict=True))
            self._described.update(zip(map(SEQ_OF, kept), map(about.__getitem__, groups),
                                       strict=True))
        return kept

    def _keep_held(self, chunk: list[tuple[int, bytes]], done: set[int]
                   ) -> list[tuple[int, bytes]]:
        """``_keep`` while some topics keep their messages from ``default``: each
        message's holders asked."""
        kept = []
        for seq, value in chunk:
            if seq in done:
                continue
            topic, tag = self.topics.describe(value)
            if DEFAULT_GROUP_ID not in topic.holders(seq, tag):
                continue
            self._described[seq] = (topic, tag)
            kept.append((seq, value))
        return kept

    def get(self, seq: int) -> bytes | None:
        value = self.store.get_own(seq)
        if value is None or self.topics.is_done(DEFAULT_GROUP_ID, seq):
            return None
        return value

    def delivered_below(self) -> int:
        self.topics.default_delivered_below = super().delivered_below()
        return self.topics.default_delivered_below

    def keep_delivered_below(self, batch: Batch, seq: int) -> None:
        super().keep_delivered_below(batch, seq)
        self.topics.default_delivered_below = seq

    def _about(self, seq: int) -> tuple[Topic, bytes] | None:
        found = self._described.get(seq)
        if found is None:
            value = self.store.get_own(seq)
            if value is None:
                return None
            found = self.topics.describe(value)
        return found

    def group_names(self, seq: int) -> tuple[str, ...]:
        """For the archive: the groups that were done with the message."""
        about = self._about(seq)
        return () if about is None else about[0].holder_names(seq, about[1])

    def would_release(self, seq: int) -> bool:
        """Whether an ACK by ``default`` deletes the message (then it is archived and
        its copies removed; else other groups still hold it)."""
        if not self.topics.named_groups:
            return True
        about = self._about(seq)
        return about is None or self.topics.would_release(seq, *about, DEFAULT_GROUP_ID)

    def group_names_all(self, seqs: list[int]) -> list[tuple[str, ...]]:
        about = self._one_topic(seqs)
        return names_each(self, seqs) if about is None else about[0].holder_names_all(seqs,
                                                                                      about[1])

    def would_release_all(self, seqs: list[int]) -> list[bool]:
        if not self.topics.named_groups:
            return [True] * len(seqs)
        about = self._one_topic(seqs)
        return (release_each(self, seqs) if about is None
                else self.topics.would_release_all(about[0], DEFAULT_GROUP_ID, seqs, about[1]))

    def _one_topic(self, seqs: list[int]) -> tuple[Topic, list[bytes]] | None:
        """The topic and tags of ``seqs`` when every one was read here and all are of
        one topic (an ACK's many, mostly); else None."""
        abouts = list(map(self._described.get, seqs))
        if not abouts or None in abouts:
            return None
        topic = cast(tuple[Topic, bytes], abouts[0])[0]
        known = cast(list[tuple[Topic, bytes]], abouts)
        if [about for about in known if about[0] is not topic]:
            return None
        return topic, [tag for _, tag in known]

    def delete(self, batch: Batch, seq: int, size: int) -> None:
        about = self._about(seq)
        self._described.pop(seq, None)
        if about is None:
            batch.delete_message(seq, size)  # gone already: a delete changes nothing
            return
        topic = about[0]
        if topic.default_rule == DEFAULT_UNCLAIMED and not topic.groups:
            self.topics.keep_default(topic)  # read on --send-dsn: it stays so
        self.topics.done(batch, seq, *about, size, DEFAULT_GROUP_ID)

    def delete_all(self, batch: Batch, seqs: list[int], sizes: list[int],
                   ascending: bool = False) -> list[bool]:
        """``delete`` of each seq, in bulk when every one was read here and they are of
        one topic (the common ACK); else one by one."""
        about = self._one_topic(seqs)
        if about is None:
            return delete_each(self, batch, seqs, sizes)
        topic, tags = about
        each(self._described.pop, seqs, repeat(None))
        if topic.default_rule == DEFAULT_UNCLAIMED and not topic.groups:
            self.topics.keep_default(topic)  # read on --send-dsn: it stays so
        return self.topics.done_all(batch, topic, DEFAULT_GROUP_ID, seqs, tags, sizes)

    def dead_letter(self, batch: Batch, seq: int, value: bytes) -> None:
        topic, tag = self._about(seq) or self.topics.describe(value)
        self._described.pop(seq, None)
        give_up(self.topics, batch, seq, topic, tag, value, DEFAULT_GROUP_ID)
