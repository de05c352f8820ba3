"""A routed producer's session: which node each message of a partitioned topic goes to,
and what goes again elsewhere, without I/O.

A message goes to its partition's owner in the route table (``KnownRoutes``); without a
key, messages spread over the owners in turn. Each message is kept until its ACK. A
MOVED answer (the table changed: a takeover, a node back) names the owner, and the
message goes there. A node that stops answering (it died before the table said so)
is left: once a message has waited ``resend_after`` seconds the table is asked for
afresh, and when it counts the node down its messages go to their partitions' owners
in that table. A node that came back before the table counted it down (a shard
process started again within a second) never got what was on its way when it died:
a message it has left unanswered for ``LOST_AFTER_RESENDS`` times ``resend_after``
while the table counts it up goes again to its partition's owner, that node or
another. Such a message may then be stored twice (the silent node may have stored
it, and its copies are delivered by a survivor): at least once, as everywhere in pzq.

The shell carries each message with a producer of one node (its window, its
batches), asks for the table when ``table_age`` says so, sends ``reroutes`` and
closes the producers of nodes ``left`` behind.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import NamedTuple

from pzq.client.sessions.producer import check_frames, topic_headers
from pzq.client.sessions.routes import KnownRoutes
from pzq.protocol.frames import ProducerAck
from pzq.protocol.headers import KEY_HEADER, key_of, partition_of

MOVED = b"MOVED "
MOST_MOVES = 5  # a message the owners keep sending on is answered as refused
REFRESH_S = 5.0  # the table is asked for again this often while all goes well
RESEND_AFTER_S = 2.0
LOST_AFTER_RESENDS = 5  # this many resend_after at a node counted up: it lost them
MOVED_REFRESH_S = 1.0  # a burst of MOVED answers asks for the table once



class OwnerUnknown(TimeoutError):
    """The table names no endpoint for a message's owner yet: right after a cluster
    starts, the node asked may name an owner whose ROUTING (its endpoints) it has not
    heard. Asking for the table again may tell."""

class Sent(NamedTuple):
    parts: list[bytes]
    headers: Sequence[bytes]
    moves: int
    endpoint: str
    at: float  # monotonic seconds


class Routed(NamedTuple):
    """A message to send with the producer of ``endpoint`` (a node's receive endpoint)."""

    msg_id: bytes
    endpoint: str
    parts: list[bytes]
    headers: Sequence[bytes]
    was: str | None = None  # the endpoint it went to before, whose producer forgets it


class RoutedProducerSession:
    def __init__(self, routes: KnownRoutes, topic: str, resend_after: float = RESEND_AFTER_S,
                 id_prefix: bytes | None = None) -> None:
        self.routes = routes
        self.topic = topic
        self.resend_after = resend_after
        self.moved = 0  # messages sent again to another node after a MOVED
        self.resent = 0  # messages sent again to another node after a silence
        self.sent: dict[bytes, Sent] = {}  # msg id -> what was sent, until its ACK
        self.arrived: list[ProducerAck] = []
        self._id_prefix = id_prefix or os.urandom(6).hex().encode()
        self._counter = itertools.count()
        self._spread = itertools.count()
        self._moving: list[tuple[bytes, Sent, str]] = []  # MOVED: msg id, sent, owner named
        self._left: set[str] = set()  # endpoints whose messages all went elsewhere
        self._down: set[str] = set()  # receive endpoints of nodes the table counts down
        self._down_of = -1.0  # the table (its fetch time) ``_down`` was taken from
        self._receivers_list: list[str | None] = []
        self._receivers_of = -1.0
        self._topic_frames = topic_headers(topic, None)
        self._lost_looked = 0.0  # when unanswered messages at live nodes were looked at
        self._carrying: set[bytes] = set()  # sent, and waiting for room at its node

    def table_age(self, now: float, sending: bool = False) -> float | None:
        """The age past which the table must be asked for again before the next step
        (None: keep it): every REFRESH_S before a message is sent, soon after a MOVED,
        and when a message has waited ``resend_after`` s (its node may be gone)."""
        ages = [REFRESH_S] if sending else []
        if self._moving:
            ages.append(MOVED_REFRESH_S)
        if self.sent:
            oldest = next(iter(self.sent.values()))  # about the oldest: kept in order
            if oldest.at < now - self.resend_after:
                ages.append(self.resend_after / 2)
        return min(ages) if ages else None

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes], now: float,
             key: bytes | str | None = None, tag: str | None = None,
             dedup_id: str | bytes | None = None) -> Routed:
        """One new message, to its partition's owner (``key``, or a ``KEY:`` frame
        among ``headers``, says which partition; none: any owner). TimeoutError when
        the table names no node for the topic; TypeError (check_frames) for a part or
        header that is not bytes, or a key neither str nor bytes, before the message is
        kept."""
        check_frames(parts, headers)
        frames = [*headers, *(self._topic_frames if tag is None and dedup_id is None
                              else topic_headers(self.topic, tag, dedup_id))]
        if key is None:
            key = key_of(frames)
        else:  # TypeError for a key neither str nor bytes, as a Producer's send says
            frames += topic_headers(None, None, key=key)
            key = frames[-1][len(KEY_HEADER):]
        msg_id = b"%s-%d" % (self._id_prefix, next(self._counter))
        endpoint = self._endpoint_for(key)
        carried = list(parts)
        self.sent[msg_id] = Sent(carried, frames, 0, endpoint, now)
        self._carrying.add(msg_id)
        return Routed(msg_id, endpoint, carried, frames)

    def carried(self, msg_id: bytes) -> None:
        """The message is with its node's producer: from now on it may be lost."""
        self._carrying.discard(msg_id)

    def unsent(self, msg_id: bytes) -> None:
        """The message did not go (its producer's window stayed full): the caller may
        send it again, so it is not kept."""
        self.sent.pop(msg_id, None)
        self._carrying.discard(msg_id)

    def answered(self, acks: list[ProducerAck]) -> None:
        """ACKs from the producers: the final ones wait in ``arrived``; a MOVED (fewer
        than MOST_MOVES times) makes the message go again (``reroutes``)."""
        for ack in acks:
            sent = self.sent.pop(ack.msg_id, None)
            if sent is None:
                continue
            if not ack.ok and ack.status_message.startswith(MOVED) and sent.moves < MOST_MOVES:
                self.moved += 1
                named = ack.status_message.split(b" ")[-1].decode(errors="replace")
                self._moving.append((ack.msg_id, sent, named))
            else:
                self.arrived.append(ack)

    def take_acks(self) -> list[ProducerAck]:
        arrived, self.arrived = self.arrived, []
        return arrived

    def reroutes(self, now: float) -> list[Routed]:
        """What goes again now, in order: MOVED messages to the owner named (or the
        table's), then messages at nodes the table counts down to their live owners.
        A node whose messages went elsewhere is ``left`` afterwards."""
        moving, self._moving = self._moving, []
        found = [self._again(msg_id, sent, self._endpoint_for(key_of(sent.headers), named),
                             now) for msg_id, sent, named in moving]
        return found + self._leave_silent(now)

    def left(self) -> set[str]:
        """Endpoints left since asked last: their producers may close."""
        left, self._left = self._left, set()
        return left

    def _again(self, msg_id: bytes, sent: Sent, endpoint: str, now: float) -> Routed:
        self.sent[msg_id] = Sent(sent.parts, sent.headers, sent.moves + 1, endpoint, now)
        return Routed(msg_id, endpoint, sent.parts, sent.headers, sent.endpoint)

    def _leave_silent(self, now: float) -> list[Routed]:
        """Messages at a node the table counts down go to their owner in that table;
        those a node counted up has left unanswered too long go again (it lost them)."""
        if not self.sent:
            return []
        down = self._nodes_down()
        if not down:
            return self._lost(now, down)  # (looked at a few times a resend_after)
        found = []
        for msg_id, sent in list(self.sent.items()):  # in the order sent: keys keep theirs
            if sent.endpoint not in down:
                continue
            endpoint = self._endpoint_for(key_of(sent.headers))
            if endpoint in down or endpoint == sent.endpoint:
                continue  # no live owner known yet: it waits
            self._left.add(sent.endpoint)
            self.resent += 1
            found.append(self._again(msg_id, sent, endpoint, now))
        return found + self._lost(now, down)

    def _lost(self, now: float, down: set[str]) -> list[Routed]:
        """Messages unanswered for LOST_AFTER_RESENDS times ``resend_after`` at a node
        the table counts up, to their partition's owner again (in the order sent)."""
        if now - self._lost_looked < self.resend_after / 4:
            return []
        self._lost_looked = now
        before = now - self.resend_after * LOST_AFTER_RESENDS
        found = []
        for msg_id, sent in list(self.sent.items()):
            if sent.at <= before and sent.endpoint not in down \
                    and msg_id not in self._carrying:  # (waiting for room: not lost)
                self.resent += 1
                found.append(self._again(msg_id, sent,
                                         self._endpoint_for(key_of(sent.headers)), now))
        return found

    def _nodes_down(self) -> set[str]:
        routes = self.routes
        if self._down_of != routes.fetched:
            self._down_of = routes.fetched
            self._down = set(routes.every("receive")) - set(routes.every("receive", live=True))
        return self._down

    def _endpoint_for(self, key: bytes | None, named: str | None = None) -> str:
        if named is not None and named != "unknown":
            return named
        receivers = self._receivers()
        if key is not None and receivers:
            found = receivers[partition_of(key, len(receivers))]
        else:
            routes = self.routes
            owners = [routes.endpoint(owner, "receive") for owner in routes.owners(self.topic)]
            candidates = [owner for owner in owners if owner] or routes.every("receive")
            found = candidates[next(self._spread) % len(candidates)] if candidates else None
        if found is None:
            raise OwnerUnknown(f"the route table names no node with endpoints for topic "
                               f"{self.topic} (its owner not heard from yet)")
        return found

    def _receivers(self) -> list[str | None]:
        """Each partition's owner's receive endpoint, from the table as it is now (taken
        once per table: asked for every message)."""
        routes = self.routes
        if self._receivers_of != routes.fetched:
            self._receivers_of = routes.fetched
            owners = routes.topics.get(self.topic, {}).get("owners", [])
            self._receivers_list = [routes.endpoint(owner, "receive") for owner in owners]
        return self._receivers_list

    def next_deadline(self, now: float) -> float | None:
        """While messages are out, look again at least every quarter of
        ``resend_after`` (a silent node is found by looking); None: nothing is out."""
        return now + self.resend_after / 4 if self.sent else None
