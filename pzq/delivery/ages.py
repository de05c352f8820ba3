"""How old what waits is, in seconds: a group's lag (the oldest message it has not
ACKed, held or not) and a topic's oldest stored message, read when figures are asked,
never kept per message.

A message's age runs from when it could first be delivered: when it was stored, or
its due time for a scheduled one (pzq.protocol.time_headers). A group's oldest is its
delivery state's (pzq.delivery.state.DeliveryState.oldest_open: what is out or given
back, and one read at its cursor). A topic with a log has its oldest at the log's
first message (pzq.store.log_blocks, in memory); the others' are found by one walk
of the own messages for all of them, from where the last walk found each (messages
below that are other topics', or gone), at most WALK_AT_MOST keys a call; a topic
whose first message, found so, is still stored is read there at once, not walked.
"""

from __future__ import annotations

from pzq.errors import DecodeError
from pzq.protocol.time_headers import message_times
from pzq.store import keyspace, record
from pzq.store.store import Store
from pzq.store.topics import Topic, Topics

WALK_AT_MOST = 2000  # own messages one call looks at for the topics without a log


def age_seconds(value: bytes | None, now_us: int) -> float:
    """Seconds since the message could first be delivered (0 for none)."""
    if value is None:
        return 0
    stored_us = record.stored_us_of(value)
    try:
        headers = record.headers_of(value)
        due_us = message_times(headers, stored_us).due_us if headers else 0
    except (DecodeError, ValueError):  # a header stored before they were checked
        due_us = 0
    return round(max(0, now_us - max(stored_us, due_us)) / 1e6, 3)


class TopicAges:
    def __init__(self, store: Store, topics: Topics) -> None:
        self.store = store
        self.topics = topics
        self._hints: dict[str, int] = {}  # topic without a log -> no message of it below

    def oldest_seconds(self, now_us: int) -> dict[str, float]:
        """Each topic's oldest stored message's age (0: it has none)."""
        ages: dict[str, float] = {}
        unlogged: list[Topic] = []
        for topic in self.topics.topics.values():
            if topic.messages <= 0:
                ages[topic.name] = 0
            elif topic.log_from is not None:
                ages[topic.name] = age_seconds(self._first_logged(topic), now_us)
            else:
                unlogged.append(topic)
        if unlogged:
            found = self._still_first({topic.name for topic in unlogged})
            wanted = {topic.name for topic in unlogged} - found.keys()
            if wanted:
                found.update(self._walk(wanted))
            for topic in unlogged:
                ages[topic.name] = age_seconds(found.get(topic.name), now_us)
        return ages

    def _first_logged(self, topic: Topic) -> bytes | None:
        seq = self.topics.logs.oldest(topic.id)
        return None if seq is None else self.store.get_own(seq)

    def _still_first(self, names: set[str]) -> dict[str, bytes]:
        """The topics whose first message, found by an earlier walk, is still stored: one
        read each. The walk then starts where the others' hints are: from a found
        topic's, it looked at the same WALK_AT_MOST messages at every call, and a topic
        whose first message lay beyond them was never found (its oldest_seconds 0 for
        good, 300 000 messages stored behind 62 000 of other topics)."""
        found: dict[str, bytes] = {}
        for name in names:
            seq = self._hints.get(name)
            value = None if seq is None else self.store.get_own(seq)
            if value is not None and self.topics.describe(value)[0].name == name:
                found[name] = value
        return found

    def _walk(self, wanted: set[str]) -> dict[str, bytes]:
        """The first stored record of each wanted topic, looking at WALK_AT_MOST own
        messages from the lowest hint on; one not found keeps the hint past what was
        looked at (its next walk goes on from there)."""
        found: dict[str, bytes] = {}
        start = min(self._hints.get(name, 0) for name in wanted)
        looked, last = 0, start - 1
        for key, value in self.store.iterate(keyspace.OWN_PREFIX, keyspace.own_key(start)):
            if looked >= WALK_AT_MOST:
                break
            seq = keyspace.own_seq(key)
            last, looked = seq, looked + 1
            name = self.topics.describe(value)[0].name
            if name in wanted and name not in found and seq >= self._hints.get(name, 0):
                found[name] = value
                self._hints[name] = seq
                if len(found) == len(wanted):
                    break
        reached_end = looked < WALK_AT_MOST
        for name in wanted - found.keys():
            if not reached_end:
                self._hints[name] = max(self._hints.get(name, 0), last + 1)
        return found
