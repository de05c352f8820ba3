"""A windowed Producer: sends messages and collects their ACKs.

It speaks the documented frame layouts (pzq.protocol.frames) over a plain ZeroMQ
DEALER, so it also works against the original pzq. Its session
(pzq.client.sessions.producer) keeps the window and the produce batches; this
shell owns the socket and waits. An instance owns its socket and must stay on the
thread that made it.

A message whose ACK has not come ``ack_timeout`` s after it went is given up where the
producer waits (a full window, ``acks``, ``flush``, ``produce``): its room in the
window is free again and ``acks`` returns an ACK the producer made for it (not ok,
``given_up``). A node killed with the message, or with its ACK, never answers it (it
answers on the connection it took the message from); without this, each such message
would take a place in the window for good, and ``flush`` would never end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import zmq

from pzq import curve_probe
from pzq.client import setup
from pzq.client.common import mark_closed, mark_open, messages, opener, send_before
from pzq.client.session_views import ProducerView
from pzq.client.sessions.producer import (
    ACK_TIMEOUT_S,
    KEEP_ACKS,
    Moment,
    given_up_error,
    time_headers,
    topic_headers,
    unanswered_error,
    with_options,
)
from pzq.errors import ClientClosed
from pzq.protocol.frames import ProducerAck
from pzq.security import ClientSecurity
from pzq.zmqio import Context

CLOSE_SEND_S = 1.0  # how long close waits for the socket to take the last batch

__all__ = ["KEEP_ACKS", "Moment", "Producer", "time_headers", "topic_headers"]


class Producer(ProducerView):
    """Sends messages and collects their ACKs, keeping up to ``window`` unanswered.

    A long-lived producer stays the same size: it keeps the last ``keep_acks`` ACKs
    that ``acks()`` has not returned yet (older ones are dropped and counted in
    ``acks_dropped``) and the last ``keep_acks`` latencies.

    ``batch``: most messages in one produce batch (default a quarter of the window,
    so that four batches are out at once); 1 sends every message alone.

    ``ack_timeout``: seconds after which a message sent without its ACK is given up
    (``acks``/``flush`` return an ACK not ok with ``given_up``, ``produce`` raises
    TimeoutError; None: kept until ``close``)."""

    _closed: str  # why it may be used no more ("" while open): common.mark_open

    def __init__(self, dsn: str | Sequence[str], window: int = 100,
                 context: Context | None = None, curve: ClientSecurity | None = None,
                 keep_acks: int = KEEP_ACKS, batch: int | None = None,
                 ack_timeout: float | None = ACK_TIMEOUT_S) -> None:
        mark_open(self)
        self._dsn, self._curve = dsn, curve  # probed when an ACK does not come
        self._session, self._socket = setup.producer(
            window, batch, keep_acks, opener(context, dsn, curve), ack_timeout=ack_timeout)
        self._topic_frames: dict[str | None, list[bytes]] = {}  # a topic's TOPIC frame
        # no message out can be overdue before this (monotonic): _receive looks then
        self._check_at = math.inf if ack_timeout is None else time.monotonic() + ack_timeout

    @property
    def keep_acks(self) -> int:
        """Most ACKs (and latencies) kept for ``acks()``; older ones are dropped."""
        return self._session.keep_acks

    @property
    def acks_dropped(self) -> int:
        """ACKs dropped unread, past ``keep_acks``."""
        return self._session.acks_dropped

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """Its socket, to wait on beside others (a routed producer's)."""
        return self._socket

    def send(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
             msg_id: bytes | None = None, timeout: float | None = 30.0,
             topic: str | None = None, tag: str | None = None,
             dedup_id: str | bytes | None = None, *, key: str | bytes | None = None,
             delay: float | None = None,
             not_before: Moment | None = None, ttl: float | None = None,
             expires: Moment | None = None, priority: int | None = None) -> bytes:
        """Send one message; waits (collecting ACKs) while the window is full.
        ``topic``, ``tag``, ``dedup_id`` and ``key`` add the TOPIC, TAG, DEDUP-ID and KEY
        header frames (a repeat of a ``dedup_id`` within the topic's window is stored
        once; a ``key`` names the partition of a partitioned topic, as ``pzq.aio``'s).
        ``delay`` (seconds) or ``not_before`` (a datetime or µs since the epoch): not
        delivered before; ``ttl`` (seconds) or ``expires``: worthless after;
        ``priority`` 0-9 (9 first, on a topic with priorities on): their header frames
        (pzq.protocol.time_headers; ValueError for a value the node would refuse)."""
        if self._closed:
            raise ClientClosed(self._closed)
        headers = with_options(self._topic_frames, headers, topic, key, tag, dedup_id)
        if delay is not None or not_before is not None or ttl is not None \
                or expires is not None or priority is not None:
            headers = [*headers, *time_headers(delay, not_before, ttl, expires, priority)]
        session = self._session
        if len(session.unanswered) >= session.window:
            self._wait_for_room(timeout)
        msg_id = msg_id or next(session.ids)
        frames = session.add(msg_id, parts, headers, time.monotonic())
        if frames is not None:  # else it waits in the next batch
            self._send(frames, timeout)
        return msg_id

    def _wait_for_room(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self._session
        while session.full:
            self._send(session.due_batch(), timeout)
            if not self._receive(deadline):
                raise TimeoutError(f"no ACK within {timeout} s with a full window")

    def _send(self, frames: list[bytes] | None, timeout: float | None = 30.0) -> None:
        """Send ``frames`` (None: nothing is due); TimeoutError when the socket has
        not taken them within ``timeout`` s (no connection to send on, as after a
        refused CURVE handshake, or the node far behind)."""
        if frames is None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        if not send_before(self._socket, frames, deadline):
            raise TimeoutError(f"the producer could not send within {timeout:g} s: "
                               "no connection took the message")

    def forget(self, msg_id: bytes) -> None:
        """Wait no more for this message's ACK: its room in the window is free (a
        routed producer that sends it again after its node lost it)."""
        self._session.forget(msg_id)

    def acks(self, timeout: float = 0.0) -> list[ProducerAck]:
        """ACKs received so far (and those of messages given up), waiting up to
        ``timeout`` s for one if none is here."""
        if self._closed:
            raise ClientClosed(self._closed)
        session = self._session
        self._send(session.pending_batch())
        deadline = time.monotonic() + timeout
        while not session.arrived and self._receive(deadline):
            pass
        while self._receive(0.0):
            pass
        return session.take_acks()

    def flush(self, timeout: float = 30.0) -> list[ProducerAck]:
        """Wait until every sent message is ACKed or given up (``ack_timeout``); returns
        the ACKs not yet returned."""
        if self._closed:
            raise ClientClosed(self._closed)
        deadline = time.monotonic() + timeout
        self._send(self._session.pending_batch(), timeout)
        while self._session.unanswered:
            if not self._receive(deadline):
                raise TimeoutError(f"{messages(len(self._session.unanswered))} without ACK "
                                   f"after {timeout} s")
        return self.acks()

    def produce(self, parts: Sequence[bytes], headers: Sequence[bytes] = (),
                timeout: float = 30.0, topic: str | None = None,
                tag: str | None = None, dedup_id: str | bytes | None = None, *,
                key: str | bytes | None = None,
                delay: float | None = None, not_before: Moment | None = None,
                ttl: float | None = None, expires: Moment | None = None,
                priority: int | None = None) -> ProducerAck:
        """Send one message and wait for its own ACK (the options: ``send``'s);
        TimeoutError when none came within ``timeout`` s, saying what a probe finds at
        the endpoint (nothing answers there, a refused key, ...), as ``pzq.aio``'s
        ``send`` does, or when it was given up (``ack_timeout``)."""
        msg_id = self.send(parts, headers, timeout=timeout, topic=topic, tag=tag,
                           dedup_id=dedup_id, key=key, delay=delay, not_before=not_before,
                           ttl=ttl, expires=expires, priority=priority)
        self._send(self._session.pending_batch(), timeout)
        deadline = time.monotonic() + timeout
        while (ack := self._session.take_ack(msg_id)) is None:
            if not self._receive(deadline):
                raise unanswered_error(timeout, curve_probe.why_silent(
                    self._dsn, self._curve, curve_probe.probe_timeout(timeout)))
        if ack.given_up:
            raise given_up_error(self._session.ack_timeout or 0.0)
        return ack

    def _receive(self, deadline: float | None) -> bool:
        """Take one frame off the socket, waiting until the monotonic ``deadline`` (None:
        for ever) at most, and give up the messages overdue meanwhile (``ack_timeout``).
        False when the deadline came with neither."""
        now = time.monotonic()
        if now >= self._check_at:
            self._give_up(now)
        check_at = self._check_at
        until = check_at if deadline is None or check_at < deadline else deadline
        wait_ms = None if until == math.inf else max(0, math.ceil((until - now) * 1000))
        if not self._socket.poll(wait_ms, zmq.POLLIN):
            now = time.monotonic()
            if now < check_at:
                return False  # the deadline's
            self._give_up(now)
            return True
        self._session.received(self._socket.recv_multipart(), time.monotonic())
        return True

    def _give_up(self, now: float) -> None:
        """The messages out ``ack_timeout`` s without their ACK given up (their ACKs:
        ``given_up``), and when to look again: the oldest left's deadline (a later
        one's is later: it went later, and ACKs only take messages away)."""
        session = self._session
        session.give_up(now)
        self._check_at = session.next_deadline(now) or now + (session.ack_timeout or math.inf)

    @property
    def closed(self) -> bool:
        """``close()`` was called: every call but ``close`` raises ClientClosed."""
        return bool(self._closed)

    def close(self) -> None:
        """Send the produce batch that waits (for up to a second) and close the socket;
        messages still without an ACK are not waited for (``flush()`` first). A second
        call does nothing."""
        if self._closed:
            return
        try:  # sent, as a message sent alone would be
            self._send(self._session.pending_batch(), CLOSE_SEND_S)
        except TimeoutError:
            pass  # nothing took it: those messages were never ACKed, as flush says
        self._socket.close()
        mark_closed(self, "producer")

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
