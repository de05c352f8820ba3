"""A producer for a partitioned topic in a cluster: each message goes to the node owning
its partition, learned from the route table; a node that answers MOVED names the
owner, and the message goes there; a node that stops answering is left. The rules are
the session's (pzq.client.sessions.routed_producer); this shell carries the messages
with one ``Producer`` per owner (its window, its batches) and asks for the table. It
must stay on the thread that made it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import zmq

from pzq.client.common import mark_closed, mark_open, messages
from pzq.client.producer import Producer
from pzq.client.route_table import RouteTable
from pzq.client.session_views import RoutedProducerView
from pzq.client.sessions.producer import Moment, time_headers
from pzq.client.sessions.routed_producer import (
    RESEND_AFTER_S,
    OwnerUnknown,
    Routed,
    RoutedProducerSession,
)
from pzq.errors import ClientClosed
from pzq.protocol.frames import ProducerAck
from pzq.security import ClientSecurity
from pzq.zmqio import Context

UNKNOWN_OWNER_POLL_S = 0.1  # how often the table is asked while an owner is unknown


class RoutedProducer(RoutedProducerView):
    """Sends the messages of one partitioned ``topic`` each to its partition's owner,
    learned from ``routes`` (the nodes' --monitor-dsn endpoints, or a RouteTable),
    keeping up to ``window`` unanswered on each node. A MOVED answer sends the message
    on to the owner it names; a node silent ``resend_after`` s (2 s) has its messages
    sent again to the partition's owner of the moment."""

    _closed: str  # why it may be used no more ("" while open): common.mark_open

    def __init__(self, routes: str | Sequence[str] | RouteTable, topic: str,
                 window: int = 100, context: Context | None = None,
                 curve: ClientSecurity | None = None, batch: int | None = None,
                 resend_after: float = RESEND_AFTER_S) -> None:
        self.table = routes if isinstance(routes, RouteTable) else RouteTable(routes, curve)
        self.topic = topic
        self.window = window
        self.batch = batch
        self.curve = curve
        self.resend_after = resend_after
        self._session = RoutedProducerSession(self.table, topic, resend_after)
        self._context = context or zmq.Context.instance()
        self._producers: dict[str, Producer] = {}  # receive endpoint -> its producer
        mark_open(self)

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
             timeout: float = 30.0, key: bytes | str | None = None, tag: str | None = None,
             dedup_id: str | bytes | None = None, *, topic: str | None = None,
             delay: float | None = None,
             not_before: Moment | None = None, ttl: float | None = None,
             expires: Moment | None = None, priority: int | None = None) -> bytes:
        """Send one message to its partition's owner (``key``, or a ``KEY:`` frame among
        ``headers``, says which partition; none: any); waits while that owner's window
        is full. ``topic``: the producer's, if given (another is a ValueError, as in
        pzq.aio's); the time options: Producer.send's."""
        if self._closed:
            raise ClientClosed(self._closed)
        if topic is not None and topic != self.topic:
            raise ValueError(f"this RoutedProducer sends to topic {self.topic!r}, not {topic!r}")
        times = time_headers(delay, not_before, ttl, expires, priority)
        if times:
            headers = [*headers, *times]
        self._settle(sending=True)  # a key's earlier messages go to its new owner first
        routed = self._routed(parts, headers, timeout, key, tag, dedup_id)
        deadline = time.monotonic() + timeout
        while True:  # in slices: while its owner's window is full, the table is looked at
            try:
                self._carry(routed.msg_id, routed.endpoint, routed.parts, routed.headers,
                            min(self.resend_after / 4, max(0.0, deadline - time.monotonic())))
                self._session.carried(routed.msg_id)
                return routed.msg_id
            except TimeoutError:
                if time.monotonic() >= deadline:
                    self._session.unsent(routed.msg_id)  # not sent: the caller may retry
                    raise TimeoutError(f"no ACK within {timeout:g} s with a full window at "
                                       f"{routed.endpoint}") from None
            self._settle()  # a dead owner's messages go elsewhere, a lost one again
            sent = self._session.sent.get(routed.msg_id)
            if sent is None or sent.endpoint != routed.endpoint:
                self._session.carried(routed.msg_id)
                return routed.msg_id  # carried with its owner's other messages

    def _routed(self, parts: Sequence[bytes], headers: Sequence[bytes], timeout: float,
                key: bytes | str | None, tag: str | None,
                dedup_id: str | bytes | None) -> Routed:
        """The message as the session routes it, waiting up to ``timeout`` s while the
        table knows no endpoint of its owner (the table has no event to wait on: it is
        asked again every UNKNOWN_OWNER_POLL_S)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._session.send(parts, headers, time.monotonic(), key, tag,
                                          dedup_id)
            except OwnerUnknown as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OwnerUnknown(f"{exc} within {timeout} s") from None
                time.sleep(min(left, UNKNOWN_OWNER_POLL_S))
                self.table.refresh_if_older(UNKNOWN_OWNER_POLL_S)

    def _settle(self, sending: bool = False) -> None:
        """The table asked for when it must be, and what goes again sent."""
        session = self._session
        age = session.table_age(time.monotonic(), sending)
        if age is not None:
            self.table.refresh_if_older(age)
        for routed in session.reroutes(time.monotonic()):
            if routed.was in self._producers:  # its room there is free: it goes again
                self._producers[routed.was].forget(routed.msg_id)
            self._carry(routed.msg_id, routed.endpoint, routed.parts, routed.headers, 30.0)
        for endpoint in session.left():
            producer = self._producers.pop(endpoint, None)
            if producer is not None:
                producer.close()

    def _carry(self, msg_id: bytes, endpoint: str, parts: list[bytes],
               headers: Sequence[bytes], timeout: float) -> None:
        producer = self._producers.get(endpoint)
        if producer is None:
            # no ack_timeout: the session sends again what a node leaves unanswered
            # (resend_after), and leaves a node that stays silent
            producer = self._producers[endpoint] = Producer(
                endpoint, self.window, self._context, self.curve, batch=self.batch,
                ack_timeout=None)
        producer.send(parts, headers, msg_id=msg_id, timeout=timeout)

    def acks(self, timeout: float = 0.0) -> list[ProducerAck]:
        """ACKs received so far (a MOVED is not one: the message goes on), waiting up to
        ``timeout`` s for one if none is here."""
        if self._closed:
            raise ClientClosed(self._closed)
        session = self._session
        deadline = time.monotonic() + timeout
        while True:
            for producer in list(self._producers.values()):
                session.answered(producer.acks())
            self._settle()  # also while other nodes answer
            now = time.monotonic()
            if session.arrived or now >= deadline or not session.sent:
                break
            self._wait(min(deadline, session.next_deadline(now) or deadline))
        return session.take_acks()

    def _wait(self, deadline: float) -> None:
        poller = zmq.Poller()
        for producer in self._producers.values():
            poller.register(producer.socket, zmq.POLLIN)
        poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))

    def flush(self, timeout: float = 30.0) -> list[ProducerAck]:
        """Wait until every message sent is ACKed (after any MOVED, by its owner);
        TimeoutError naming how many are not, the ACKs that came kept for ``acks``."""
        if self._closed:
            raise ClientClosed(self._closed)
        deadline = time.monotonic() + timeout
        found: list[ProducerAck] = []
        try:
            while self._session.sent:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{messages(len(self._session.sent))} without ACK "
                                       f"after {timeout:g} s")
                found += self.acks(min(0.1, max(0.0, deadline - time.monotonic())))
        except BaseException:  # a timeout, a Ctrl-C: the ACKs that came wait for acks()
            self._session.arrived[:0] = found
            raise
        return found + self.acks()

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return bool(self._closed)

    def close(self) -> None:
        """Close every node's producer (each sends its waiting batch first); messages
        without a final ACK are not waited for (``flush()`` first). A second call does
        nothing."""
        mark_closed(self, "producer")
        for producer in self._producers.values():
            producer.close()

    def __enter__(self) -> RoutedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
