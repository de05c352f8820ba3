"""Expiry: a message past its ``TTL:`` or ``EXPIRES:`` (pzq.protocol.time_headers), or
older than its topic's ``max_age``, is never delivered again, to any group.

Each own message with a TTL or EXPIRES has a key in an index by expiry time, ``X
<expires µs:8> <seq:8>``, written with the batch that stores it, so the sweep
(pzq.node.expiry_sweep) finds what has expired by a range read from the start of
the index, never by a scan; the loop wakes at the earliest expiry. The sweep, at the
start of a wake and before any delivery, hands each expired message to every group
that holds it (pzq.delivery.state.DeliveryState.expire), so that it goes to the dead
letters, or is deleted on a topic with ``on_expire=drop``, once the last group
holding it lets it go. A delivery out at a consumer is not taken back: its ACK is
accepted; if it comes back (a NACK, its deadline) it is checked again and expires
then. The message's index key stays while it is stored (``lingering``), so a
restart sweeps again whatever is left, and goes once it has left the store.

A delivery state asks this object twice, both cheap unless something can have
expired: ``watching`` once per delivery run (an attribute or two), and ``verdict``
per message only while it watches: a header parse for messages that may carry
their own expiry (some index key is due), a fixed-offset read of the stored time
for a topic's ``max_age``. A node without expiring messages or max_age asks
nothing per message (``NO_EXPIRY``, or ``watching`` false).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pzq.counters import Counters
from pzq.errors import DecodeError
from pzq.hooks import nothing
from pzq.protocol.time_headers import message_times
from pzq.store import keyspace, record
from pzq.store.batch import Batch, Participant
from pzq.store.store import Store
from pzq.store.topic_model import ON_EXPIRE_DROP
from pzq.store.topics import Topic, Topics

EXPIRED = b"expired"  # a dead letter's reason (keyspace ``E``)
KEEP = 0  # a verdict: not expired
DEAD = 1  # expired: to the dead letters
DROP = 2  # expired: deleted
FAR = 1 << 62  # no expiry known


class Expiry(Protocol):
    """What a delivery state asks of expiry."""

    def watching(self, now_us: int) -> bool: ...

    def verdict(self, seq: int, value: bytes, now_us: int) -> int: ...

    def expired_final(self, batch: Batch, seq: int, value: bytes, dead: bool) -> None: ...


class NoExpiry:
    """A state that never expires anything (a taken-over area: the origin's rules)."""

    def watching(self, now_us: int) -> bool:
        return False

    def verdict(self, seq: int, value: bytes, now_us: int) -> int:
        return KEEP

    def expired_final(self, batch: Batch, seq: int, value: bytes, dead: bool) -> None:
        pass


NO_EXPIRY = NoExpiry()


def record_expiry(value: bytes, topic: Topic) -> int:
    """When a stored record expires (µs; 0: never): its own TTL or EXPIRES, read
    against its stored time, or its topic's max_age, whichever comes first."""
    stored_us = record.stored_us_of(value)
    try:
        headers = record.headers_of(value)
        expires_us = message_times(headers, stored_us).expires_us if headers else 0
    except (DecodeError, ValueError):  # a header stored before they were checked
        return 0
    if topic.max_age_us:
        aged_at = stored_us + topic.max_age_us
        expires_us = min(expires_us, aged_at) if expires_us else aged_at
    return expires_us


class CopyExpiry:
    """Another node's messages this node took over while it is down: their copies
    carry the same headers, read against the same stored time, so each is checked
    when it would be delivered (a takeover's deliveries are few: its headers are read
    each time); its topic's max_age and on_expire are this node's."""

    def __init__(self, topics: Topics, counters: Counters) -> None:
        self.topics = topics
        self.counters = counters

    def watching(self, now_us: int) -> bool:
        return True

    def verdict(self, seq: int, value: bytes, now_us: int) -> int:
        topic = self.topics.describe(value)[0]
        expires_us = record_expiry(value, topic)
        if not expires_us or expires_us > now_us:
            return KEEP
        return MessageExpiry.fate(topic)

    def expired_final(self, batch: Batch, seq: int, value: bytes, dead: bool) -> None:
        self.counters.ttl_expired += 1
        self.topics.describe(value)[0].ttl_expired += 1


class MessageExpiry(Participant):
    """This node's own messages' expiry: the index, the topics' max_age, the counts."""

    def __init__(self, store: Store, topics: Topics, counters: Counters) -> None:
        self.store = store
        self.topics = topics
        self.counters = counters
        self.lingering: set[int] = set()  # swept, still stored (a group has it out)
        self.soonest_us = FAR  # the earliest index key not lingering (FAR: none)
        self.on_sooner: Callable[[], None] = nothing  # told when it comes sooner (the loop)
        self._adding: list[int] = []  # expiries the batch being built adds
        self._counting: list[Topic] = []  # expired in the batch being built: counted once
        self.idle = True  # (Participant) until the batch being built tracks or counts one
        for key, _ in store.iterate(keyspace.EXPIRY_PREFIX, values=False):
            self.soonest_us = keyspace.split_expiry_key(key)[0]
            break

    # -- intake ----------------------------------------------------------------------

    def track(self, batch: Batch, expires_us: int, seq: int) -> None:
        """A new own message with this expiry, in ``batch``."""
        batch.put(keyspace.expiry_key(expires_us, seq), b"")
        self._adding.append(expires_us)
        self.idle = False

    def written(self) -> None:
        if self._adding:
            soonest = min(self.soonest_us, *self._adding)
            self._adding = []
            if soonest < self.soonest_us:
                self.soonest_us = soonest
                self.on_sooner()
        if self._counting:  # counted when written: a failed batch is prepared again
            self.counters.ttl_expired += len(self._counting)
            for topic in self._counting:
                topic.ttl_expired += 1
            self._counting = []
        self.idle = True

    def failed(self) -> None:
        self._adding = []
        self._counting = []
        self.idle = True

    # -- what delivery states ask ------------------------------------------------------

    def watching(self, now_us: int) -> bool:
        """Whether any message may have expired by ``now_us``: an index key is due, a
        swept one is still stored, or a topic has a max_age."""
        return now_us >= self.soonest_us or bool(self.lingering or self.topics.age_limit_us)

    def verdict(self, seq: int, value: bytes, now_us: int) -> int:
        """KEEP, or what the expired message becomes (DEAD or DROP). Asked only while
        ``watching``: the headers are read only when an index key is due or the
        message is older than the shortest max_age."""
        if seq in self.lingering:
            return self._fate(value)
        stored_us = record.stored_us_of(value)
        age_limit_us = self.topics.age_limit_us
        if now_us < self.soonest_us and not (age_limit_us
                                             and stored_us <= now_us - age_limit_us):
            return KEEP
        return self.verdict_of(value, now_us)

    def verdict_of(self, value: bytes, now_us: int) -> int:
        """KEEP, DEAD or DROP for a record, its headers read."""
        topic = self.topics.describe(value)[0]
        expires_us = record_expiry(value, topic)
        if not expires_us or expires_us > now_us:
            return KEEP
        return self.fate(topic)

    def _fate(self, value: bytes) -> int:
        return self.fate(self.topics.describe(value)[0])

    @staticmethod
    def fate(topic: Topic) -> int:
        """What an expired message of the topic becomes."""
        return DROP if topic.on_expire == ON_EXPIRE_DROP else DEAD

    def expired_final(self, batch: Batch, seq: int, value: bytes, dead: bool) -> None:
        """The last group holding the message let it go as expired: counted once, and
        its dead letter (``seq``'s, the same as the message's) says why."""
        self._counting.append(self.topics.describe(value)[0])
        self.idle = False
        if dead:
            batch.put(keyspace.dead_reason_key(seq), EXPIRED)

    # -- the sweep ---------------------------------------------------------------------

    def due(self, now_us: int, limit: int) -> list[tuple[bytes, int]]:
        """Up to ``limit`` (index key, seq) expired at ``now_us`` and not swept yet;
        ``soonest_us`` moves on to the first one not due."""
        found: list[tuple[bytes, int]] = []
        self.soonest_us = FAR
        for key, _ in self.store.iterate(keyspace.EXPIRY_PREFIX, values=False):
            expires_us, seq = keyspace.split_expiry_key(key)
            if seq in self.lingering:
                continue
            if expires_us > now_us or len(found) >= limit:
                self.soonest_us = expires_us
                break
            found.append((key, seq))
        return found

    def gone(self, batch: Batch) -> None:
        """Lingering messages that left the store: their index keys go."""
        if not self.lingering:
            return
        left = {seq for seq in self.lingering if self.store.get_own(seq) is None}
        if not left:
            return
        for key, _ in self.store.iterate(keyspace.EXPIRY_PREFIX, values=False):
            seq = keyspace.split_expiry_key(key)[1]
            if seq in left:
                batch.delete(key)
                left.discard(seq)
                self.lingering.discard(seq)
                if not left:
                    break
