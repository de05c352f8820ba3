"""A consumer of one group of one topic on a node's --consume-dsn (see docs/groups.rst,
"The consume endpoint"). Its session (pzq.client.sessions.group) joins the group,
joins again, agrees the protocol and keeps the deliveries; this shell owns the
socket, reads the clock and waits. It must stay on the thread that made it.

The consumer stays alive for the node as long as its connection does: ZeroMQ's
heartbeats (PING and PONG) run in the socket's I/O thread, so the application may
work on a delivery as long as its ack timeout allows without calling in here.
``receive`` still sends a HEARTBEAT when it has waited a period with nothing to say:
a node that restarted does not know this connection, answers so, and the consumer
joins again.

Sending never waits past a call's timeout: what the socket does not take (a node down
or stopped with its pipe full, a node that refuses the key when the socket connects
again, which leaves it no pipe at all) waits here, in order, and goes first at the
next call once the node takes it. ``ack`` and the other answers do not wait for room
(an ACK that never went means a delivery again: at least once); ``close`` gives what
waits a second.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

import zmq

from pzq import curve_probe
from pzq.client import router_probe, setup
from pzq.client.common import (
    NOTICE_AFTER_S,
    WaitNotice,
    mark_closed,
    mark_open,
    opener,
    remaining_ms,
    send_before,
    watch_links,
)
from pzq.client.message import Message
from pzq.client.session_views import GroupView
from pzq.client.sessions.delivered import own_key, own_keys
from pzq.client.sessions.group import ROUTER_CHECK_AFTER_S, Out, unconfirmed_error
from pzq.client.setup import HEARTBEAT_IVL_MS, HEARTBEAT_TIMEOUT_MS
from pzq.errors import ClientClosed, ConsumeUnanswered
from pzq.protocol import consume as consume_wire
from pzq.security import ClientSecurity
from pzq.zmqio import Context, readable, recv_frames, send_frames

CLOSE_DRAIN_S = 1.0  # what waits to be sent at close is given this long to go
__all__ = ["HEARTBEAT_IVL_MS", "HEARTBEAT_TIMEOUT_MS", "GroupConsumer"]


class GroupConsumer(GroupView[Message]):
    """Receives the deliveries of one consumer group, at most ``window`` unacked."""

    _closed: str  # why it may be used no more ("" while open): common.mark_open

    def __init__(self, dsn: str | Sequence[str], topic: str, group: str, window: int = 100,
                 filter: str = "", start: str | int | datetime = "earliest",
                 context: Context | None = None, curve: ClientSecurity | None = None,
                 timeout: float | None = 10.0, notice: WaitNotice | None = None,
                 declare: bool = False, confirm: bool = False,
                 protocol: int = consume_wire.LATEST_PROTOCOL, wait: bool = True) -> None:
        """``wait=False``: the CONSUME goes, its answer is not waited for here (a routed
        consumer joins its nodes so, at once): ``answered`` reads it."""
        timeout = setup.join_timeout(timeout)
        mark_open(self)
        subscribe = consume_wire.Subscribe(topic, group, window, filter,
                                           consume_wire.start_of(start), confirm=confirm,
                                           declare=declare, protocol=protocol)
        self._dsn, self._curve = dsn, curve  # probed when CONSUME has no answer
        self._unsent: deque[list[bytes]] = deque()  # what the socket did not take yet
        now = time.monotonic()
        self._session, self._socket = setup.group_consumer(
            subscribe, Message, self, now, opener(context, dsn, curve))
        self._links = watch_links(self._socket, dsn)
        try:
            if not send_before(self._socket, self._session.consume(now),
                               None if timeout is None else now + timeout):
                # no connection took it (a refused handshake leaves none): unanswered
                # too, and the probe says why, as when it went and no answer came
                assert timeout is not None
                raise self._unanswered(timeout)
            if wait:
                self._await_consuming(timeout, notice)
        except BaseException:
            self._links.close()
            self._socket.close(0)
            raise

    # -- what the session knows ------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Every endpoint has a working connection (its handshake taken, not lost since);
        a wait while one has had none for SILENT_WARN_S (5 s) is logged
        (pzq.client.link_watch)."""
        return self._links.connected(time.monotonic())

    @property
    def heartbeat_s(self) -> float:
        """Seconds of silence after which ``receive`` asks the node (a HEARTBEAT)."""
        return self._session.heartbeat_s

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """Its socket, to wait on beside others (a routed consumer's)."""
        return self._socket

    # -- joining -------------------------------------------------------------------

    def _await_consuming(self, timeout: float | None, notice: WaitNotice | None) -> None:
        """Wait ``timeout`` seconds (None: for ever), then ConsumeUnanswered saying what
        a probe finds at the endpoint, as the asyncio consumer does. Unanswered for
        ROUTER_CHECK_AFTER_S, a probe asks whether a ROUTER is there at all
        (ConsumeRefused at a --send-dsn, which never answers); ``notice`` is called once
        after NOTICE_AFTER_S without an answer, so a tool can say what it waits for."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if timeout is None or timeout > ROUTER_CHECK_AFTER_S:
            if self._consuming_within(ROUTER_CHECK_AFTER_S):
                return
            self._session.router_told(self._routers())
        if notice is not None and (timeout is None or timeout > NOTICE_AFTER_S):
            if self._consuming_within(max(0.0, NOTICE_AFTER_S - ROUTER_CHECK_AFTER_S)):
                return
            notice()
        if deadline is None:
            self._consuming_within(None)
        elif not self._consuming_within(max(0.0, deadline - time.monotonic())):
            assert timeout is not None
            raise self._unanswered(timeout)

    def _routers(self) -> list[tuple[str, bool | None]]:
        """Whether a ROUTER answers at each endpoint (pzq.client.router_probe)."""
        dsns = [self._dsn] if isinstance(self._dsn, str) else list(self._dsn)
        return [(dsn, router_probe.is_router(dsn, self._curve)) for dsn in dsns]

    @property
    def joined(self) -> bool:
        """The node said CONSUMING."""
        return self._session.joined

    @property
    def router_check_at(self) -> float | None:
        """When ``answered`` asks whether a ROUTER is at the endpoint, if no answer
        came (None: it will not)."""
        return self._session.router_check_at

    def answered(self) -> bool:
        """Read what the node said without waiting: True once it said CONSUMING;
        ConsumeRefused when it refused the group, or when, unanswered for
        ROUTER_CHECK_AFTER_S, its endpoint proves no ROUTER (a --send-dsn, which
        never answers: the probe's handshake, a few ms, is made once a join)."""
        session = self._session
        if session.joined or self._consuming_within(0):
            return True
        if session.router_check_due(time.monotonic()):
            session.router_told(self._routers())
        return False

    def _unanswered(self, timeout: float) -> ConsumeUnanswered:
        """No answer to CONSUME within ``timeout``: what a probe finds at the endpoint."""
        return ConsumeUnanswered(timeout, curve_probe.why_silent(
            self._dsn, self._curve, curve_probe.probe_timeout(timeout)))

    def _consuming_within(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self._session
        while True:
            if not self._poll(remaining_ms(self._links.looked(time.monotonic(), deadline))):
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue  # woken for the links' warning
            if not readable(self._socket):  # room for what waits to be sent
                self._send_all(())
                continue
            self._send_all(session.received(self._socket.recv_multipart(), time.monotonic()))
            if session.joined:
                return True

    # -- deliveries ----------------------------------------------------------------

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds;
        ConsumeRefused, again at each call, once the node refused the group."""
        if self._closed:
            raise ClientClosed(self._closed)
        session = self._session
        arrived = session.arrived
        if arrived:
            return arrived.popleft()
        session.refuse_if_removed()  # (a refusal emptied arrived)
        deadline = None if timeout is None else time.monotonic() + timeout
        socket = self._socket
        # One by one (protocol 1) what has arrived is taken without asking first (one
        # call less per delivery while they stream in). A batch is mostly a round trip
        # away when the last was taken (its ACK just went): asked for first, at a third
        # of the cost of a refused receive; the poll is for waiting.
        ask = session.protocol > 1
        while True:
            now = time.monotonic()
            self._send_due(now)
            frames = None
            if not ask or readable(socket):
                try:
                    frames = recv_frames(socket)
                except zmq.Again:
                    pass
            if frames is None:
                if not self._wait(deadline):
                    return None
                ask = False  # (the wait saw input, mostly)
                continue
            if out := session.received(frames, now):
                self._send_all(out)
            if arrived:
                return arrived.popleft()

    def _send_due(self, now: float) -> None:
        """What waits to be sent, else what time asks for (a HEARTBEAT: none more while
        something waits, which asks the node as well)."""
        if self._unsent:
            self._send_all(())
        elif out := self._session.wake(now):
            self._send_all(out)

    def receive_many(self, most: int, timeout: float | None = None) -> list[Message]:
        """Up to ``most`` deliveries: waits up to ``timeout`` s for the first, then takes
        what has arrived already, without waiting more (whole batches at once)."""
        first = self.receive(timeout)
        if first is None:
            return []
        found = [first]
        session = self._session
        while len(found) < most:
            if session.arrived:
                found += session.take(most - len(found))
            elif (message := self.receive(0)) is not None:
                found.append(message)
            else:
                break
        return found

    def messages(self, idle_timeout: float | None = None) -> Iterator[Message]:
        """Yield deliveries until none arrives for ``idle_timeout`` seconds."""
        while (message := self.receive(idle_timeout)) is not None:
            yield message

    def __iter__(self) -> Iterator[Message]:
        """Every delivery, as it comes (``messages(idle_timeout)`` stops when idle)."""
        return self.messages()

    def _wait(self, deadline: float | None) -> bool:
        """Wait for input, at most until the session's next deadline; False once
        ``deadline`` has passed."""
        now = time.monotonic()
        wake = self._links.looked(now, self._session.next_deadline(now))
        assert wake is not None
        wait_ms = max(1, int((wake - now) * 1000))
        left = remaining_ms(deadline)
        if self._poll(wait_ms if left is None else min(left, wait_ms)):
            return True
        return deadline is None or time.monotonic() < deadline

    def _poll(self, timeout_ms: int | None) -> bool:
        """Wait up to ``timeout_ms`` (None: for ever) for input, or for room while
        something waits to be sent."""
        events = zmq.POLLIN | zmq.POLLOUT if self._unsent else zmq.POLLIN
        return bool(self._socket.poll(timeout_ms, events))

    # -- answers -------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Not needed to stay alive (the connection's heartbeats do that); kept for
        programs written when it was."""
        self._send_all([self._session.heartbeat(time.monotonic())])

    def ack(self, message: Message) -> None:
        """Done with this delivery (``message.ack()`` calls this): removed from pzq."""
        self._send_all(self._session.ack(own_key(message, self), time.monotonic()))

    def ack_many(self, messages: Iterable[Message]) -> None:
        """ACK these deliveries in one ACK (cheaper for both ends than one each)."""
        self._send_all(self._session.ack(own_keys(messages, self),
                                         time.monotonic()))

    def nack_many(self, messages: Iterable[Message], delay: float | None = None) -> None:
        """Give these deliveries back in one NACK: to go again at once, or after
        ``delay`` seconds. One the node forgot since (it restarted, or counted this
        consumer gone: given back already) is left out: its key would give back the
        node's delivery of the same message made since."""
        session = self._session
        self._send_all(session.nack(own_keys(messages, self, session.forgot_upto_us),
                                    time.monotonic(), delay))

    def nack(self, message: Message, delay: float | None = None) -> None:
        """Give it back: to go again at once, or after ``delay`` seconds (as
        ``nack_many``)."""
        session = self._session
        self._send_all(session.nack(own_key(message, self, session.forgot_upto_us),
                                    time.monotonic(), delay))

    def working(self, *messages: Message) -> None:
        """Still at work on these: each one's ack deadline starts again (send it well
        inside the deadline, as often as the work needs)."""
        self._send_all(self._session.working(own_keys(messages, self),
                                             time.monotonic()))

    def reject(self, *messages: Message) -> None:
        """Give these up for good: to the dead letters, never delivered again."""
        self._send_all(self._session.reject(own_keys(messages, self),
                                            time.monotonic()))

    def ack_confirmed(self, messages: Iterable[Message], timeout: float = 10.0) -> None:
        """ACK and wait until the node says the ACKs are written (``confirm=True``);
        TimeoutError if it has not said so within ``timeout`` s (the ACKs not sent by
        then still go, once the node takes them). Deliveries that come meanwhile wait
        for ``receive``."""
        if self._closed:
            raise ClientClosed(self._closed)
        session = self._session
        keys = own_keys(messages, self)
        deadline = time.monotonic() + timeout
        self._send_all(session.confirm(keys, time.monotonic()), deadline)
        while session.unconfirmed(keys):
            if not self._poll(remaining_ms(deadline)):
                waiting = session.unconfirmed(keys)
                session.forget_unconfirmed(keys)
                raise unconfirmed_error(waiting, timeout, curve_probe.why_silent(
                    self._dsn, self._curve, curve_probe.probe_timeout(timeout)))
            if not readable(self._socket):  # room for what waits to be sent
                self._send_all((), deadline)
                continue
            self._send_all(session.received(self._socket.recv_multipart(), time.monotonic()))

    @property
    def unsent(self) -> int:
        """Messages (ACKs, a CONSUME again, ...) the socket has not taken yet: they go
        first, in order, once the node takes them."""
        return len(self._unsent)

    def _send_all(self, out: Out, deadline: float = 0.0) -> bool:
        """Send ``out`` after what waits from before, in order, waiting for room until a
        monotonic ``deadline`` (0: not at all); what the socket has not taken by then
        waits for the next call. True once nothing waits.

        A blocking send waited for ever: a DEALER whose node is down or stopped takes
        no more once its pipe is full, and one whose handshake was refused has no pipe
        to send on until a handshake succeeds."""
        unsent, socket = self._unsent, self._socket
        if self._closed:
            raise ClientClosed(self._closed)
        unsent.extend(out)
        while unsent:
            try:
                send_frames(socket, unsent[0])
            except zmq.Again:
                left = remaining_ms(deadline)
                if left == 0:
                    return False
                socket.poll(left, zmq.POLLOUT)
                continue
            unsent.popleft()
        return True

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return bool(self._closed)

    def close(self) -> None:
        """Send what waits (for up to CLOSE_DRAIN_S: 1 s), and say BYE, so the node
        gives back what is unacked at once; what the node did not take goes no more (an
        ACK lost so means a delivery again). A second call does nothing."""
        if not self._closed:
            try:
                self._send_all((), time.monotonic() + CLOSE_DRAIN_S)
            except zmq.ZMQError:
                pass
            try:
                self._socket.send_multipart(self._session.bye(), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self._links.close()
            self._socket.close()
            mark_closed(self, "consumer")

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
