"""A producer for a partitioned topic in a cluster: each message goes to the node owning
its partition, learned from the route table; a node that answers MOVED (the table
changed: a takeover, a node back) names the owner, and the message goes there.

One ``Producer`` per owner carries the messages (its window, its batches); this adds
the routing and keeps what it sent until the ACK, to send again after a MOVED. Without
a key, messages spread over the owners in turn.

A node that stops answering (it died before the table said so) is left: a message
without an ACK after ``resend_after`` seconds goes to its partition's owner in a
table asked for afresh, when that table counts the node down. Such a message may then be
stored twice (the silent node may have stored it, and its copies are delivered by
a survivor): at least once, as everywhere in pzq.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from typing import NamedTuple

import zmq

from pzq.client.producer import Producer, topic_headers
from pzq.client.route_table import RouteTable
from pzq.cluster.placement import partition_of
from pzq.protocol.frames import ProducerAck
from pzq.protocol.headers import KEY_HEADER, key_of
from pzq.security import ClientCurve
from pzq.zmqio import Context

MOVED = b"MOVED "
MOST_MOVES = 5  # a message the owners keep sending on is answered as refused
REFRESH_S = 5.0  # the table is asked for again this often while all goes well
RESEND_AFTER_S = 2.0
MOVED_REFRESH_S = 1.0  # a burst of MOVED answers asks for the table once
UNKNOWN_OWNER_POLL_S = 0.1  # how often the table is asked while an owner's endpoints are unknown


class Sent(NamedTuple):
    parts: list[bytes]
    headers: Sequence[bytes]
    moves: int
    endpoint: str
    at: float  # monotonic seconds


class RoutedProducer:
    def __init__(self, routes: str | Sequence[str] | RouteTable, topic: str,
                 window: int = 100, context: Context | None = None,
                 curve: ClientCurve | None = None, batch: int | None = None,
                 resend_after: float = RESEND_AFTER_S) -> None:
        self.table = routes if isinstance(routes, RouteTable) else RouteTable(routes, curve)
        self.topic = topic
        self.window = window
        self.batch = batch
        self.curve = curve
        self.resend_after = resend_after
        self.moved = 0  # messages sent again to another node after a MOVED
        self.resent = 0  # messages sent again to another node after a silence
        self._context = context or zmq.Context.instance()
        self._producers: dict[str, Producer] = {}  # receive endpoint -> its producer
        self._sent: dict[bytes, Sent] = {}  # msg id -> what was sent, until its ACK
        self._arrived: list[ProducerAck] = []
        self._id_prefix = os.urandom(6).hex().encode()
        self._counter = itertools.count()
        self._spread = itertools.count()
        self._down: set[str] = set()  # receive endpoints of nodes the table counts down
        self._down_of = -1.0  # the table (its fetch time) ``_down`` was taken from
        self._receivers_list: list[str | None] = []
        self._receivers_of = -1.0
        self._topic_frames = topic_headers(topic, None)

    @property
    def outstanding(self) -> int:
        return len(self._sent)

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
             timeout: float = 30.0, key: bytes | str | None = None, tag: str | None = None,
             dedup_id: str | bytes | None = None) -> bytes:
        """Send one message to its partition's owner (``key``, or a ``KEY:`` frame among
        ``headers``, says which partition; none: any); waits while that owner's window
        is full."""
        self.table.refresh_if_older(REFRESH_S)
        self._leave_silent()  # a key's earlier messages go to its new owner before this one
        frames = [*headers, *(self._topic_frames if tag is None and dedup_id is None
                              else topic_headers(self.topic, tag, dedup_id))]
        if key is None:
            key = key_of(frames)
        else:
            key = key.encode() if isinstance(key, str) else key
            frames.append(KEY_HEADER + key)
        msg_id = b"%s-%d" % (self._id_prefix, next(self._counter))
        try:
            self._send(msg_id, list(parts), frames, self._endpoint_awaited(key, timeout), 0,
                       timeout)
        except TimeoutError:
            self._sent.pop(msg_id, None)  # not sent (the window stayed full): the caller may retry
            raise
        return msg_id

    def _endpoint_awaited(self, key: bytes | None, timeout: float) -> str:
        """The endpoint for ``key``, waiting up to ``timeout`` s while the table knows no
        endpoint of its owner: right after a cluster starts, the node asked may name an
        owner whose ROUTING (its endpoints) it has not heard yet."""
        deadline = time.monotonic() + timeout
        while (found := self._endpoint_known(key)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the route table names no node with endpoints for topic "
                                   f"{self.topic} (its owner not heard from yet) within "
                                   f"{timeout} s")
            time.sleep(min(left, UNKNOWN_OWNER_POLL_S))  # the table has no event to wait on
            self.table.refresh_if_older(UNKNOWN_OWNER_POLL_S)
        return found

    def _endpoint_for(self, key: bytes | None, named: str | None = None) -> str:
        found = self._endpoint_known(key, named)
        if found is None:
            raise TimeoutError(f"the route table names no node for topic {self.topic}")
        return found

    def _endpoint_known(self, key: bytes | None, named: str | None = None) -> str | None:
        table = self.table
        if named is not None and named != "unknown":
            return named
        receivers = self._receivers()
        if key is not None and receivers:
            found = receivers[partition_of(key, len(receivers))]
        else:
            owners = [table.endpoint(owner, "receive") for owner in table.owners(self.topic)]
            candidates = [owner for owner in owners if owner] or table.every("receive")
            found = candidates[next(self._spread) % len(candidates)] if candidates else None
        return found

    def _receivers(self) -> list[str | None]:
        """Each partition's owner's receive endpoint, from the table as it is now (taken
        once per table: asked for every message)."""
        if self._receivers_of != self.table.fetched:
            self._receivers_of = self.table.fetched
            owners = self.table.topics.get(self.topic, {}).get("owners", [])
            self._receivers_list = [self.table.endpoint(owner, "receive") for owner in owners]
        return self._receivers_list

    def _send(self, msg_id: bytes, parts: list[bytes], headers: Sequence[bytes],
              endpoint: str, moves: int, timeout: float) -> None:
        producer = self._producers.get(endpoint)
        if producer is None:
            producer = self._producers[endpoint] = Producer(
                endpoint, self.window, self._context, self.curve, batch=self.batch)
        self._sent[msg_id] = Sent(parts, headers, moves, endpoint, time.monotonic())
        producer.send(parts, headers, msg_id=msg_id, timeout=timeout)

    def acks(self, timeout: float = 0.0) -> list[ProducerAck]:
        """ACKs received so far (a MOVED is not one: the message goes on), waiting up to
        ``timeout`` s for one if none is here."""
        deadline = time.monotonic() + timeout
        while True:
            for producer in list(self._producers.values()):
                for ack in producer.acks():
                    self._took(ack)
            self._leave_silent()  # also while other nodes answer
            if self._arrived or time.monotonic() >= deadline or not self._sent:
                break
            self._wait(min(deadline, time.monotonic() + self.resend_after / 4))
        arrived, self._arrived = self._arrived, []
        return arrived

    def _wait(self, deadline: float) -> None:
        poller = zmq.Poller()
        for producer in self._producers.values():
            poller.register(producer.socket, zmq.POLLIN)
        poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))

    def _took(self, ack: ProducerAck) -> None:
        sent = self._sent.pop(ack.msg_id, None)
        if sent is None:
            return
        if not ack.ok and ack.status_message.startswith(MOVED) and sent.moves < MOST_MOVES:
            self.moved += 1
            self.table.refresh_if_older(MOVED_REFRESH_S)  # the MOVED names the owner meanwhile
            named = ack.status_message.split(b" ")[-1].decode(errors="replace")
            self._send(ack.msg_id, sent.parts, sent.headers,
                       self._endpoint_for(key_of(sent.headers), named), sent.moves + 1, 30.0)
            return
        self._arrived.append(ack)

    def _leave_silent(self) -> None:
        """Messages at a node the table counts down go to their owner in that table, and
        their producer is closed; the table is asked afresh when a node has not answered
        for ``resend_after`` s."""
        if not self._sent:
            return
        oldest = next(iter(self._sent.values()))  # about the oldest: sent first, kept in order
        if oldest.at < time.monotonic() - self.resend_after:
            self.table.refresh_if_older(self.resend_after / 2)
        down = self._nodes_down()
        if not down:
            return  # the common case, at every send: nothing to look at
        left: set[str] = set()
        for msg_id, sent in list(self._sent.items()):  # in the order sent: keys keep theirs
            if sent.endpoint not in down:
                continue
            endpoint = self._endpoint_for(key_of(sent.headers))
            if endpoint in down or endpoint == sent.endpoint:
                continue  # no live owner known yet: it waits
            left.add(sent.endpoint)
            self.resent += 1
            self._send(msg_id, sent.parts, sent.headers, endpoint, sent.moves + 1, 30.0)
        for endpoint in left:
            producer = self._producers.pop(endpoint, None)
            if producer is not None:
                producer.close()

    def _nodes_down(self) -> set[str]:
        if self._down_of != self.table.fetched:
            self._down_of = self.table.fetched
            self._down = set(self.table.every("receive")) - set(
                self.table.every("receive", live=True))
        return self._down

    def flush(self, timeout: float = 30.0) -> list[ProducerAck]:
        """Wait until every message sent is ACKed (after any MOVED, by its owner)."""
        deadline = time.monotonic() + timeout
        found: list[ProducerAck] = []
        while self._sent:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(self._sent)} messages without ACK after {timeout} s")
            found += self.acks(min(0.1, max(0.0, deadline - time.monotonic())))
        return found + self.acks()

    def close(self) -> None:
        for producer in self._producers.values():
            producer.close()

    def __enter__(self) -> RoutedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
