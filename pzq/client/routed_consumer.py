"""A consumer of one group of a topic across a cluster: one ``GroupConsumer`` per node
that serves the group, each with its own credits; which nodes, in which turn, and
where each ACK goes are the session's (pzq.client.sessions.routed_group). A
delivery's ACK goes back to the node it came from (``Message.ack`` knows its
consumer). Nodes that join the table later are joined as the table is asked again;
a node's join holds back no other node's deliveries (its answer is read as they
are). It must stay on the thread that made it.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Sequence
from typing import Any

import zmq

from pzq.client import setup
from pzq.client.common import mark_closed, mark_open
from pzq.client.group_consumer import GroupConsumer
from pzq.client.message import Message
from pzq.client.route_table import RouteTable
from pzq.client.sessions.routed_group import RoutedGroupSession
from pzq.errors import ClientClosed, ConsumeRefused
from pzq.security import ClientSecurity
from pzq.zmqio import Context

CHECK_AT = operator.attrgetter("router_check_at")  # a join's time to probe its endpoint


class RoutedGroupConsumer:
    """Receives the deliveries of one consumer group of a partitioned ``topic`` from
    every node in ``routes`` (the nodes' --monitor-dsn endpoints, or a RouteTable), at
    most ``window`` unacked on each. ``options`` are GroupConsumer's (``filter``,
    ``start``, ``confirm``, ...), each node's; ``declare=True`` and ``timeout=3`` (s)
    unless given. Joins every node when made: ConsumeRefused when one refuses the
    group, ValueError when no node in the table has a --consume-dsn."""

    _closed: str  # why it may be used no more ("" while open): common.mark_open

    def __init__(self, routes: str | Sequence[str] | RouteTable, topic: str, group: str,
                 window: int = 100, context: Context | None = None,
                 curve: ClientSecurity | None = None, **options: Any) -> None:
        self.table = routes if isinstance(routes, RouteTable) else RouteTable(routes, curve)
        self.topic, self.group, self.window = topic, group, window
        self.curve = curve
        self.options = setup.routed_group_options(options)  # GroupConsumer's, each node's
        self._context = context or zmq.Context.instance()
        mark_open(self)
        self._session: RoutedGroupSession[GroupConsumer] = RoutedGroupSession(
            self.table, self.options.get("timeout"))
        try:
            self._join_first()
        except BaseException:  # a node refused the group (ConsumeRefused), ...
            self.close()  # nothing taken yet: what the joined nodes hold goes back now
            raise
        self._session.check_joined()

    @property
    def consumers(self) -> dict[str, GroupConsumer]:
        """Consume endpoint -> its consumer (of the nodes joined)."""
        return self._session.members

    def _join_first(self) -> None:
        """Every node's join at once; their answers awaited together (a node that does
        not answer is awaited no longer than a moment once another joined)."""
        session = self._session
        now = time.monotonic()
        self._join_new(now)
        self._take_joins(now)
        while not session.first_joins_done(now):
            self._wait(session.with_router_checks(session.first_joins_wake(), CHECK_AT),
                       [consumer for _, consumer in session.awaited()])
            now = time.monotonic()
            self._take_joins(now)

    def _join_new(self, now: float) -> None:
        """Send the CONSUME of each node in the table not joined yet; not waited for."""
        for endpoint in self._session.to_join():
            self._session.join_sent(endpoint, GroupConsumer(
                endpoint, self.topic, self.group, self.window, context=self._context,
                curve=self.curve, wait=False, **self.options), now)

    def _take_joins(self, now: float) -> None:
        """The joins answered are members now; those unanswered too long are let go
        (tried again while the table counts their node up). ConsumeRefused when a
        node refused the group, or when a join's endpoint proves no ROUTER
        (``GroupConsumer.answered``: a node's --send-dsn, which never answers)."""
        for consumer in self._session.settle_joins(GroupConsumer.answered, now):
            consumer.close()

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery from any node, or None if none arrives within ``timeout``
        seconds; ConsumeRefused as ``receive_many``."""
        found = self.receive_many(1, timeout)
        return found[0] if found else None

    def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries from any node: waits up to ``timeout`` s for the
        first, then takes what has arrived, each node in turn; ConsumeRefused, again at
        each call, once a node refused the group (a removed group, a withdrawn right)."""
        if self._closed:
            raise ClientClosed(self._closed)
        self._session.refuse_again()
        try:
            return self._receive_many(most, timeout)
        except ConsumeRefused as refused:
            # the other nodes' turns would hand out theirs as if nothing had happened
            self._session.refused(refused)
            raise

    def _receive_many(self, most: int, timeout: float | None) -> list[Message]:
        session = self._session
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            age = session.table_age(time.monotonic())
            if age is not None:
                self.table.refresh_if_older(age)
                self._join_new(time.monotonic())
            self._take_joins(time.monotonic())
            found = self._take_arrived(most)
            if found:
                return found
            now = time.monotonic()
            if deadline is not None and deadline <= now:
                return []
            wake = session.with_router_checks(session.next_deadline(now), CHECK_AT)
            self._wait(wake if deadline is None or wake is None else min(deadline, wake),
                       session.every_member())

    def _take_arrived(self, most: int) -> list[Message]:
        found: list[Message] = []
        for consumer in self._session.in_turn():
            if len(found) >= most:
                break
            found += consumer.receive_many(most - len(found), 0)
        return found

    def _wait(self, until: float | None, consumers: list[GroupConsumer]) -> None:
        """Until one of ``consumers`` has input, or room for what waits to be sent
        (its next receive sends it), or ``until`` (None: for ever); takes nothing."""
        poller = zmq.Poller()
        for consumer in consumers:
            poller.register(consumer.socket,
                            zmq.POLLIN | zmq.POLLOUT if consumer.unsent else zmq.POLLIN)
        poller.poll(None if until is None else max(1, int((until - time.monotonic()) * 1000)))

    def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries: one ACK per node they came from."""
        if self._closed:
            raise ClientClosed(self._closed)
        for consumer, group in self._session.by_member(messages):
            consumer.ack_many(group)

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return bool(self._closed)

    def close(self) -> None:
        """Close every node's consumer, each saying BYE: what they hold unacked goes
        back to the group at once. A second call does nothing."""
        mark_closed(self, "consumer")
        for consumer in self._session.every_member():
            consumer.close()

    def __enter__(self) -> RoutedGroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
