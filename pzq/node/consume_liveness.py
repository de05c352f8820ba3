"""Whether the consumers on --consume-dsn are still there: heartbeats both ways, and
the socket's disconnection events. A consumer that is silent for HEARTBEAT_MISSES
heartbeats, or whose connection is gone (a send to it finds no peer), is gone."""

from __future__ import annotations

import errno
from collections.abc import Iterable

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.node.consume_groups import Consumer
from pzq.protocol import consume as wire
from pzq.zmqio import Socket, readable, send_frames

HEARTBEAT_MISSES = 3  # silent this many heartbeat periods: the consumer is gone


def try_send(socket: Socket, frames: list[bytes]) -> bool | None:
    """True sent; False the consumer's pipe is full; None the consumer is gone."""
    try:
        send_frames(socket, frames)
    except zmq.Again:
        return False
    except zmq.ZMQError as exc:
        if exc.errno == errno.EHOSTUNREACH:
            return None
        raise
    return True


class ConsumerLiveness:
    def __init__(self, socket: Socket, events: Socket, heartbeat_s: float) -> None:
        self.socket = socket
        self.events = events  # the socket's disconnections: look for who went
        self.heartbeat_s = heartbeat_s
        self._next_heartbeat = 0.0
        self._probe_due = 0.0  # when a look for gone consumers was put off (0: none)

    def tick(self, mono: float, disconnected: bool,
             consumers: Iterable[Consumer]) -> list[tuple[Consumer, str]]:
        """Heartbeats out; returns the consumers gone, with why. ``disconnected``: the
        poll saw a disconnection event. What a consumer sent before it went (its last
        ACKs, its BYE) is read first: while input waits, the look is put off to the
        next wake, for at most a heartbeat period."""
        if disconnected:
            while self.events.poll(0):
                recv_monitor_message(self.events)
            self.look_soon(mono)
        if not self._probe_due and mono < self._next_heartbeat:
            return []
        due = self._probe_due or mono
        if readable(self.socket) and mono - due < self.heartbeat_s:
            self._probe_due = due
            return []
        self._probe_due = 0.0
        return self._probe(mono, consumers)

    def look_soon(self, mono: float) -> None:
        """A connection went: look for who, once what it sent before is read."""
        self._probe_due = self._probe_due or mono

    def _probe(self, mono: float, consumers: Iterable[Consumer]) -> list[tuple[Consumer, str]]:
        self._next_heartbeat = mono + self.heartbeat_s
        silent_after = HEARTBEAT_MISSES * self.heartbeat_s
        gone = []
        for consumer in consumers:
            if mono - consumer.last_heard > silent_after:
                gone.append((consumer, "silent"))
            elif try_send(self.socket, [consumer.routing_id, wire.HEARTBEAT]) is None:
                gone.append((consumer, "disconnected"))
            else:
                consumer.unreachable = False  # its connection is there after all
        return gone

    def timeout_ms(self, mono: float, blocked: bool, any_consumers: bool) -> int | None:
        if blocked or self._probe_due:
            return 5
        if not any_consumers:
            return None
        return max(0, int((self._next_heartbeat - mono) * 1000) + 1)
