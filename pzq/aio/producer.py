"""The asyncio Producer: a shell over the producer's session (pzq.client.sessions.producer)
on a ``zmq.asyncio`` DEALER, as the sync Producer is one on a plain socket.

``publish`` takes a message into the window and returns a Future that its ACK
resolves; ``send`` is ``publish`` and the wait for that ACK. A task of the producer's
own reads the node's ACKs as they come and resolves each message's Future, so any
number of tasks may publish and wait at once, on the one event loop that made the
producer (its socket is that loop's).

Cancellation: ``publish`` waits in one place only, for room in the window, before
the message is taken; from then on it does not wait. So a task cancelled inside
``publish`` has sent nothing (the message is in no window, no batch and not on the
socket), and once ``publish`` has returned the message is the producer's: it goes
on the socket at once, or with its produce batch, whole (a cancellation cuts no
multipart message: pzq.aio.socket_io), and its Future resolves at its ACK whatever
happens to the task that waits for it (the producer holds it; a waiter that must
survive its own cancellation awaits it through ``asyncio.shield``). ``send`` is
cancelled either in ``publish`` (not sent) or while it waits for the ACK (sent):
a task that must tell which after a cancellation uses the two steps.

A message whose ACK has not come ``ack_timeout`` s after it went is given up: its
Future has a TimeoutError and its room in the window is free again. A node killed
with the message, or with its ACK, never answers it (it answers on the connection
it took the message from); without this, each such message would take a place in
the window for good, and the producer would stop once they filled it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from pzq.aio import probe
from pzq.aio.socket_io import AsyncContext, Outbox, opener, poke, wait_events
from pzq.client import setup
from pzq.client.common import messages
from pzq.client.session_views import ProducerView
from pzq.client.sessions.producer import (
    ACK_TIMEOUT_S,
    KEEP_ACKS,
    Moment,
    given_up_error,
    time_headers,
    unanswered_error,
    with_options,
)
from pzq.errors import ClientClosed
from pzq.protocol.frames import ProducerAck
from pzq.security import ClientSecurity
from pzq.zmqio import POLLIN, drain

__all__ = ["Producer"]

READ_AT_ONCE = 1000  # ACK frames read in one wake before the loop runs other tasks


# Sent, but unanswered: it may be in the node's store already, or arrive there yet
# (the socket's linger hands what it holds to a node that was only slow)
CLOSED_UNANSWERED = ("the producer was closed before this message's ACK came: the node "
                     "may have stored it or not; send it again with the same dedup_id "
                     "to have it stored once")

OTHER_LOOP = ("this pzq.aio.Producer belongs to the event loop it was first used on, "
              "which reads its ACKs: nothing was sent; make a Producer in each event loop "
              "(each asyncio.run) that sends")


class Producer(ProducerView):
    """Sends messages to a node's --receive-dsn and resolves each one's Future at its
    ACK, keeping up to ``window`` unanswered. ``batch``: most messages in one produce
    batch (default a quarter of the window); 1 sends every message alone. ``curve``:
    this client's key pair and the node's public key, with CURVE on the node.

    An ACK carries what the sync client's does: ``ok``, and REPLICATION_FAILED,
    DUPLICATE, MOVED or the reason of a refusal in ``status_message``.
    ``ack_timeout``: seconds after which a message sent without its ACK is given up
    (its Future: TimeoutError; None: kept until ``close``)."""

    def __init__(self, dsn: str | Sequence[str], window: int = 100, batch: int | None = None,
                 curve: ClientSecurity | None = None, context: AsyncContext | None = None,
                 keep_acks: int = KEEP_ACKS, ack_timeout: float | None = ACK_TIMEOUT_S) -> None:
        self.dsn = dsn
        self.curve = curve
        self._session, self._socket = setup.producer(window, batch, keep_acks,
                                                     opener(context, dsn, curve),
                                                     keep_arrived=False, ack_timeout=ack_timeout)
        self._out = Outbox(self._socket, "producer")
        self._futures: dict[bytes, asyncio.Future[ProducerAck]] = {}
        self._answered = asyncio.Event()  # set by the reader when ACKs came
        self._reader: asyncio.Task[None] | None = None
        self._overdue_check: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the first publish's
        self._topic_frames: dict[str | None, list[bytes]] = {}  # a topic's TOPIC frame, made once
        self._failure: BaseException | None = None
        self._closed = False

    # -- what the session knows --------------------------------------------------------

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return self._closed

    # -- sending -----------------------------------------------------------------------

    async def publish(self, parts: Sequence[bytes], topic: str | None = None,
                      key: str | bytes | None = None, tag: str | None = None,
                      dedup_id: str | bytes | None = None, headers: Sequence[bytes] = (),
                      timeout: float | None = 30.0,
                      msg_id: bytes | None = None, *, delay: float | None = None,
                      not_before: Moment | None = None, ttl: float | None = None,
                      expires: Moment | None = None, priority: int | None = None
                      ) -> asyncio.Future[ProducerAck]:
        """Take one message and return its Future, which its ACK resolves. Waits while
        the window is full: TimeoutError if no room comes within ``timeout`` s (the
        message not taken). ``topic``, ``key``, ``tag`` and ``dedup_id`` add the TOPIC,
        KEY, TAG and DEDUP-ID header frames; ``headers`` are more, as ``NAME:value``;
        the time options are the sync Producer.send's. Cancelled here, nothing was sent
        (the module's docstring)."""
        if delay is not None or not_before is not None or ttl is not None \
                or expires is not None or priority is not None:
            headers = [*headers, *time_headers(delay, not_before, ttl, expires, priority)]
        headers = with_options(self._topic_frames, headers, topic, key, tag, dedup_id)
        self._check_loop()
        session = self._session
        if len(session.unanswered) >= session.window:  # full (a step less a message)
            await self._room(timeout)
        if self._closed or self._failure is not None:
            self._check_open()
        if msg_id is None:
            msg_id = next(session.ids)
        elif msg_id in self._futures:
            raise ValueError(f"message id {msg_id!r} is already waiting for its ACK")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._reader = loop.create_task(self._read())
            self._check_overdue()
        frames = session.add(msg_id, parts, headers, time.monotonic())  # (TypeError: none)
        future: asyncio.Future[ProducerAck] = loop.create_future()
        self._futures[msg_id] = future
        if frames is not None:
            self._out.put(frames)
        return future

    async def send(self, parts: Sequence[bytes], topic: str | None = None,
                   key: str | bytes | None = None, tag: str | None = None,
                   dedup_id: str | bytes | None = None, headers: Sequence[bytes] = (),
                   timeout: float | None = 30.0, *, delay: float | None = None,
                   not_before: Moment | None = None, ttl: float | None = None,
                   expires: Moment | None = None, priority: int | None = None) -> ProducerAck:
        """Send one message and return its ACK: ``publish``, then the wait for the ACK,
        each within ``timeout`` s (TimeoutError). Cancelled, the message may have gone:
        see the module's docstring for how a caller tells."""
        future = await self.publish(parts, topic, key, tag, dedup_id, headers, timeout,
                                    delay=delay, not_before=not_before, ttl=ttl,
                                    expires=expires, priority=priority)
        if not future.done():
            self._out.put(self._session.due_batch())  # it alone: it goes now
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(future)  # the producer's Future outlives a cancel
            except TimeoutError:
                raise unanswered_error(timeout, await self._why_silent(timeout)) from None
        return future.result()

    def forget(self, msg_id: bytes) -> None:
        """Wait no more for this message's ACK (a routed producer sends it again after
        its node lost it): its Future is cancelled and its room in the window free."""
        self._session.forget(msg_id)
        future = self._futures.pop(msg_id, None)
        if future is not None:
            future.cancel()
        self._answered.set()

    def send_batch(self) -> None:
        """Send the produce batch that waits now, not when it fills or its turn comes."""
        self._check_open()
        self._out.put(self._session.pending_batch())

    async def _room(self, timeout: float | None) -> None:
        """Wait until the window has room (ACKs came). ACKs waiting in the socket are
        taken here first, without a turn of the loop (the reader's wake is the slow
        way, for when none is there yet)."""
        self._check_open()
        self._take_acks()
        if not self._session.full:
            return
        self._out.put(self._session.due_batch())  # no ACK would come to send it
        try:
            async with asyncio.timeout(timeout):
                while self._session.full:
                    self._answered.clear()
                    await self._answered.wait()
                    self._check_open()
        except TimeoutError:
            raise TimeoutError(f"no ACK within {timeout:g} s with a full window: "
                               f"{await self._why_silent(timeout)}") from None

    async def flush(self, timeout: float = 30.0) -> None:
        """Wait until every message taken is ACKed (each Future resolved);
        TimeoutError naming how many are not, after ``timeout`` s."""
        self._check_open()
        self._out.put(self._session.pending_batch())
        try:
            async with asyncio.timeout(timeout):
                while self._session.unanswered:
                    self._answered.clear()
                    await self._answered.wait()
                    self._check_open()
        except TimeoutError:
            raise TimeoutError(f"{messages(self.outstanding)} without ACK after {timeout:g} s: "
                               f"{await self._why_silent(timeout)}") from None

    async def _why_silent(self, timeout: float | None) -> str:
        return await probe.why_silent(self.dsn, self.curve,
                                      min(timeout or probe.PROBE_TIMEOUT_S,
                                          probe.PROBE_TIMEOUT_S))

    # -- ACKs --------------------------------------------------------------------------

    async def _read(self) -> None:
        """The producer's reader: every ACK resolves its message's Future; a batch
        that waits goes when nothing else is out. Only ``close`` stops it."""
        socket = self._socket
        try:
            while True:
                await wait_events(socket, POLLIN, None, "producer")
                self._take_acks()
        except ClientClosed:
            pass  # closed under it
        except Exception as exc:  # no ACK can come any more: every waiter is told
            self._failure = exc
            self._fail(exc)
            self._answered.set()

    def _take_acks(self) -> None:
        """Every ACK waiting in the socket, each resolving its message's Future, and
        the batch that waits when nothing else is out; waiters are told."""
        session, socket = self._session, self._socket
        now = time.monotonic()
        for frames in drain(socket, READ_AT_ONCE):
            self._answer(session.received(frames, now))
        self._out.put(session.due_batch())
        poke(socket)  # (the reads above may have taken the descriptor's signal)
        self._answered.set()

    def _check_overdue(self) -> None:
        """Give up the messages out ``ack_timeout`` s without their ACK, then look
        again when the oldest left is due (a timer, not a wait of the reader: an ACK
        costs no timer)."""
        session, loop = self._session, self._loop
        if self._closed or session.ack_timeout is None or loop is None or loop.is_closed():
            return
        now = time.monotonic()
        given_up = session.overdue(now)
        if given_up:
            lost = given_up_error(session.ack_timeout)
            futures = self._futures
            for msg_id in given_up:
                future = futures.pop(msg_id, None)
                if future is not None and not future.done():
                    future.set_exception(lost)
            self._out.put(session.due_batch(now))  # a batch waiting behind them goes
            self._answered.set()
        wake = session.next_deadline(now) or now + session.ack_timeout
        self._overdue_check = loop.call_at(loop.time() + max(0.01, wake - now),
                                           self._check_overdue)

    def _answer(self, acks: list[ProducerAck]) -> None:
        futures = self._futures
        for ack in acks:
            future = futures.pop(ack.msg_id, None)
            if future is not None and not future.done():
                future.set_result(ack)

    def _fail(self, exc: BaseException) -> None:
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(exc)
                future.exception()  # the closer knows: no warning for a Future unawaited

    def _check_loop(self) -> None:
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            raise RuntimeError(OTHER_LOOP)  # its ACKs are read by a task of that loop

    def _check_open(self) -> None:
        if self._failure is not None:
            raise ClientClosed(f"the producer stopped reading ACKs: {self._failure!r}")
        if self._closed:
            raise ClientClosed("the producer is closed")

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Send the batch that waits and close. Messages not yet ACKed have their
        Futures answered with ClientClosed (``flush`` first to wait for them): sent,
        they may be stored, so send them again with the same dedup_id."""
        if self._closed:
            return
        self._closed = True
        self._out.put(self._session.pending_batch())  # sent, as a message alone would be
        self._out.push()
        self._out.dropped()
        if self._overdue_check is not None:
            self._overdue_check.cancel()
        try:
            if self._reader is not None and not self._reader.done():  # (done: its loop ended)
                self._reader.cancel()
                await asyncio.wait([self._reader])  # (a cancellation of close's own task goes on)
        finally:  # cancelled meanwhile too: every waiter told, the socket closed
            self._fail(ClientClosed(CLOSED_UNANSWERED))
            self._answered.set()
            self._socket.close()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
