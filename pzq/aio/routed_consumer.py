"""The asyncio consumer of one group of a topic across a cluster: one asyncio
``GroupConsumer`` per node that serves the group; which nodes, in which turn, and
where each ACK goes are the routed group's session (pzq.client.sessions.routed_group).
A delivery's answers go back to the node it came from (``Message.ack`` knows its
consumer). Nodes that join the table later are joined as the table is asked again;
a node's join holds back no other node's deliveries (its answer is read as they
are).
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import Iterable, Sequence
from typing import Any

from pzq.aio.deliveries import Deliveries
from pzq.aio.group_consumer import GroupConsumer
from pzq.aio.message import Message
from pzq.aio.route_table import RouteTable
from pzq.aio.socket_io import AsyncContext, wait_any
from pzq.client import setup
from pzq.client.sessions.routed_group import RoutedGroupSession
from pzq.errors import ClientClosed, ConsumeRefused
from pzq.security import ClientSecurity
from pzq.zmqio import POLLIN

CHECK_AT = operator.attrgetter("router_check_at")  # a join's time to probe its endpoint


class RoutedGroupConsumer(Deliveries):
    """``options`` are GroupConsumer's (filter, start, confirm, ...); each node makes
    the group when it has none (``declare``), and a node that is down is not waited
    for longer than ``timeout`` (3 s): it is joined when it answers again."""

    def __init__(self, routes: str | Sequence[str] | RouteTable, topic: str, group: str,
                 window: int = 100, curve: ClientSecurity | None = None,
                 context: AsyncContext | None = None, **options: Any) -> None:
        self.table = routes if isinstance(routes, RouteTable) else RouteTable(routes, curve)
        self.topic, self.group, self.window = topic, group, window
        self.curve = curve
        self.options = setup.routed_group_options(options)
        GroupConsumer.check_options(self.options)
        self._context = context
        self._session: RoutedGroupSession[GroupConsumer] = RoutedGroupSession(
            self.table, self.options.get("timeout"))
        self._closed = False

    @property
    def consumers(self) -> dict[str, GroupConsumer]:
        """Consume endpoint -> its consumer."""
        return self._session.members

    async def join(self) -> None:
        """Ask for the table (once) and join every node in it, all at once; their
        answers are awaited together, a node that does not answer no longer than a
        moment once another joined (it is joined as it answers). ValueError when none
        has a consume endpoint, ConsumeRefused (then and at every receive after) when
        a node refuses the group: the nodes joined are let go, what they hold given
        back. ``async with`` and the first ``receive`` do it."""
        self._check_open()
        self._session.refuse_again()
        await self.table.known()
        try:
            await self._join_first()
        except ConsumeRefused as refused:
            self._session.refused(refused)
            await self._close_members()  # nothing taken yet: what they hold goes back now
            raise
        self._session.check_joined()

    async def _join_first(self) -> None:
        session = self._session
        now = time.monotonic()
        self._join_new(now)
        await self._take_joins(now)
        while not session.first_joins_done(now):
            wake = session.with_router_checks(session.first_joins_wake(), CHECK_AT)
            await wait_any([consumer.socket for _, consumer in session.awaited()], POLLIN,
                           None if wake is None else max(0.001, wake - time.monotonic()),
                           "consumer")
            now = time.monotonic()
            await self._take_joins(now)

    def _join_new(self, now: float) -> None:
        """Send the CONSUME of each node in the table not joined yet; not waited for."""
        for endpoint in self._session.to_join():
            consumer = GroupConsumer(endpoint, self.topic, self.group, self.window,
                                     curve=self.curve, context=self._context, **self.options)
            consumer.start_join()
            self._session.join_sent(endpoint, consumer, now)

    async def _take_joins(self, now: float) -> None:
        """The joins answered are members now; those unanswered too long are let go
        (tried again while the table counts their node up). ConsumeRefused when a
        node refused the group, or when a join's endpoint proves no ROUTER
        (``GroupConsumer.check_router``: a node's --send-dsn, which never answers)."""
        session = self._session
        for consumer in session.settle_joins(GroupConsumer.answered, now):
            await consumer.close()
        await asyncio.gather(*(consumer.check_router() for _, consumer in session.awaited()))

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery from any node, or None if none arrives within ``timeout``
        seconds; ConsumeRefused as ``receive_many``."""
        found = await self.receive_many(1, timeout)
        return found[0] if found else None

    async def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries from any node: waits up to ``timeout`` s for the
        first, then takes what has arrived, each node in turn; ConsumeRefused, again at
        each call, once a node refused the group (a removed group, a withdrawn right)."""
        self._check_open()
        self._session.refuse_again()
        try:
            return await self._receive_many(most, timeout)
        except ConsumeRefused as refused:
            # the other nodes' turns would hand out theirs as if nothing had happened
            self._session.refused(refused)
            raise

    async def _receive_many(self, most: int, timeout: float | None) -> list[Message]:
        if not self.consumers:
            await self.join()
        session = self._session
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_open()
            age = session.table_age(time.monotonic())
            if age is not None:
                await self.table.refresh_if_older(age)
                self._join_new(time.monotonic())
            await self._take_joins(time.monotonic())
            found: list[Message] = []
            for consumer in session.in_turn():
                if len(found) >= most:
                    break
                found += await consumer.receive_many(most - len(found), 0)
            if found:
                return found
            now = time.monotonic()
            if deadline is not None and deadline <= now:
                return []
            wake = session.with_router_checks(session.next_deadline(now), CHECK_AT)
            assert wake is not None  # (the table's refresh is always due some time)
            await self._wait(wake if deadline is None else min(deadline, wake))

    async def _wait(self, until: float) -> None:
        """Until a node's socket has input, or ``until``; takes nothing."""
        sockets = [consumer.socket for consumer in self._session.every_member()
                   if not consumer.closed]
        try:
            await wait_any(sockets, POLLIN, max(0.001, until - time.monotonic()), "consumer")
        except ClientClosed:  # a node's consumer closed under the wait: look again
            self._check_open()

    async def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries: one ACK per node they came from."""
        for consumer, group in self._session.by_member(messages):
            await consumer.ack_many(group)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the consumer is closed")

    async def close(self) -> None:
        """Close every node's consumer, each saying BYE: what they hold unacked goes
        back to the group at once."""
        self._closed = True
        await self._close_members()

    async def _close_members(self) -> None:
        """Each says BYE: its node gives back what is unacked at once. Cancelled while
        one drains its answers, the others are closed without waiting."""
        members = self._session.every_member()
        try:
            for consumer in members:
                await consumer.close()
        finally:
            for consumer in members:
                await consumer._shut(drain=False)  # (no wait: done at once)

    async def __aenter__(self) -> RoutedGroupConsumer:
        try:
            await self.join()
        except asyncio.CancelledError:  # cut while joining: nobody holds it to close it
            await self.close()  # (refused, it stays: it says so again at each call)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
