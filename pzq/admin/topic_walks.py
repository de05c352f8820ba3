"""Walks of a topic's messages for the operator's REMOVE and EMPTY (pzq.admin.topic_admin):
what goes is deleted, or marked done for a group, in one batch, the holders of the
copies told in that batch; then the deliveries in memory let go of it. An operator's
command, not the hot path: the topic's log is walked once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pzq.delivery.state import DeliveryState
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.serving.named_groups import NamedGroups
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.store import Store
from pzq.store.topics import DEFAULT_GROUP_ID, Group, Topic, Topics


class Holders(Protocol):
    """Who holds copies of own messages (pzq.cluster.lone.Cluster; nobody without a
    cluster): own messages deleted, and those a group is now done with, are owed to
    them in the batch that deletes or marks them."""

    def tell_holders(self, batch: Batch, removed: list[int], group: str, done: list[int],
                     now: float) -> None: ...


class TopicWalks:
    def __init__(self, store: Store, topics: Topics, consume: NamedGroups,
                 default: DeliveryState, holders: Holders) -> None:
        self.store = store
        self.topics = topics
        self.consume = consume  # the named groups of --consume-dsn
        self.default = default  # ``default``'s delivery state (--send-dsn)
        self.holders = holders

    def releasable(self, topic: Topic, gone: int) -> Callable[[int, bytes], bool]:
        """After ``gone`` left: a message no remaining holder still needs."""
        def check(seq: int, tag: bytes) -> bool:
            return all(self.topics.is_done(holder, seq) for holder in topic.holders(seq, tag)
                       if holder != gone)
        return check

    def delete(self, topic: Topic, delete: Callable[[int, bytes], bool], mono: float,
               drop_groups: tuple[str, ...] = (), removed: tuple[Group, ...] = ()) -> int:
        """Delete the topic's messages ``delete`` picks, with their marks, in one batch."""
        batch = self.store.begin_settled()
        holders_of = {group.id for group in (*topic.groups.values(), *removed)}
        holders_of.add(DEFAULT_GROUP_ID)
        deleted = []
        for seq, tag in self.topics.walk(topic):
            if not delete(seq, tag):
                continue
            value = self.store.get_own(seq)
            if value is not None:
                batch.delete_message(seq, len(value))
                self.topics.counts.count(topic, -1, -len(value))
                self._out_of_backlogs(topic, seq, tag)
            for holder in holders_of:
                batch.delete(keyspace.group_count_key(holder, seq))
            deleted.append(seq)
        self.topics.logs.remove(batch, topic.id, deleted)  # one write a block, as the marks
        for holder in holders_of:  # their marks: the bits cleared, one write a block
            self.topics.marks.unmark_all(batch, holder, deleted)
        self.holders.tell_holders(batch, deleted, DEFAULT_GROUP, [], mono)
        for group in removed:
            batch.delete(keyspace.group_key(topic.id, group.name.encode()))
            batch.delete(keyspace.counts_key(group.id))
            batch.delete(keyspace.delivered_key(group.id))
            for prefix in (keyspace.group_done_prefix(group.id),
                           keyspace.group_count_prefix(group.id),
                           keyspace.wait_prefix(group.id)):
                for key, _ in self.store.iterate(prefix, values=False):
                    batch.delete(key)
        self.store.commit(batch)
        self.topics.marks.reread()  # a removed group's marks went by key, not through Topics
        self.topics.group_removed()
        self._let_go(topic, deleted, drop_groups)
        return len(deleted)

    def _out_of_backlogs(self, topic: Topic, seq: int, tag: bytes) -> None:
        if not self.topics.counted(topic, seq):
            return
        for group in topic.groups.values():
            if group.holds(seq, tag) and not self.topics.is_done(group.id, seq):
                self.topics.counts.count_group(group, -1)

    def _let_go(self, topic: Topic, deleted: list[int], drop_groups: tuple[str, ...]) -> None:
        """Deleted messages and removed groups leave delivery."""
        for seq in deleted:
            self.default.forget(seq)
            self.consume.forget(seq)
        for name in drop_groups:
            self.consume.drop_group(topic, name)

    def mark_all_done(self, topic: Topic, group_id: int, name: str, mono: float) -> int:
        batch = self.store.begin_settled()
        deleted: list[int] = []  # the group was the last holder
        marked: list[int] = []  # other groups still hold them
        for seq, tag in self.topics.walk(topic):
            if group_id in topic.holders(seq, tag) and not self.topics.is_done(group_id, seq):
                value = self.store.get_own(seq)
                if value is not None:
                    gone = self.topics.done(batch, seq, topic, tag, len(value), group_id)
                    batch.delete(keyspace.group_count_key(group_id, seq))
                    (deleted if gone else marked).append(seq)
        self.holders.tell_holders(batch, deleted, name, marked, mono)
        found = self.consume.groups.get(group_id) if group_id != DEFAULT_GROUP_ID else None
        if found is not None:  # its waits end with this batch
            found.state.waits.end_below(self.store.next_seq, batch)
        self.store.commit(batch)
        self.forget_for(group_id)
        return len(deleted) + len(marked)

    def forget_for(self, group_id: int) -> None:
        """The group's deliveries in memory are done with: let them go."""
        if group_id == DEFAULT_GROUP_ID:
            return
        found = self.consume.groups.get(group_id)
        if found is not None:
            state = found.state
            for seq in [*state.inflight.entries(), *state.ready.entries(),
                        *state.delayed.entries()]:
                found.state.forget(seq.seq)
                found.release(found.key_of(found.own_id, seq.seq))
