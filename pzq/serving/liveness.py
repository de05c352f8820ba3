"""Whether the consumers on --consume-dsn are still there, from their connections
alone: what the consumer's code does (or does not) call plays no part.

ZeroMQ's own heartbeats on the socket (``pzq.sockets.bind_consume``: PING and PONG,
answered by the consumer's I/O thread) close a connection that stays silent; a closed
connection shows as a disconnection event, after which a HEARTBEAT sent to each
consumer finds the one whose connection is gone (ROUTER_MANDATORY: no such peer).
A send to a consumer that finds no peer starts the same look.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

import zmq

from pzq.protocol import consume as consume_wire
from pzq.serving.holding import ServedConsumer
from pzq.zmqio import Socket, readable, send_frames


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


LOOK_AGAIN_S = 0.05


class ConsumerLiveness:
    def __init__(self, socket: Socket, heartbeat_s: float) -> None:
        self.socket = socket
        self.heartbeat_s = heartbeat_s
        self._probe_due = 0.0  # when a look for gone consumers was asked for (0: none)
        # Looks again after a disconnection: the socket may still know the closed
        # connection's peer for a moment after the event (measured: a few ms).
        self._looks_again: list[float] = []

    def tick(self, mono: float,
             consumers: Iterable[ServedConsumer]) -> list[tuple[ServedConsumer, str]]:
        """Returns the consumers gone, with why (a disconnection asked for a look:
        ``look_soon``). What a consumer sent before it went (its last ACKs, its BYE) is
        read first: while input waits, the look is put off to the next wake, for at
        most a heartbeat period."""
        if self._looks_again and mono >= self._looks_again[0]:
            self._looks_again = [at for at in self._looks_again if at > mono]
            self._probe_due = self._probe_due or mono
        if not self._probe_due:
            return []
        if readable(self.socket) and mono - self._probe_due < self.heartbeat_s:
            return []
        self._probe_due = 0.0
        return self._probe(consumers)

    def look_soon(self, mono: float) -> None:
        """A connection went: look for who, once what it sent before is read, and
        again shortly after and a heartbeat period after."""
        self._probe_due = self._probe_due or mono
        self._looks_again = [mono + min(LOOK_AGAIN_S, self.heartbeat_s),
                             mono + self.heartbeat_s]

    def _probe(self, consumers: Iterable[ServedConsumer]) -> list[tuple[ServedConsumer, str]]:
        gone = []
        for consumer in consumers:
            if try_send(self.socket, [consumer.routing_id, consume_wire.HEARTBEAT]) is None:
                gone.append((consumer, "disconnected"))
            else:
                consumer.unreachable = False  # its connection is there after all
        return gone

    def wait_key(self, blocked: bool) -> tuple[bool, float | None]:
        """What ``timeout_ms`` goes by, but for the time: a wake whose key did not
        change has no shorter wait to tell."""
        return blocked or bool(self._probe_due), self._looks_again[0] if self._looks_again else None

    def timeout_ms(self, mono: float, blocked: bool) -> int | None:
        if blocked or self._probe_due:
            return 5
        if self._looks_again:
            return max(0, int((self._looks_again[0] - mono) * 1000) + 1)
        return None
