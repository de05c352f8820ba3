"""Topics and consumer groups in the store: one stored copy of each message, many readers.

Every own message stays once under ``m <seq>`` (arrival order across all topics: the
group ``default`` on --send-dsn walks it as before). A topic with a named group also
has a log of its messages' seqs by TAG, in blocks (pzq.store.log_blocks), so a group
of one topic reads only that topic and filters without reading bodies (see
pzq.store.topic_log; who holds a message: pzq.store.topic_model).

A message is deleted (and archived, once) when every group holding it is done with
it: acked or dead-lettered. A group done before the others leaves a mark ``a <group>
<seq>`` (pzq.store.group_marks); the last one deletes the message and the marks. A
message only ``default`` holds is deleted at its ACK as it always was.

Per topic the node keeps its stored messages and bytes; they ride along with each
batch that changes them, as the store's own counters do, so nothing is counted by a
scan. The registries of topics and groups, which Topics is built on, are
pzq.store.topic_registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import compress, repeat
from operator import and_, invert, not_

from pzq.bulk import lowest
from pzq.errors import PzqError
from pzq.logs import get_logger
from pzq.protocol.headers import topic_and_tag
from pzq.store import record, topic_log
from pzq.store.batch import Batch
from pzq.store.group_marks import (
    FIRST_OF,
    MASK_OF,
    GroupMarks,
    Masks,
    answers_of,
    block_masks,
    lowest_masked,
)
from pzq.store.kept_reads import KeptReads
from pzq.store.keyspace import MARK_BLOCK_OF
from pzq.store.store import Store
from pzq.store.topic_model import (
    DEFAULT_ALL,
    DEFAULT_GROUP_ID,
    DEFAULT_NONE,
    DEFAULT_ONLY,
    DEFAULT_UNCLAIMED,
    START_EARLIEST,
    START_LATEST,
    Group,
    Topic,
    filter_takes,
    validate_name,
)
from pzq.store.topic_registry import TopicRegistry

__all__ = ["DEFAULT_ALL", "DEFAULT_GROUP_ID", "DEFAULT_NONE", "DEFAULT_ONLY",
           "DEFAULT_UNCLAIMED", "START_EARLIEST",
           "START_LATEST", "Group", "Topic", "Topics", "filter_takes", "validate_name"]

log = get_logger("pzq.topics")

NOT_ASKED = (-1, -1, False)


class Topics(TopicRegistry):
    """The topics and groups of this node's own messages, and who is done with what."""

    def __init__(self, store: Store, default_topic: str) -> None:
        self.marks = GroupMarks(store)
        self._release_asked = NOT_ASKED  # group id, seq, would_release's answer
        # Reads' seqs (the log's own lists, pzq.store.log_blocks: the same objects while
        # their stretch of the log is unchanged) and their records (default's counts
        # zeroed), by the list's id: another group reading the same stretch takes the
        # list, not the store's records again (one read of a body for all groups,
        # mostly); one reading elsewhere in it takes what they hold of its seqs.
        self.recent_reads: KeptReads[list[bytes | None]] = KeptReads()
        super().__init__(store, default_topic)

    # -- the logs ----------------------------------------------------------------

    def walk(self, topic: Topic) -> Iterator[tuple[int, bytes]]:
        """(seq, tag) of the topic's stored messages (an operator's walk)."""
        return topic_log.walk(self.store, self.logs, topic, self.default_topic)

    def first_stored_since(self, topic: Topic, since_us: int) -> int:
        return topic_log.first_stored_since(self.store, self.logs, topic, self.default_topic,
                                            since_us)

    def backfill_due(self) -> bool:
        return bool(self._backfilling)

    def move_start(self, group: Group, start_seq: int) -> None:
        """An operator moved the group's start back (a seek): it holds the topic's
        messages from there on, counted now where logged and by a backfill below."""
        topic = group.topic
        if topic.log_from is not None:
            group.backlog += self.logs.count(topic.id, max(start_seq, topic.log_from),
                                             group.start_seq, group.takes)
        group.start_seq = start_seq
        if topic.log_short():
            self._backfilling.add(topic)
            self.on_backfill()
        self.counts.dirty_groups.add(group)

    def not_done(self, batch: Batch, group: Group, seq: int) -> None:
        """The group is to deliver the message again (a seek back): its mark goes."""
        self.marks.unmark(batch, group.id, seq)
        if self.counted(group.topic, seq):
            self.counts.count_group(group, 1)

    def backfill(self, limit: int = topic_log.BACKFILL_CHUNK) -> None:
        """Index one chunk of the stored messages of a topic whose log does not yet
        reach back as far as one of its groups starts, in a batch of its own."""
        topic = next(iter(self._backfilling))
        down_to = topic.log_wanted_from()
        if not topic.log_short() or topic.log_from is None or down_to is None:
            self._backfilling.discard(topic)  # its groups went meanwhile
            return
        before = topic.log_from
        batch = self.store.begin()
        indexed, topic.log_from = topic_log.backfill_chunk(self.store, self.logs, batch, topic,
                                                           down_to, self.default_topic, limit)
        for seq, tag in indexed:
            for group in topic.groups.values():
                if group.holds(seq, tag) and not self.is_done(group.id, seq):
                    self.counts.count_group(group, 1)  # (done: emptied by an operator meanwhile)
        self.changed(topic)
        try:
            self.store.commit(batch)
        except PzqError as exc:
            topic.log_from = before
            log.warning("topic_backfill_failed", topic=topic.name, error=str(exc))
            return
        if not topic.log_short():
            self._backfilling.discard(topic)
            log.info("topic_backfilled", topic=topic.name, log_from=topic.log_from)


    # -- messages --------------------------------------------------------------

    def note_new(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int) -> None:
        """Note a new own message in its topic: its topic log entry (a topic with named
        groups), and the topic's counters."""
        self.note_new_run(batch, topic, tag, [seq], size)

    def note_new_run(self, batch: Batch, topic: Topic, tag: bytes, seqs: list[int],
                     size: int) -> None:
        """New own messages of one topic and tag, ``seqs`` ascending and ``size`` their
        bytes: as ``note_new`` for each, with the counts changed once."""
        self.counts.count(topic, len(seqs), size)
        topic.received += len(seqs)
        topic.newest = seqs[-1]
        if topic.log_from is None:
            return
        self.logs.add(batch, topic.id, tag, seqs)
        for group in topic.groups.values():
            if group.takes(tag):
                start = group.start_seq
                held = len(seqs) if seqs[0] >= start else sum(seq >= start for seq in seqs)
                self.counts.count_group(group, held)

    def describe(self, value: bytes) -> tuple[Topic, bytes]:
        """The topic and tag of a stored record."""
        headers = record.headers_of(value)
        name, tag = (topic_and_tag(headers, self.default_topic) if headers
                     else (self.default_topic, b""))
        found = self.topics.get(name)
        return found or self.topic(name, record.stored_us_of(value)), tag

    def is_done(self, group_id: int, seq: int) -> bool:
        return self.marks.is_done(group_id, seq)

    def done_among(self, group_id: int, seqs: list[int], ascending: bool = False) -> set[int]:
        """``GroupMarks.done_among`` (``ascending``: the seqs are, each once)."""
        return self.marks.done_among(group_id, seqs, ascending)

    def would_release(self, seq: int, topic: Topic, tag: bytes, group_id: int) -> bool:
        """Whether ``group_id`` being done with the message deletes it (kept for the
        ``done`` that follows, so an ACK looks at the other groups' marks once)."""
        asked = self._release_asked
        if asked[0] == group_id and asked[1] == seq:
            return asked[2]
        answer = self._releases(seq, topic.holders(seq, tag), group_id)
        self._release_asked = (group_id, seq, answer)
        return answer

    def would_release_all(self, topic: Topic, group_id: int, seqs: list[int],
                          tags: list[bytes]) -> list[bool]:
        """``would_release`` of each message of one topic (``seqs`` with their ``tags``),
        the other holders' marks read in C where the same groups hold every one (an
        ACK's many, archived before their ``done_all``)."""
        if not self._named_groups:  # the single queue: nobody else holds anything
            return [True] * len(seqs)
        settled = self._settled_holders(topic, group_id, seqs, tags, lowest(seqs, 0))
        if settled is None:
            return list(map(self.would_release, seqs, repeat(topic), tags, repeat(group_id)))
        return self.marks.done_by_all(settled[1], seqs)

    def _releases(self, seq: int, holders: list[int], group_id: int) -> bool:
        for holder in holders:
            if holder != group_id and not self.is_done(holder, seq):
                return False
        return True

    def done(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int,
             group_id: int) -> bool:
        """``group_id`` is done with the message: delete it if every holder is, else mark
        it. Returns True when the message was deleted."""
        if not self._named_groups:  # the single queue: nobody else holds anything
            batch.delete_message(seq, size)
            self._leave(batch, seq, topic, (), size)
            return True
        holders = topic.holders(seq, tag)
        if group_id != DEFAULT_GROUP_ID and self.counted(topic, seq):
            group = self._group_by_id(topic, group_id)
            if group is not None:
                self.counts.count_group(group, -1)
        asked = self._release_asked
        release = (asked[2] if asked[0] == group_id and asked[1] == seq
                   else self._releases(seq, holders, group_id))
        self._release_asked = NOT_ASKED
        if not release:
            if group_id in holders:  # else its ACK came after it let go: nothing to mark
                self.marks.mark(batch, group_id, seq)
            return False
        batch.delete_message(seq, size)
        self._leave(batch, seq, topic, [holder for holder in holders if holder != group_id],
                    size)
        return True

    def drop(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int,
             group_id: int) -> None:
        """The message leaves its topic (deleted, or moved to the dead letters): its log
        entry, the other groups' marks, and its count go."""
        self._release_asked = NOT_ASKED
        others = [holder for holder in topic.holders(seq, tag) if holder != group_id]
        group = self._group_by_id(topic, group_id) if group_id != DEFAULT_GROUP_ID else None
        if group is not None and self.counted(topic, seq):
            self.counts.count_group(group, -1)
        self._leave(batch, seq, topic, others, size)

    def done_all(self, batch: Batch, topic: Topic, group_id: int, seqs: list[int],
                 tags: list[bytes], sizes: list[int], masks: Masks | None = None
                 ) -> list[bool]:
        """``done`` for many messages of one topic by one group (each seq with its tag
        and size): who holds them is worked out once per tag where the seq no longer
        matters, the counts change once, the deletes go in bulk. For each, whether the
        message was deleted. ``masks``: the seqs' ``block_masks``, when made already
        (the marks and the log's blocks are changed with them, not made again)."""
        self._release_asked = NOT_ASKED
        if not self._named_groups:  # the single queue: nobody else holds anything
            self._leave_all(batch, topic, seqs, sum(sizes))
            return [True] * len(seqs)
        group = self._group_by_id(topic, group_id) if group_id != DEFAULT_GROUP_ID else None
        low = lowest(seqs, 0) if masks is None else lowest_masked(masks)
        if group is not None and topic.log_from is not None:
            # counted(): mostly every one (a compare each in C, no call)
            uncounted = (len(seqs) if low >= topic.log_from
                         else sum(map(topic.log_from.__le__, seqs)))
            if uncounted:
                self.counts.count_group(group, -uncounted)
        settled = self._settled_holders(topic, group_id, seqs, tags, low)
        if settled is not None and not settled[1]:  # no other holder: every one leaves
            self._leave_all(batch, topic, seqs, sum(sizes), masks)
            return [True] * len(seqs)
        if settled is not None:
            return self._done_by_marks(batch, topic, group_id, seqs, sizes, *settled,
                                       masks=block_masks(seqs) if masks is None else masks)
        released, leaving, marked = self._release_or_mark(topic, group_id, seqs, tags)
        for seq in marked:
            self.marks.mark(batch, group_id, seq)
        for seq, _, others in leaving:
            for holder in others:
                self.marks.unmark(batch, holder, seq)
        self._leave_all(batch, topic, [seq for seq, _, _ in leaving],
                        sum([sizes[at] for _, at, _ in leaving]))
        return released

    @staticmethod
    def _settled_holders(topic: Topic, group_id: int, seqs: list[int], tags: list[bytes],
                         low: int) -> tuple[list[int], list[int]] | None:
        """Who holds every one of the messages (``low``: the lowest seq), and who of them
        is not ``group_id``, when that is the same for all (known from their tags
        alone); else None."""
        settled_from = topic.holders_settled_from()  # (once: a walk of the groups)
        if not tags or low < settled_from:
            return None
        # mostly one tag object for all: a count by identity in C, the holders asked
        # once, no set of them
        first = tags[0]
        holders = topic.holders(settled_from, first)
        if tags.count(first) != len(tags):
            for tag in set(tags):
                if topic.holders(settled_from, tag) != holders:
                    return None
        return holders, list(filter(group_id.__ne__, holders))

    def _done_by_marks(self, batch: Batch, topic: Topic, group_id: int, seqs: list[int],
                       sizes: list[int], holders: list[int], others: list[int],
                       masks: Masks) -> list[bool]:
        """``done_all`` where the same other groups hold every message: those every
        other holder is done with leave the store with their marks, the rest are
        marked done for ``group_id`` (``masks``: the seqs' blocks' masks, for each of
        these where it is all of them)."""
        done = self.marks.done_by_all_masks(others, masks)
        wanted = list(map(MASK_OF, masks))
        # mostly all or none of an ACK's messages leave (the last group's or another's)
        kept_masks = gone_masks = masks
        if not any(done):
            released = [False] * len(seqs)
            kept: list[int] = seqs
            gone: list[int] = []
        elif done == wanted:
            released = [True] * len(seqs)
            kept, gone = [], seqs
        else:  # the blocks' masks of each part: the done bits, and the rest
            released = answers_of(seqs, masks, done)
            kept = list(compress(seqs, map(not_, released)))
            gone = list(compress(seqs, released))
            firsts = list(map(FIRST_OF, masks))
            kept_masks = list(zip(firsts, map(and_, wanted, map(invert, done)), strict=True))
            gone_masks = list(zip(firsts, done, strict=True))
        if group_id in holders:  # else its ACK came after it let go: nothing to mark
            self.marks.mark_all(batch, group_id, kept, kept_masks)
        if gone:
            self.marks.unmark_groups(batch, others, gone, gone_masks)
            self._leave_all(batch, topic, gone,
                            sum(sizes) if gone is seqs else sum(compress(sizes, released)),
                            gone_masks)
        return released

    def _release_or_mark(self, topic: Topic, group_id: int, seqs: list[int],
                         tags: list[bytes]
                         ) -> tuple[list[bool], list[tuple[int, int, list[int]]], list[int]]:
        """For each message whether it leaves the store (every other holder is done with
        it); those that leave (seq, index, the other holders); the seqs to mark done."""
        # where every holder has started, who holds a message depends on its tag alone
        settled_from = topic.holders_settled_from()
        by_tag: dict[bytes, tuple[list[int], list[int]]] = {}  # holders, those but group_id
        released: list[bool] = []
        leaving: list[tuple[int, int, list[int]]] = []
        marked: list[int] = []
        for at, (seq, tag) in enumerate(zip(seqs, tags, strict=True)):
            found = by_tag.get(tag) if seq >= settled_from else None
            if found is None:
                found = _holders_besides(topic, seq, tag, group_id)
                if seq >= settled_from:
                    by_tag[tag] = found
            holders, others = found
            release = not others or self._all_done(others, seq)
            released.append(release)
            if release:
                leaving.append((seq, at, others))
            elif group_id in holders:  # else its ACK came after it let go: nothing to mark
                marked.append(seq)
        return released, leaving, marked

    def _all_done(self, groups: list[int], seq: int) -> bool:
        is_done = self.marks.is_done
        for group_id in groups:
            if not is_done(group_id, seq):
                return False
        return True

    def _leave_all(self, batch: Batch, topic: Topic, seqs: list[int], size: int,
                   masks: Masks | None = None) -> None:
        """Messages (``size``: their bytes) deleted from the store: their log entries
        and their counts (``_leave`` for many; the other groups' marks go before;
        ``masks``: the seqs' ``block_masks``, when made already)."""
        if not seqs:
            return
        batch.delete_messages(seqs, size)
        if topic.log_from is not None:
            self.logs.remove(batch, topic.id, seqs, masks)
        self.counts.count(topic, -len(seqs), -size)

    def _leave(self, batch: Batch, seq: int, topic: Topic, others: Iterable[int],
               size: int) -> None:
        if topic.log_from is not None:
            first = seq & MARK_BLOCK_OF  # its bit (its block written once a batch)
            self.logs.clear(batch, topic.id, first, 1 << (seq - first))
        for holder in others:
            self.marks.unmark(batch, holder, seq)
        self.counts.count(topic, -1, -size)

    @staticmethod
    def _group_by_id(topic: Topic, group_id: int) -> Group | None:
        for group in topic.groups.values():
            if group.id == group_id:
                return group
        return None

    @staticmethod
    def counted(topic: Topic, seq: int) -> bool:
        """Whether the message is in its groups' backlogs: its log entry is written (a
        backfill counts the older ones as it indexes them)."""
        return topic.log_from is not None and seq >= topic.log_from

    # -- batches -----------------------------------------------------------------

    def written(self) -> None:
        self.marks.written()
        super().written()  # (not by ``_batch_ended``: its calls on every batch)
        self._release_asked = NOT_ASKED

    def failed(self) -> None:
        self.marks.failed()
        self.logs.failed()
        self.recent_reads.clear()  # as the logs: nothing read stays kept across a failed batch
        super().failed()

    def _batch_ended(self) -> None:
        """The delivery states redo the deletes and marks a failed batch still owed."""
        super()._batch_ended()
        self._release_asked = NOT_ASKED


def _holders_besides(topic: Topic, seq: int, tag: bytes, group_id: int
                     ) -> tuple[list[int], list[int]]:
    """Who holds the message, and who of them is not ``group_id``."""
    holders = topic.holders(seq, tag)
    return holders, [holder for holder in holders if holder != group_id]


