"""What a batch changes of the topics' and groups' figures and registry entries.

A topic's stored messages and bytes, a group's backlog and floor, and new or changed
topic and group entries are kept here while a batch is built and written with it
(``put_registry`` at its start, ``put_counts`` just before the write), as the store's
own counters are: no figure is ever counted by a scan. ``applied`` makes them the
figures once the batch is written; ``dropped`` forgets the changes of a failed one.
"""

from __future__ import annotations

from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.topic_model import COUNTS, Group, Topic


class TopicCounts:
    def __init__(self) -> None:
        self.deltas: dict[Topic, list[int]] = {}  # messages, bytes changed in this batch
        self.group_deltas: dict[Group, int] = {}  # backlogs changed in this batch
        self.dirty: set[Topic] = set()  # registry entries to write
        self.dirty_groups: set[Group] = set()
        # Each topic's counts key, made once (ids are never given again)
        self._counts_keys: dict[int, bytes] = {}

    def count(self, topic: Topic, messages: int, size: int) -> None:
        delta = self.deltas.setdefault(topic, [0, 0])
        delta[0] += messages
        delta[1] += size

    def count_group(self, group: Group, change: int) -> None:
        self.group_deltas[group] = self.group_deltas.get(group, 0) + change

    def raise_floor(self, group: Group, floor: int) -> None:
        """The group is done with everything below ``floor``: written with the next batch."""
        if floor > group.floor:
            group.floor = floor
            self.group_deltas.setdefault(group, 0)

    def lower_floor(self, group: Group, floor: int) -> None:
        """An operator moved the group back to ``floor`` (a seek): written with the
        next batch, so a restart reads on from there."""
        if floor < group.floor:
            group.floor = floor
            self.group_deltas.setdefault(group, 0)

    def pending(self, topic: Topic) -> tuple[int, int]:
        """Messages and bytes the batch being built adds to (or takes from) the topic."""
        messages, size = self.deltas.get(topic, (0, 0))
        return messages, size

    def forget(self, topic: Topic) -> None:
        self.dirty.discard(topic)
        self.deltas.pop(topic, None)
        self._counts_keys.pop(topic.id, None)

    def put_registry(self, batch: Batch) -> None:
        """Registry entries changed since the last written batch, at the batch's start:
        a batch with nothing else in it is not written, and would drop them."""
        for topic in self.dirty:
            batch.put(keyspace.topic_key(topic.name.encode()), topic.encode())
        for group in self.dirty_groups:
            if group.topic.groups.get(group.name) is group:
                batch.put(keyspace.group_key(group.topic.id, group.name.encode()),
                          group.encode())

    def put_counts(self, batch: Batch) -> None:
        """The final registry entries and counts, just before the batch is written."""
        for topic in self.dirty:
            batch.put(keyspace.topic_key(topic.name.encode()), topic.encode())
        # (the sets made only when entries changed: most batches change counts alone)
        keys = self._counts_keys
        for topic in self.dirty | self.deltas.keys() if self.dirty else self.deltas:
            messages, size = self.deltas.get(topic, (0, 0))
            key = keys.get(topic.id)
            if key is None:
                key = keys[topic.id] = keyspace.counts_key(topic.id)
            batch.put(key, COUNTS.pack(topic.messages + messages, topic.stored_bytes + size))
        if not (self.dirty_groups or self.group_deltas):
            return
        for group in self.dirty_groups | self.group_deltas.keys():
            if group.topic.groups.get(group.name) is not group:
                continue  # removed meanwhile
            if group in self.dirty_groups:
                batch.put(keyspace.group_key(group.topic.id, group.name.encode()),
                          group.encode())
            backlog = group.backlog + self.group_deltas.get(group, 0)
            batch.put(keyspace.counts_key(group.id), COUNTS.pack(backlog, group.floor))

    def applied(self) -> None:
        """The batch is written: its changes are the figures (containers made anew
        only when something was in them)."""
        if self.deltas:
            for topic, (messages, size) in self.deltas.items():
                topic.messages += messages
                topic.stored_bytes += size
            self.deltas = {}
        if self.group_deltas:
            for group, change in self.group_deltas.items():
                group.backlog += change
            self.group_deltas = {}
        if self.dirty:
            self.dirty = set()
        if self.dirty_groups:
            self.dirty_groups = set()

    def dropped(self) -> None:
        """Counts stay as they were; changed entries are written with the next batch."""
        self.deltas = {}
        self.group_deltas = {}
