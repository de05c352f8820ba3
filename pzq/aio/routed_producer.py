"""The asyncio producer for a partitioned topic in a cluster: which node each message
goes to, and what goes again after a MOVED or a silent node, are the routed session's
(pzq.client.sessions.routed_producer); this shell carries each message with an
asyncio ``Producer`` per owner and resolves the message's own Future at its final
ACK (a MOVED is not one: the message goes on to the owner named).

A task of its own looks again while messages are out (the table, silent nodes, what
a MOVED sends on). Cancelled inside ``publish``, a message was not sent (the session
forgets it); once ``publish`` returned, its Future resolves at its final ACK.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence

from pzq.aio import probe
from pzq.aio.producer import CLOSED_UNANSWERED, Producer
from pzq.aio.route_table import RouteTable
from pzq.aio.socket_io import AsyncContext
from pzq.client.common import messages
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

REROUTE_TIMEOUT_S = 30.0  # room at the new owner for a message that goes again
UNKNOWN_OWNER_POLL_S = 0.1  # how often the table is asked while an owner is unknown


class RoutedProducer(RoutedProducerView):
    """Sends the messages of one partitioned ``topic`` each to its partition's owner,
    learned from ``routes`` (the nodes' --monitor-dsn endpoints, or a RouteTable),
    keeping up to ``window`` unanswered on each node; the options are the sync
    RoutedProducer's. ``publish`` returns a Future the message's final ACK resolves
    (after any MOVED, by its owner)."""

    def __init__(self, routes: str | Sequence[str] | RouteTable, topic: str,
                 window: int = 100, batch: int | None = None,
                 curve: ClientSecurity | None = None, context: AsyncContext | None = None,
                 resend_after: float = RESEND_AFTER_S) -> None:
        self.table = routes if isinstance(routes, RouteTable) else RouteTable(routes, curve)
        self.topic = topic
        self.window = window
        self.batch = batch
        self.curve = curve
        self._context = context
        self._session = RoutedProducerSession(self.table, topic, resend_after)
        self._producers: dict[str, Producer] = {}  # receive endpoint -> its producer
        self._futures: dict[bytes, asyncio.Future[ProducerAck]] = {}
        self._settling = asyncio.Lock()
        self._changed = asyncio.Event()  # an ACK came, or a MOVED: look again
        self._watcher: asyncio.Task[None] | None = None
        self._closed = False

    async def publish(self, parts: Sequence[bytes], topic: str | None = None,
                      key: str | bytes | None = None, tag: str | None = None,
                      dedup_id: str | bytes | None = None, headers: Sequence[bytes] = (),
                      timeout: float | None = 30.0, *, delay: float | None = None,
                      not_before: Moment | None = None, ttl: float | None = None,
                      expires: Moment | None = None, priority: int | None = None
                      ) -> asyncio.Future[ProducerAck]:
        """Take one message for its partition's owner (``key``, or a ``KEY:`` frame
        among ``headers``, says which partition; none: any) and return its Future;
        waits while that owner's window is full. ``topic``: the producer's, if given;
        the time options: the sync Producer.send's."""
        times = time_headers(delay, not_before, ttl, expires, priority)
        if times:
            headers = [*headers, *times]
        self._check_open()
        if topic is not None and topic != self.topic:
            raise ValueError(f"this RoutedProducer sends to topic {self.topic!r}, not {topic!r}")
        await self.table.known()
        await self._settle(sending=True)  # a key's earlier messages go to its new owner first
        session = self._session
        routed = await self._routed(parts, headers, timeout, key, tag, dedup_id)
        # kept before it goes: an ACK from the owner the watcher may carry it to while
        # it waits for room resolves it
        future: asyncio.Future[ProducerAck] = asyncio.get_running_loop().create_future()
        self._futures[routed.msg_id] = future
        try:
            await self._carry_own(routed, timeout)
        except BaseException:
            self._futures.pop(routed.msg_id, None)
            session.unsent(routed.msg_id)  # not sent: the caller may send it again
            raise
        session.carried(routed.msg_id)
        if self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return future

    async def _routed(self, parts: Sequence[bytes], headers: Sequence[bytes],
                      timeout: float | None, key: str | bytes | None, tag: str | None,
                      dedup_id: str | bytes | None) -> Routed:
        """The message as the session routes it, waiting up to ``timeout`` s while the
        table knows no endpoint of its owner (right after a node started, before its
        peers heard where clients reach it), as the sync RoutedProducer does: the
        table is asked again every UNKNOWN_OWNER_POLL_S."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self._session.send(parts, headers, time.monotonic(), key, tag,
                                          dedup_id)
            except OwnerUnknown as exc:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise OwnerUnknown(f"{exc} within {timeout:g} s") from None
                await asyncio.sleep(UNKNOWN_OWNER_POLL_S if left is None
                                    else min(left, UNKNOWN_OWNER_POLL_S))
                await self.table.refresh_if_older(UNKNOWN_OWNER_POLL_S)

    async def send(self, parts: Sequence[bytes], topic: str | None = None,
                   key: str | bytes | None = None, tag: str | None = None,
                   dedup_id: str | bytes | None = None, headers: Sequence[bytes] = (),
                   timeout: float | None = 30.0, *, delay: float | None = None,
                   not_before: Moment | None = None, ttl: float | None = None,
                   expires: Moment | None = None, priority: int | None = None) -> ProducerAck:
        """``publish``, then the wait for the message's final ACK (within ``timeout`` s
        each)."""
        future = await self.publish(parts, topic, key, tag, dedup_id, headers, timeout,
                                    delay=delay, not_before=not_before, ttl=ttl,
                                    expires=expires, priority=priority)
        for producer in self._producers.values():
            producer.send_batch()
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            raise TimeoutError(f"no ACK within {timeout:g} s: "
                               f"{await self._why_unanswered(future, timeout)}") from None

    async def _why_unanswered(self, future: asyncio.Future[ProducerAck],
                              timeout: float | None) -> str:
        """What a probe finds at the node the message went to (its owner's), as the
        plain Producer.send says it."""
        msg_id = next((msg_id for msg_id, waiting in self._futures.items()
                       if waiting is future), None)
        sent = None if msg_id is None else self._session.sent.get(msg_id)
        if sent is None:
            return "the message was sent"
        why = await probe.why_silent(sent.endpoint, self.curve,
                                     min(timeout or probe.PROBE_TIMEOUT_S,
                                         probe.PROBE_TIMEOUT_S))
        return f"{sent.endpoint}: {why}"

    async def _carry_own(self, routed: Routed, timeout: float | None) -> None:
        """A new message to its owner. While it waits for room in a silent owner's
        window, the watcher may send it to the partition's new owner and close that
        owner's producer (the table counts the node down): it went then, and a message
        whose producer was closed so but which did not move goes again, to a new
        producer; a ClientClosed of this RoutedProducer's close is raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                await self._carry(routed, None if deadline is None
                                  else max(0.0, deadline - time.monotonic()))
                return
            except ClientClosed:
                if self._closed:
                    raise
            sent = self._session.sent.get(routed.msg_id)
            if sent is None or sent.endpoint != routed.endpoint:
                return  # carried to its new owner (answered already, if gone)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no room within {timeout:g} s at {routed.endpoint}")

    async def _carry(self, routed: Routed, timeout: float | None) -> None:
        producer = self._producers.get(routed.endpoint)
        if producer is None:
            # no ack_timeout: the session sends again what a node leaves unanswered
            # (a message given up by the node's producer would fail the caller's
            # future while its owner moved and the session would have sent it on)
            producer = self._producers[routed.endpoint] = Producer(
                routed.endpoint, self.window, self.batch, self.curve, self._context,
                ack_timeout=None)
        answer = await producer.publish(routed.parts, headers=routed.headers, timeout=timeout,
                                        msg_id=routed.msg_id)
        answer.add_done_callback(functools.partial(self._answered, routed.endpoint,
                                                   routed.msg_id))

    def _answered(self, endpoint: str, msg_id: bytes,
                  answer: asyncio.Future[ProducerAck]) -> None:
        """A node's answer to one message: final, or a MOVED that sends it on."""
        sent = self._session.sent.get(msg_id)
        if sent is None or answer.cancelled():
            return
        failure = answer.exception()
        if failure is not None:
            if sent.endpoint == endpoint:  # not the producer of a node it left
                self._session.sent.pop(msg_id, None)
                self._resolve(msg_id, failure)
            return
        self._session.answered([answer.result()])
        for ack in self._session.take_acks():
            self._resolve(ack.msg_id, ack)
        self._changed.set()

    def _resolve(self, msg_id: bytes, answer: ProducerAck | BaseException) -> None:
        future = self._futures.pop(msg_id, None)
        if future is None or future.done():
            return
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)

    async def _settle(self, sending: bool = False) -> None:
        """The table asked for when it must be, and what goes again sent."""
        async with self._settling:
            session = self._session
            age = session.table_age(time.monotonic(), sending)
            if age is not None:
                await self.table.refresh_if_older(age)
            for routed in session.reroutes(time.monotonic()):
                if routed.was in self._producers:  # its room there is free: it goes again
                    self._producers[routed.was].forget(routed.msg_id)
                await self._carry(routed, REROUTE_TIMEOUT_S)
            for endpoint in session.left():
                producer = self._producers.pop(endpoint, None)
                if producer is not None:
                    await producer.close()

    async def _watch(self) -> None:
        """While messages are out: look again at the session's pace, and at once after
        a MOVED or an ACK."""
        session = self._session
        while not self._closed:
            wake = session.next_deadline(time.monotonic())
            if not self._changed.is_set():
                try:
                    async with asyncio.timeout(None if wake is None
                                               else max(0.0, wake - time.monotonic())):
                        await self._changed.wait()
                except TimeoutError:
                    pass
            self._changed.clear()  # (set again while settling: looked at once more)
            try:
                await self._settle()
            except (TimeoutError, ClientClosed):
                pass  # tried again at the next look

    async def flush(self, timeout: float = 30.0) -> None:
        """Wait until every message taken has its final ACK (after any MOVED, by its
        owner); TimeoutError naming how many have not."""
        self._check_open()
        for producer in self._producers.values():
            producer.send_batch()
        try:
            async with asyncio.timeout(timeout):
                while self._session.sent:
                    waiting = [future for future in self._futures.values() if not future.done()]
                    if waiting:  # the watcher sends on what a MOVED or a silence moves
                        await asyncio.wait(waiting, timeout=0.1,
                                           return_when=asyncio.FIRST_COMPLETED)
                    else:  # a publish is carrying its message: its Future comes soon
                        await asyncio.sleep(0.05)
        except TimeoutError:
            raise TimeoutError(f"{messages(self.outstanding)} without ACK after "
                               f"{timeout:g} s") from None

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the producer is closed")

    async def close(self) -> None:
        """Close every node's producer; messages without a final ACK have their
        Futures answered with ClientClosed."""
        if self._closed:
            return
        self._closed = True
        self._changed.set()
        try:
            if self._watcher is not None:
                self._watcher.cancel()
                await asyncio.wait([self._watcher])
        finally:  # cancelled meanwhile too: each node's producer closed (none waits)
            for producer in self._producers.values():
                await producer.close()
            closed = ClientClosed(CLOSED_UNANSWERED)
            for msg_id in list(self._futures):
                self._resolve(msg_id, closed)

    async def __aenter__(self) -> RoutedProducer:
        await self.table.known()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
