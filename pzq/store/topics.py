"""Topics and consumer groups in the store: one stored copy of each message, many readers.

Every own message stays once under ``m <seq>`` (arrival order across all topics: the
group ``default`` on --send-dsn walks it as before) and gets a small entry in its
topic's log ``i <topic> <seq>`` whose value is its TAG, so a group of one topic walks
only that topic and filters without reading bodies.

A group *holds* a message of its topic when the message's seq is at or past the
group's start and the group's filter takes its tag; ``default`` holds every message
of a topic from the topic's ``default_from`` on (all of them, unless an operator
removed ``default`` from the topic). A message is deleted (and archived, once) when
every group holding it is done with it: acked or dead-lettered. A group done before
the others leaves a mark ``a <group> <seq>``; the last one deletes the message and the
marks. A message only ``default`` holds is deleted at its ACK as it always was.

Per topic the node keeps its stored messages and bytes; they ride along with each
batch that changes them, as the store's own counters do, so nothing is counted by a
scan. The registries of topics and groups are read at start (a few keys, no message).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from pzq.archive.entry import validate_topic
from pzq.protocol.cluster import DefaultReads
from pzq.store import keyspace, record
from pzq.store.store import Batch, Participant, Store

TOPIC_HEADER = b"TOPIC:"
TAG_HEADER = b"TAG:"
DEFAULT_GROUP = "default"
DEFAULT_GROUP_ID = 0
FIRST_ID = 1
START_EARLIEST = "earliest"
START_LATEST = "latest"
COUNTS = struct.Struct(">qq")  # topic: messages, bytes; group: backlog, floor


@dataclass(eq=False)
class Group:
    topic: Topic
    name: str
    id: int
    start_seq: int
    filter: str = ""  # "": every tag; "eu-*": tags starting with "eu-"; else that tag
    created_us: int = 0
    backlog: int = 0  # stored messages it holds and is not done with
    floor: int = 0  # done with every message below this: a restart reads on from here

    def takes(self, tag: bytes) -> bool:
        return filter_takes(self.filter, tag)

    def holds(self, seq: int, tag: bytes) -> bool:
        return seq >= self.start_seq and self.takes(tag)

    def encode(self) -> bytes:
        """Its settings; the counts that change with the batches are kept apart."""
        return json.dumps({"id": self.id, "start_seq": self.start_seq, "filter": self.filter,
                           "created_us": self.created_us}).encode()


DEFAULT_ONLY = [DEFAULT_GROUP_ID]


@dataclass(eq=False)
class Topic:
    name: str
    id: int
    messages: int = 0
    stored_bytes: int = 0
    default_from: int | None = 0  # None: ``default`` does not read this topic
    created_us: int = 0
    max_messages: int = 0  # QUEUE_FULL for this topic beyond these (0: no limit)
    max_bytes: int = 0
    groups: dict[str, Group] = field(default_factory=dict)
    received: int = 0  # messages taken since start (for its rate; not stored)

    def encode(self) -> bytes:
        """Its settings; the counts that change with the batches are kept apart."""
        return json.dumps({"id": self.id, "default_from": self.default_from,
                           "created_us": self.created_us, "max_messages": self.max_messages,
                           "max_bytes": self.max_bytes}).encode()

    def holder_names(self, seq: int, tag: bytes) -> tuple[str, ...]:
        """The names of the groups holding the message; () when only ``default`` does
        (the archive then says nothing more than it always did)."""
        if not self.groups:
            return ()
        names = {group.id: group.name for group in self.groups.values()}
        names[DEFAULT_GROUP_ID] = DEFAULT_GROUP
        return tuple(sorted(names[holder] for holder in self.holders(seq, tag)))

    def holders(self, seq: int, tag: bytes) -> list[int]:
        """Ids of the groups that hold message ``seq`` (tagged ``tag``) of this topic."""
        if not self.groups:
            return DEFAULT_ONLY if self.default_from == 0 else self._default_holds(seq)
        held = [group.id for group in self.groups.values() if group.holds(seq, tag)]
        return held + self._default_holds(seq)

    def _default_holds(self, seq: int) -> list[int]:
        if self.default_from is not None and seq >= self.default_from:
            return [DEFAULT_GROUP_ID]
        return []


def filter_takes(pattern: str, tag: bytes) -> bool:
    if not pattern:
        return True
    wanted = pattern.encode()
    if wanted.endswith(b"*"):
        return tag.startswith(wanted[:-1])
    return tag == wanted


def validate_name(kind: str, name: str) -> str:
    """Topic and group names follow the archive's topic names (they are directories)."""
    try:
        return validate_topic(name)
    except ValueError as exc:
        raise ValueError(str(exc).replace("topic", kind, 1)) from None


