"""Priorities: on a topic declared with ``priorities=on``, a message with ``PRIORITY:p``
(p from 1 to 9; pzq.protocol.time_headers) goes before the topic's backlog, 9 first,
in arrival order within a priority.

The message is stored as every message is (its seq, its topic's log), and beside it
a key in its topic's index of lanes, ``L <topic:4> <9-p:1> <seq:8>``, so a walk of
the index meets the highest priority first, then arrival order. A named group walks
its topic's (``for_topic``: nothing for a topic without priorities), ``default`` those
of every topic with priorities, merged. A group's delivery state serves, after
what was given back, the lane messages from its cursor on that it holds and has not
taken, then reads on at its cursor (pzq.delivery.delivering): its cursor, floors and
logs are those of every message, and a lane message the cursor meets later was out,
done with or waiting already, as any message the state took. Strict priority: a lane
message always goes before the backlog (a backlog of them starves the backlog; that
is what was asked). What is out or in a consumer's window is not recalled.

An index key stays while its message is stored; a walk that finds the message gone
deletes the key with the next batch. A restart walks the index from its start.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from pzq.store import keyspace
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store
from pzq.store.topics import Topic, Topics

LOOK_AT_MOST = 4096  # index keys one delivery run looks at


class NoLanes:
    """A state without priorities (a taken-over area: in arrival order)."""

    waiting = False

    def entries(self) -> Iterator[tuple[bytes, int]]:
        return iter(())

    def exists(self, seq: int) -> bool:
        return True

    def gone(self, key: bytes) -> None:
        pass

    def for_topic(self, topic: Topic) -> NoLanes:
        return self


NO_LANES = NoLanes()


class TopicLanes:
    """One topic's lanes, as its named groups walk them."""

    def __init__(self, lanes: Lanes, topic: Topic) -> None:
        self.lanes = lanes
        self.topic = topic

    @property
    def waiting(self) -> bool:
        return self.topic.priorities and self.lanes.waiting

    def entries(self) -> Iterator[tuple[bytes, int]]:
        return self.lanes.entries([self.topic])

    def exists(self, seq: int) -> bool:
        return self.lanes.exists(seq)

    def gone(self, key: bytes) -> None:
        self.lanes.gone(key)


class Lanes(Participant):
    """Every topic's lanes (``default`` walks them all)."""

    def __init__(self, store: Store, topics: Topics) -> None:
        self.store = store
        self.topics = topics
        self.waiting = False  # the index may have keys (one seek at start, set on add)
        for _ in store.iterate(keyspace.LANE_PREFIX, values=False):
            self.waiting = True
            break
        self._gone: list[bytes] = []  # keys of messages that left the store
        self._adding = False
        self.idle = True  # (Participant) until a key is added or goes

    def for_topic(self, topic: Topic) -> TopicLanes:
        return TopicLanes(self, topic)

    def add(self, batch: Batch, topic: Topic, priority: int, seq: int) -> None:
        batch.put(keyspace.lane_key(topic.id, priority, seq), b"")
        self._adding = True
        self.idle = False

    def entries(self, topics: list[Topic] | None = None) -> Iterator[tuple[bytes, int]]:
        """(index key, seq) of the topics' lanes (None: every topic with priorities),
        highest priority first, then arrival order; LOOK_AT_MOST at most."""
        if topics is None:
            topics = [topic for topic in self.topics.topics.values() if topic.priorities]
        walks = [self._walk(topic) for topic in topics]
        merged = heapq.merge(*walks, key=lambda item: item[0][5:])  # priority, seq
        found = False
        for key, seq in itertools.islice(merged, LOOK_AT_MOST):
            found = True
            yield key, seq
        if not found and len(topics) == sum(1 for topic in self.topics.topics.values()
                                             if topic.priorities):
            self.waiting = False  # every topic's lanes are empty

    def _walk(self, topic: Topic) -> Iterator[tuple[bytes, int]]:
        for key, _ in self.store.iterate(keyspace.lane_prefix(topic.id), values=False):
            yield key, keyspace.seq_at_end(key)

    def exists(self, seq: int) -> bool:
        return self.store.get_own(seq) is not None

    def gone(self, key: bytes) -> None:
        self._gone.append(key)
        self.idle = False

    def prepare(self, batch: Batch) -> None:
        if self._gone:
            batch.delete_keys(self._gone)
            self._gone = []

    def written(self) -> None:
        if self._adding:
            self.waiting = True
            self._adding = False
        self.idle = not self._gone

    def failed(self) -> None:
        self._adding = False
        self.idle = not self._gone
