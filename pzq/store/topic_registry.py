"""The registries of topics and consumer groups: read at start, changed by new
topics and by operators, written with the batch that changed them.

Topics and groups are ``t <topic>`` and ``g <topic id> <group>`` entries, their ids
taken from one counter, their counts beside them (pzq.store.topic_counts); the
registries are a few keys, read at start without reading any message. What follows
from every topic and group together (whether ``default`` reads each topic in full,
whether some topic has a named group) is worked out again after each change.
Who is done with which message is pzq.store.topics, built on this.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pzq.hooks import nothing
from pzq.protocol.cluster import DefaultReads
from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.log_blocks import LogBlocks
from pzq.store.store import Store
from pzq.store.topic_counts import TopicCounts
from pzq.store.topic_model import (
    COUNTS,
    DEFAULT_ALL,
    DEFAULT_NONE,
    DEFAULT_UNCLAIMED,
    FIRST_ID,
    ON_EXPIRE_DEAD,
    Group,
    Topic,
    validate_name,
)


class TopicRegistry(Participant):
    """This node's topics and groups, by name and by id."""

    def __init__(self, store: Store, default_topic: str) -> None:
        self.store = store
        self.default_topic = default_topic
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[int, Topic] = {}
        # Derived from the whole registry (``_registry_changed``), never from a part
        # of it: some topic is not read in full by ``default``; some has a named group.
        self.default_restricted = False
        self.default_delivered_below = 0  # how far its first deliveries went (for TOPICS)
        self._next_id = FIRST_ID
        # The next id as the store holds it: a batch writes it only when an id was
        # taken since (not once a batch: most batches take none).
        self._stored_next_id = FIRST_ID
        self._writing_next_id: int | None = None  # the value the batch being written puts
        self._batch: Batch | None = None
        self.counts = TopicCounts()  # what the batch being built changes
        self.logs = LogBlocks(store)  # the topics' logs, in blocks
        self._named_groups = False
        self._backfilling: set[Topic] = set()  # topics whose logs are short of a start
        self.on_backfill: Callable[[], None] = nothing  # told when one is added (the loop)
        self.max_ages: frozenset[int] = frozenset()  # the topics' max_ages (µs)
        self.on_ages: Callable[[], None] = nothing  # told when they change (the loop)
        self._load()

    # -- the registries ------------------------------------------------------

    def _load(self) -> None:
        stored = self.store.get(keyspace.META_NEXT_ID)
        self._next_id = keyspace.ID.unpack(stored)[0] if stored else FIRST_ID
        self._stored_next_id = self._next_id
        for key, value in self.store.iterate(keyspace.TOPIC_PREFIX):
            meta = json.loads(value)
            messages, stored_bytes = self._counts(meta["id"])
            # a store from before logs were kept only for topics with groups: complete
            topic = Topic(key[1:].decode(), meta["id"], messages, stored_bytes,
                          meta["default_from"], meta["created_us"], meta["max_messages"],
                          meta["max_bytes"], log_from=meta.get("log_from", 0),
                          dedup_window_us=meta.get("dedup_window_us", 0),
                          default_rule=meta.get("default_rule", _rule_before(meta)),
                          partitions=meta.get("partitions", 0),
                          max_age_us=meta.get("max_age_us", 0),
                          on_expire=meta.get("on_expire", ON_EXPIRE_DEAD),
                          priorities=meta.get("priorities", False))
            self._add_topic(topic)
        for key, value in self.store.iterate(keyspace.GROUP_PREFIX):
            meta = json.loads(value)
            owner = self.by_id[keyspace.ID.unpack_from(key, 1)[0]]
            name = key[1 + keyspace.ID.size:].decode()
            owner.groups[name] = Group(owner, name, meta["id"], meta["start_seq"],
                                       meta["filter"], meta["created_us"],
                                       *self._counts(meta["id"]),
                                       ack_timeout_us=meta.get("ack_timeout_us"),
                                       max_deliveries=meta.get("max_deliveries"),
                                       backoff_us=tuple(meta.get("backoff_us", ())))
        self._registry_changed()
        self._backfilling = {topic for topic in self.topics.values() if topic.log_short()}

    def _registry_changed(self) -> None:
        """What follows from every topic and group together, worked out again: after
        the whole registry is loaded (a topic read before its groups reads as if
        ``default`` held all of it) and after each change of a topic or group."""
        self.default_restricted = any(not topic.default_reads_all
                                      for topic in self.topics.values())
        self._named_groups = self.has_groups()
        # the shortest max_age of any topic (0: none): a message stored more recently
        # cannot be too old (pzq.delivery.expiry)
        self.age_limit_us = min((topic.max_age_us for topic in self.topics.values()
                                 if topic.max_age_us), default=0)
        max_ages = frozenset(topic.max_age_us for topic in self.topics.values()
                             if topic.max_age_us)
        if max_ages != self.max_ages:
            self.max_ages = max_ages
            self.on_ages()

    def _counts(self, owner_id: int) -> tuple[int, int]:
        stored = self.store.get(keyspace.counts_key(owner_id))
        return COUNTS.unpack(stored) if stored else (0, 0)

    def _add_topic(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.id] = topic

    def _take_id(self) -> int:
        taken, self._next_id = self._next_id, self._next_id + 1
        return taken

    def topic(self, name: str, now_us: int) -> Topic:
        """The topic of that name, made (and written with the next batch) when new."""
        found = self.topics.get(name)
        if found is None:
            found = Topic(validate_name("topic", name), self._take_id(), created_us=now_us)
            self._add_topic(found)  # read in full by ``default``: nothing derived changes
            self.counts.dirty.add(found)
            self._write_now(keyspace.topic_key(name.encode()), found.encode())
        return found

    def changed(self, topic: Topic) -> None:
        """An operator changed the topic's settings: write them with the next batch."""
        self.counts.dirty.add(topic)
        self._registry_changed()
        self._write_now(keyspace.topic_key(topic.name.encode()), topic.encode())

    def partition(self, topic: Topic, partitions: int) -> None:
        """Declare the topic partitioned; ValueError for another count than declared
        before (a key's partition depends on it)."""
        self.check_partitions(topic, partitions)
        if topic.partitions != partitions:
            topic.partitions = partitions
            self.changed(topic)

    @staticmethod
    def check_partitions(topic: Topic, partitions: int) -> None:
        """ValueError when the topic was declared with another partition count."""
        if topic.partitions and topic.partitions != partitions:
            raise ValueError(f"topic {topic.name} has {topic.partitions} partitions; "
                             "a partition count is fixed once declared")

    def keep_default(self, topic: Topic) -> None:
        """``default`` reads the topic beside its named groups from now on (declared,
        or a consumer on --send-dsn ACKed one of its messages)."""
        topic.keep_default(self.store.next_seq)
        self.changed(topic)

    def forget_topic(self, topic: Topic) -> None:
        """Remove a topic whose messages are gone: its entry and its groups'."""
        batch = self.store.begin()
        batch.delete(keyspace.topic_key(topic.name.encode()))
        batch.delete(keyspace.counts_key(topic.id))
        for group in topic.groups.values():
            batch.delete(keyspace.group_key(topic.id, group.name.encode()))
            batch.delete(keyspace.counts_key(group.id))
            batch.delete(keyspace.delivered_key(group.id))
            for key, _ in self.store.iterate(keyspace.wait_prefix(group.id), values=False):
                batch.delete(key)  # (its messages are gone: a wait left by a crash)
        self.counts.forget(topic)
        self.store.commit(batch)
        del self.topics[topic.name]
        del self.by_id[topic.id]
        self._backfilling.discard(topic)
        self._registry_changed()

    def room(self, topic: Topic, size: int) -> bool:
        """Whether the topic takes one more message under its own limits."""
        messages, stored = self.counts.pending(topic)
        return not ((topic.max_messages and topic.messages + messages >= topic.max_messages)
                    or (topic.max_bytes and topic.stored_bytes + stored >= topic.max_bytes))

    def _write_now(self, key: bytes, value: bytes) -> None:
        """Into the batch being built, if any, so that a batch holding nothing else
        is still written (before_write writes the final value)."""
        if self._batch is not None:
            self._batch.put(key, value)

    def add_group(self, topic: Topic, name: str, start_seq: int, pattern: str,
                  now_us: int) -> Group:
        """A new group; its backlog is counted in the topic's log (in memory)."""
        group = Group(topic, validate_name("group", name), self._take_id(), start_seq,
                      pattern, now_us)
        if topic.log_from is None:  # its first named group: the log starts here
            topic.log_from = self.store.next_seq
            self.changed(topic)
        group.backlog = self.logs.count(topic.id, start_seq, None, group.takes)
        topic.groups[name] = group
        self._registry_changed()
        if topic.log_short():
            self._backfilling.add(topic)
            self.on_backfill()
        self.counts.dirty_groups.add(group)
        self._write_now(keyspace.group_key(topic.id, name.encode()), group.encode())
        return group

    def default_reads(self) -> DefaultReads:
        """What ``default`` reads of these topics, for the peers holding copies."""
        if not self.default_restricted:
            return DefaultReads(self.default_topic, delivered_below=self.default_delivered_below)
        return DefaultReads(self.default_topic, {
            topic.name: topic.default_from for topic in self.topics.values()
            if topic.default_from != 0}, delivered_below=self.default_delivered_below,
            unclaimed=tuple(sorted(topic.name for topic in self.topics.values()
                                   if topic.groups and topic.default_rule == DEFAULT_UNCLAIMED)))

    def has_groups(self) -> bool:
        return any(topic.groups for topic in self.topics.values())

    def group_removed(self) -> None:
        self._registry_changed()
        self._backfilling = {topic for topic in self.topics.values() if topic.log_short()}

    @property
    def named_groups(self) -> bool:
        """Whether some topic has a named group (else ``default`` leaves no marks)."""
        return self._named_groups

    def groups(self) -> list[Group]:
        return [group for topic in self.topics.values() for group in topic.groups.values()]

    # -- batches -----------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        self._batch = batch
        if self.counts.dirty or self.counts.dirty_groups:
            self.counts.put_registry(batch)

    def before_write(self) -> None:
        """Counts, registry entries and the log blocks messages left go with the batch
        that changed them."""
        if self.logs.changed_in is not None:  # (most batches clear no block: no call)
            self.logs.flush()
        if self._batch is not None:
            self.counts.put_counts(self._batch)
            if self._next_id != self._stored_next_id:
                self._writing_next_id = self._next_id
                self._batch.put(keyspace.META_NEXT_ID, keyspace.ID.pack(self._next_id))

    def written(self) -> None:
        self.counts.applied()
        if self._writing_next_id is not None:
            self._stored_next_id = self._writing_next_id
        self._batch = self._writing_next_id = None  # (``_batch_ended``'s, on every batch)

    def failed(self) -> None:
        """Counts stay as they were; new topics and groups are written with the next
        batch."""
        self.counts.dropped()
        self._batch_ended()

    def _batch_ended(self) -> None:
        self._batch = None
        self._writing_next_id = None


def _rule_before(meta: dict[str, object]) -> str:
    """A topic from a store written before named groups took topics over: ``default``
    keeps reading it (nothing is let go by the upgrade) unless it had been removed."""
    return DEFAULT_NONE if meta["default_from"] is None else DEFAULT_ALL
