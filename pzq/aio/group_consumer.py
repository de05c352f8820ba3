"""The asyncio consumer of one group of a topic on a node's --consume-dsn: a shell over
the group's session (pzq.client.sessions.group) on a ``zmq.asyncio`` DEALER, as the
sync GroupConsumer is one on a plain socket. The session joins the group, joins
again after the node restarted, agrees the protocol and keeps the deliveries; this
shell reads the socket when a task asks for a delivery, and sends what the session
gives in order (pzq.aio.socket_io.Outbox).

Cancellation: ``receive`` waits only where it has taken nothing from the socket.
What it took (a batch of deliveries in one message) waits in the session for the
next ``receive``; a delivery no task takes goes back to the node at its ack
deadline, or at ``close``. An answer (``ack``, ``nack``, ...) once given is sent
whatever happens to the task that gave it.

The consumer stays alive for the node through its connection's heartbeats (ZeroMQ's,
in its I/O thread), whatever the tasks of the loop do; ``receive`` also sends a
HEARTBEAT after a period with nothing sent, so that a node that restarted says it
does not know the connection, and the consumer joins again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

import zmq

from pzq import curve_probe
from pzq.aio import probe
from pzq.aio.deliveries import Deliveries
from pzq.aio.message import Message
from pzq.aio.socket_io import AsyncContext, AsyncSocket, Outbox, opener, poke, wait_events
from pzq.client import setup
from pzq.client.common import watch_links
from pzq.client.session_views import GroupView
from pzq.client.sessions.delivered import own_key, own_keys
from pzq.client.sessions.group import ROUTER_CHECK_AFTER_S, unconfirmed_error
from pzq.errors import ClientClosed, ConsumeUnanswered
from pzq.protocol import consume as wire
from pzq.security import ClientSecurity
from pzq.zmqio import POLLIN, recv_frames

CLOSE_DRAIN_S = 1.0  # answers still waiting at close are given this long to go
OPTIONS = ("filter", "start", "timeout", "declare", "confirm", "protocol")  # by name


class GroupConsumer(GroupView[Message], Deliveries):
    """Receives the deliveries of one consumer group, at most ``window`` unacked; the
    options are the sync GroupConsumer's. It joins the group in ``async with`` (or at
    its first ``receive``): TimeoutError when the node does not answer within
    ``timeout`` s, ConsumeRefused when it refuses the group."""

    def __init__(self, dsn: str | Sequence[str], topic: str, group: str, window: int = 100,
                 filter: str = "", start: str | int | datetime = "earliest",
                 curve: ClientSecurity | None = None, timeout: float | None = 10.0,
                 declare: bool = False, confirm: bool = False,
                 protocol: int = wire.LATEST_PROTOCOL,
                 context: AsyncContext | None = None) -> None:
        self.dsn = dsn
        self.curve = curve
        self.timeout = setup.join_timeout(timeout)
        subscribe = wire.Subscribe(topic, group, window, filter, wire.start_of(start),
                                   confirm=confirm, declare=declare, protocol=protocol)
        self._session, self._socket = setup.group_consumer(
            subscribe, Message, self, time.monotonic(), opener(context, dsn, curve))
        self._links = watch_links(self._socket, dsn)
        self._out = Outbox(self._socket, "consumer")
        self._consume_sent = False
        self._closed = False

    @staticmethod
    def check_options(options: Iterable[str]) -> None:
        """TypeError naming any option given by name that a GroupConsumer does not take
        (a routed consumer checks before it joins any node)."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"unknown option {', '.join(unknown)}: a group consumer takes "
                            f"{', '.join(OPTIONS)}")

    # -- what the session knows --------------------------------------------------------

    @property
    def joined(self) -> bool:
        """The node said CONSUMING."""
        return self._session.joined

    @property
    def connected(self) -> bool:
        """Every endpoint has a working connection (its handshake taken, not lost since);
        a wait while one has had none for SILENT_WARN_S (5 s) is logged
        (pzq.client.link_watch)."""
        return self._links.connected(time.monotonic())

    @property
    def socket(self) -> AsyncSocket:
        """Its socket, to wait on beside others (a routed consumer's)."""
        return self._socket

    @property
    def unsent(self) -> int:
        """Messages (answers, a CONSUME again, ...) the socket has not taken yet: they
        go in order once the node takes them (its own task sends them)."""
        return len(self._out)

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return self._closed

    # -- joining -----------------------------------------------------------------------

    async def join(self) -> None:
        """Join the group (once; ``async with`` and the first ``receive`` do it):
        TimeoutError after ``timeout`` s without the node's answer, ConsumeRefused
        when it refuses; the consumer is closed then."""
        self._check_open()
        session = self._session
        if session.joined:
            return
        self.start_join()
        timeout = self.timeout
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        # unanswered this long, whether a ROUTER is there at all (a --send-dsn never
        # answers): ConsumeRefused before the timeout
        check_at: float | None = started + ROUTER_CHECK_AFTER_S
        if deadline is not None and deadline <= started + ROUTER_CHECK_AFTER_S:
            check_at = None
        try:
            while not self._read(time.monotonic(), until_joined=True):
                now = time.monotonic()
                if check_at is not None and now >= check_at:
                    check_at = None
                    self._session.router_told(await self._routers())
                    continue
                left = None if deadline is None else deadline - now
                if timeout is not None and left is not None and left <= 0:
                    why = await probe.why_silent(self.dsn, self.curve,
                                                 curve_probe.probe_timeout(timeout))
                    raise ConsumeUnanswered(timeout, why)
                wait = left if check_at is None else check_at - now
                until = self._links.looked(now, None if wait is None else now + wait)
                await wait_events(self._socket, POLLIN, None if until is None else until - now,
                                  "consumer")
        except Exception:  # refused, or no answer: closed (a cancellation may join later)
            await self._shut(drain=False)
            raise

    async def _routers(self) -> list[tuple[str, bool | None]]:
        """Whether a ROUTER answers at each endpoint (pzq.client.router_probe)."""
        dsns = [self.dsn] if isinstance(self.dsn, str) else list(self.dsn)
        found = await asyncio.gather(*(probe.is_router(dsn, self.curve) for dsn in dsns))
        return list(zip(dsns, found, strict=True))

    def start_join(self) -> None:
        """Send the CONSUME (once), its answer not awaited here (a routed consumer
        joins its nodes so, at once): ``answered`` reads it."""
        self._check_open()
        if not self._consume_sent:
            self._consume_sent = True
            self._out.put(self._session.consume(time.monotonic()))

    def answered(self) -> bool:
        """Read what the node said without waiting: True once it said CONSUMING;
        ConsumeRefused when it refused the group (``check_router`` asks whether a
        ROUTER is there at all)."""
        return self._session.joined or self._read(time.monotonic(), until_joined=True)

    @property
    def router_check_at(self) -> float | None:
        """When ``check_router`` asks whether a ROUTER is at the endpoint, if no answer
        came (None: it will not)."""
        return self._session.router_check_at

    async def check_router(self) -> None:
        """A join ``answered`` reads, unanswered ROUTER_CHECK_AFTER_S: ConsumeRefused
        when its endpoint proves no ROUTER (a --send-dsn, which never answers), as
        ``join`` says it; asked once a join (the probe's handshake, a few ms)."""
        session = self._session
        if session.router_check_due(time.monotonic()):
            session.router_told(await self._routers())

    # -- deliveries --------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds
        (None: waits as long as it takes); ConsumeRefused, again at each call, once the
        node refused the group."""
        self._check_open()
        arrived = self._session.arrived
        if arrived:
            return arrived.popleft()
        self._session.refuse_if_removed()  # (a refusal emptied arrived)
        if not self._session.joined:
            await self.join()
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self._session
        while True:
            now = time.monotonic()
            if self._read(now):
                return arrived.popleft()
            if deadline is not None and now >= deadline:
                return None
            until = self._links.looked(now, session.next_deadline(now) if deadline is None
                                       else min(deadline, session.next_deadline(now)))
            assert until is not None
            await wait_events(self._socket, POLLIN, max(0.001, until - now), "consumer")

    def _read(self, now: float, until_joined: bool = False) -> bool:
        """Send what time asks for, then read the socket, a message at a time, until a
        delivery is there (or the group is joined); True then. Never waits."""
        session, socket, out = self._session, self._socket, self._out
        if session.joined:
            out.put_all(session.wake(now))
        arrived = session.arrived
        # In batches (protocol 2) the next is mostly a round trip away when the last
        # was taken: the socket's events are asked first, at a third of the cost of
        # a refused receive (ready() also wakes a task that waits for them)
        if session.protocol > 1 and not socket.ready() & POLLIN:
            return False
        found = False
        while not found:
            try:
                frames = recv_frames(socket)
            except zmq.Again:
                break
            out.put_all(session.received(frames, now))
            found = session.joined if until_joined else bool(arrived)
        poke(socket)
        return found

    async def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries: waits up to ``timeout`` s for the first, then takes
        what has arrived already, without waiting more (whole batches at once)."""
        first = await self.receive(timeout)
        if first is None:
            return []
        found = [first]
        session = self._session
        while len(found) < most:
            if not session.arrived and not self._read(time.monotonic()):
                break
            found += session.take(most - len(found))
        return found

    # -- answers -----------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        """Done with this delivery (``await message.ack()`` calls this): removed."""
        self._answer(self._session.ack(own_key(message, self), time.monotonic()))

    async def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries in one ACK (cheaper for both ends than one each)."""
        self._answer(self._session.ack(own_keys(messages, self),
                                       time.monotonic()))

    async def nack(self, message: Message, delay: float | None = None) -> None:
        """Give it back: to go again at once, or after ``delay`` seconds (as
        ``nack_many``)."""
        session = self._session
        self._answer(session.nack(own_key(message, self, session.forgot_upto_us),
                                  time.monotonic(), delay))

    async def nack_many(self, messages: Iterable[Message], delay: float | None = None) -> None:
        """Give these deliveries back in one NACK: to go again at once, or after
        ``delay`` seconds. One the node forgot since (it restarted, or counted this
        consumer gone: given back already) is left out: its key would give back the
        node's delivery of the same message made since."""
        session = self._session
        self._answer(session.nack(own_keys(messages, self, session.forgot_upto_us),
                                  time.monotonic(), delay))

    async def working(self, *messages: Message) -> None:
        """Still at work on these: each one's ack deadline starts again."""
        self._answer(self._session.working(own_keys(messages, self),
                                           time.monotonic()))

    async def reject(self, *messages: Message) -> None:
        """Give these up for good: to the dead letters, never delivered again."""
        self._answer(self._session.reject(own_keys(messages, self),
                                          time.monotonic()))

    async def ack_confirmed(self, messages: Iterable[Message], timeout: float = 10.0) -> None:
        """ACK and wait until the node says the ACKs are written (``confirm=True``);
        TimeoutError if it has not within ``timeout`` s. Deliveries that come meanwhile
        wait for ``receive``."""
        session = self._session
        keys = own_keys(messages, self)
        self._answer(session.confirm(keys, time.monotonic()))
        deadline = time.monotonic() + timeout
        while session.unconfirmed(keys):
            self._read(time.monotonic(), until_joined=False)
            if not session.unconfirmed(keys):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = session.unconfirmed(keys)
                session.forget_unconfirmed(keys)
                raise unconfirmed_error(waiting, timeout, await probe.why_silent(
                    self.dsn, self.curve, curve_probe.probe_timeout(timeout)))
            await wait_events(self._socket, POLLIN, left, "consumer")

    def _answer(self, out: Sequence[list[bytes]]) -> None:
        self._check_open()
        self._out.put_all(out)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the consumer is closed")

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Send the answers still waiting (for up to a second), say BYE so the node
        gives back what is unacked at once, and close. Tasks waiting in ``receive``
        get ClientClosed (``async for`` ends)."""
        await self._shut(drain=True)

    async def _shut(self, drain: bool) -> None:
        if self._closed:
            return
        self._closed = True
        out = self._out
        try:
            if drain:
                await out.drained(CLOSE_DRAIN_S)
        except ClientClosed:
            pass
        finally:  # cancelled while the answers drain too: closed all the same
            try:
                if self._consume_sent:
                    out.put(self._session.bye())
                    out.push()
            except ClientClosed:
                pass
            out.dropped()
            self._session.arrived.clear()  # not taken: the node gives them back
            self._links.close()
            self._socket.close()

    async def __aenter__(self) -> GroupConsumer:
        try:
            await self.join()
        except BaseException:  # cancelled while joining: nobody holds it to close it
            await self._shut(drain=False)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