def topic_and_tag(headers: Iterable[bytes], default_topic: str) -> tuple[str, bytes]:
    """The message's topic (ValueError for a name that cannot be one) and its tag."""
    topic, tag = default_topic, b""
    for header in headers:
        if header[:6].upper() == TOPIC_HEADER:
            topic = validate_name("topic", header[6:].decode(errors="replace"))
        elif header[:4].upper() == TAG_HEADER:
            tag = header[4:]
    return topic, tag


class Topics(Participant):
    """The topics and groups of this node's own messages, and who is done with what."""

    def __init__(self, store: Store, default_topic: str) -> None:
        self.store = store
        self.default_topic = default_topic
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[int, Topic] = {}
        self.default_restricted = False  # some topic is not read by ``default``
        self._next_id = FIRST_ID
        self._batch: Batch | None = None
        self._deltas: dict[Topic, list[int]] = {}  # messages, bytes changed in this batch
        self._dirty: set[Topic] = set()  # registry entries to write
        self._dirty_groups: set[Group] = set()
        self._group_deltas: dict[Group, int] = {}  # backlogs changed in this batch
        self._marking: set[tuple[int, int]] = set()  # (group id, seq) marks in this batch
        self._highest_marks: dict[int, int] = {}  # group id -> its highest mark's seq
        self._load()

    # -- the registries ------------------------------------------------------

    def _load(self) -> None:
        stored = self.store.get(keyspace.META_NEXT_ID)
        self._next_id = keyspace.ID.unpack(stored)[0] if stored else FIRST_ID
        for key, value in self.store.iterate(keyspace.TOPIC_PREFIX):
            meta = json.loads(value)
            messages, stored_bytes = self._counts(meta["id"])
            topic = Topic(key[1:].decode(), meta["id"], messages, stored_bytes,
                          meta["default_from"], meta["created_us"], meta["max_messages"],
                          meta["max_bytes"])
            self._add_topic(topic)
        for key, value in self.store.iterate(keyspace.GROUP_PREFIX):
            meta = json.loads(value)
            owner = self.by_id[keyspace.ID.unpack_from(key, 1)[0]]
            name = key[1 + keyspace.ID.size:].decode()
            owner.groups[name] = Group(owner, name, meta["id"], meta["start_seq"],
                                       meta["filter"], meta["created_us"],
                                       *self._counts(meta["id"]))

    def _counts(self, owner_id: int) -> tuple[int, int]:
        stored = self.store.get(keyspace.counts_key(owner_id))
        return COUNTS.unpack(stored) if stored else (0, 0)

    def _add_topic(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.id] = topic
        self.default_restricted |= topic.default_from != 0

    def _take_id(self) -> int:
        taken, self._next_id = self._next_id, self._next_id + 1
        return taken

    def topic(self, name: str, now_us: int) -> Topic:
        """The topic of that name, made (and written with the next batch) when new."""
        found = self.topics.get(name)
        if found is None:
            found = Topic(validate_name("topic", name), self._take_id(), created_us=now_us)
            self._add_topic(found)
            self._dirty.add(found)
            self._write_now(keyspace.topic_key(name.encode()), found.encode())
        return found

    def changed(self, topic: Topic) -> None:
        """An operator changed the topic's settings: write them with the next batch."""
        self._dirty.add(topic)
        self.default_restricted |= topic.default_from != 0
        self._write_now(keyspace.topic_key(topic.name.encode()), topic.encode())

    def forget_topic(self, topic: Topic) -> None:
        """Remove a topic whose messages are gone: its entry and its groups'."""
        batch = self.store.begin()
        batch.delete(keyspace.topic_key(topic.name.encode()))
        batch.delete(keyspace.counts_key(topic.id))
        for group in topic.groups.values():
            batch.delete(keyspace.group_key(topic.id, group.name.encode()))
            batch.delete(keyspace.counts_key(group.id))
        self._dirty.discard(topic)
        self._deltas.pop(topic, None)
        self.store.commit(batch)
        del self.topics[topic.name]
        del self.by_id[topic.id]

    def room(self, topic: Topic, size: int) -> bool:
        """Whether the topic takes one more message under its own limits."""
        messages, stored = self._deltas.get(topic, (0, 0))
        return not ((topic.max_messages and topic.messages + messages >= topic.max_messages)
                    or (topic.max_bytes and topic.stored_bytes + stored >= topic.max_bytes))

    def _write_now(self, key: bytes, value: bytes) -> None:
        """Into the batch being built, if any, so that a batch holding nothing else
        is still written (before_write writes the final value)."""
        if self._batch is not None:
            self._batch.put(key, value)

    def add_group(self, topic: Topic, name: str, start_seq: int, pattern: str,
                  now_us: int) -> Group:
        """A new group; its backlog is counted with one walk of the topic's log."""
        group = Group(topic, validate_name("group", name), self._take_id(), start_seq,
                      pattern, now_us)
        group.backlog = sum(
            1 for key, tag in self.store.iterate(keyspace.topic_log_prefix(topic.id),
                                                 keyspace.topic_log_key(topic.id, start_seq))
            if group.takes(tag))
        topic.groups[name] = group
        self._dirty_groups.add(group)
        self._write_now(keyspace.group_key(topic.id, name.encode()), group.encode())
        return group

    def default_reads(self) -> DefaultReads:
        """What ``default`` reads of these topics, for the peers holding copies."""
        if not self.default_restricted:
            return DefaultReads(self.default_topic)
        return DefaultReads(self.default_topic, {
            topic.name: topic.default_from for topic in self.topics.values()
            if topic.default_from != 0})

    def has_groups(self) -> bool:
        return any(topic.groups for topic in self.topics.values())

    def groups(self) -> list[Group]:
        return [group for topic in self.topics.values() for group in topic.groups.values()]

    # -- messages --------------------------------------------------------------

    def stored(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int) -> None:
        """A new own message: its topic log entry, and the topic's counters."""
        batch.put(keyspace.topic_log_key(topic.id, seq), tag)
        self.count(topic, 1, size)
        topic.received += 1
        for group in topic.groups.values():
            if group.holds(seq, tag):
                self.count_group(group, 1)

    def describe(self, value: bytes) -> tuple[Topic, bytes]:
        """The topic and tag of a stored record."""
        name, tag = topic_and_tag(record.headers_of(value), self.default_topic)
        return self.topic(name, record.stored_us_of(value)), tag

    def is_done(self, group_id: int, seq: int) -> bool:
        return ((group_id, seq) in self._marking
                or self.store.get(keyspace.group_done_key(group_id, seq)) is not None)

    def highest_mark(self, group_id: int) -> int:
        """The highest seq ``group_id`` has a mark for (-1: none); one seek per group
        and run, then kept as marks are made."""
        found = self._highest_marks.get(group_id)
        if found is None:
            found = -1
            prefix = keyspace.group_done_prefix(group_id)
            for key, _ in self.store.iterate_reverse(prefix):
                found = keyspace.seq_at_end(key)
                break
            self._highest_marks[group_id] = found
        return found

    def done_among(self, group_id: int, seqs: list[int]) -> set[int]:
        """Which of ``seqs`` (ascending) ``group_id`` is done with: one walk of its marks,
        none when it has no mark that far (a group reading new messages)."""
        if not seqs or seqs[0] > self.highest_mark(group_id):
            return set()
        prefix = keyspace.group_done_prefix(group_id)
        done = {seq for seq in seqs if (group_id, seq) in self._marking}
        for key, _ in self.store.iterate(prefix, keyspace.group_done_key(group_id, seqs[0]),
                                         values=False):
            seq = keyspace.seq_at_end(key)
            if seq > seqs[-1]:
                break
            done.add(seq)
        return done

    def would_release(self, seq: int, topic: Topic, tag: bytes, group_id: int) -> bool:
        """Whether ``group_id`` being done with the message deletes it."""
        return all(holder == group_id or self.is_done(holder, seq)
                   for holder in topic.holders(seq, tag))

    def done(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int,
             group_id: int) -> bool:
        """``group_id`` is done with the message: delete it if every holder is, else mark
        it. Returns True when the message was deleted."""
        others = [holder for holder in topic.holders(seq, tag) if holder != group_id]
        if group_id != DEFAULT_GROUP_ID:
            group = self._group_by_id(topic, group_id)
            if group is not None:
                self.count_group(group, -1)
        if any(not self.is_done(holder, seq) for holder in others):
            batch.put(keyspace.group_done_key(group_id, seq), b"")
            self._marking.add((group_id, seq))
            self._highest_marks[group_id] = max(self.highest_mark(group_id), seq)
            return False
        batch.delete_message(seq, size)
        self._leave(batch, seq, topic, others, size)
        return True

    def drop(self, batch: Batch, seq: int, topic: Topic, tag: bytes, size: int,
             group_id: int) -> None:
        """The message leaves its topic (deleted, or moved to the dead letters): its log
        entry, the other groups' marks, and its count go."""
        others = [holder for holder in topic.holders(seq, tag) if holder != group_id]
        group = self._group_by_id(topic, group_id) if group_id != DEFAULT_GROUP_ID else None
        if group is not None:
            self.count_group(group, -1)
        self._leave(batch, seq, topic, others, size)

    def _leave(self, batch: Batch, seq: int, topic: Topic, others: list[int],
               size: int) -> None:
        batch.delete(keyspace.topic_log_key(topic.id, seq))
        for holder in others:
            batch.delete(keyspace.group_done_key(holder, seq))
        self.count(topic, -1, -size)

    @staticmethod
    def _group_by_id(topic: Topic, group_id: int) -> Group | None:
        return next((group for group in topic.groups.values() if group.id == group_id), None)

    def raise_floor(self, group: Group, floor: int) -> None:
        """The group is done with everything below ``floor``: written with the next batch."""
        if floor > group.floor:
            group.floor = floor
            self._group_deltas.setdefault(group, 0)

    def count_group(self, group: Group, change: int) -> None:
        self._group_deltas[group] = self._group_deltas.get(group, 0) + change

    def count(self, topic: Topic, messages: int, size: int) -> None:
        delta = self._deltas.setdefault(topic, [0, 0])
        delta[0] += messages
        delta[1] += size

    # -- batches -----------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        """Registry entries changed since the last written batch go into this one at
        once: a batch with nothing else in it is not written, and would drop them."""
        self._batch = batch
        for topic in self._dirty:
            batch.put(keyspace.topic_key(topic.name.encode()), topic.encode())
        for group in self._dirty_groups:
            if group.topic.groups.get(group.name) is group:
                batch.put(keyspace.group_key(group.topic.id, group.name.encode()),
                          group.encode())

    def before_write(self) -> None:
        """Counters and registry entries go with the batch that changed them."""
        batch = self._batch
        if batch is None:
            return
        for topic in self._dirty:
            batch.put(keyspace.topic_key(topic.name.encode()), topic.encode())
        for topic in self._dirty | set(self._deltas):
            messages, size = self._deltas.get(topic, (0, 0))
            batch.put(keyspace.counts_key(topic.id),
                      COUNTS.pack(topic.messages + messages, topic.stored_bytes + size))
        for group in self._dirty_groups | set(self._group_deltas):
            if group.topic.groups.get(group.name) is not group:
                continue  # removed meanwhile
            if group in self._dirty_groups:
                batch.put(keyspace.group_key(group.topic.id, group.name.encode()),
                          group.encode())
            backlog = group.backlog + self._group_deltas.get(group, 0)
            batch.put(keyspace.counts_key(group.id), COUNTS.pack(backlog, group.floor))
        batch.put(keyspace.META_NEXT_ID, keyspace.ID.pack(self._next_id))

    def written(self) -> None:
        for topic, (messages, size) in self._deltas.items():
            topic.messages += messages
            topic.stored_bytes += size
        for group, change in self._group_deltas.items():
            group.backlog += change
        self._deltas = {}
        self._group_deltas = {}
        self._dirty = set()
        self._dirty_groups = set()
        self._marking = set()
        self._batch = None

    def failed(self) -> None:
        """Counters stay as they were; new topics and groups are written with the next
        batch; the delivery states redo the deletes and marks they still owe."""
        self._deltas = {}
        self._group_deltas = {}
        self._marking = set()
        self._batch = None
