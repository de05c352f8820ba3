"""What a sync client and its asyncio twin (pzq.aio) set up alike: for each kind of
client its session and its socket, of the kind and with the options the node expects,
made by the shell's own ``open_socket`` (a plain socket, or a ``zmq.asyncio`` one),
and the options a routed group consumer gives each node's consumer. The two shells
then differ only in how they wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import zmq

from pzq.client.common import WATCH_LINKS, SocketOptions
from pzq.client.sessions.consumer import ConsumerSession
from pzq.client.sessions.delivered import M, MakeMessage
from pzq.client.sessions.group import GroupSession
from pzq.client.sessions.producer import ProducerSession
from pzq.protocol import consume as consume_wire

S = TypeVar("S")  # the shell's socket
OpenSocket = Callable[[int, SocketOptions], S]  # (kind, options) -> a connected socket

# ZeroMQ heartbeats towards the node: a node that stops answering for this long is
# taken as gone, and the socket connects again.
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 3000
ROUTED_GROUP_OPTIONS = {"declare": True, "timeout": 3.0}


def producer(window: int, batch: int | None, keep_acks: int, open_socket: OpenSocket[S],
             keep_arrived: bool = True, ack_timeout: float | None = None
             ) -> tuple[ProducerSession, S]:
    """A producer's session (its window and batches) and its DEALER."""
    session = ProducerSession(window, batch, keep_acks, keep_arrived=keep_arrived,
                              ack_timeout=ack_timeout)
    room = max(1000, window * 2)
    return session, open_socket(zmq.DEALER, {zmq.LINGER: 1000, zmq.SNDHWM: room,
                                             zmq.RCVHWM: room})


def group_consumer(subscribe: consume_wire.Subscribe, make: MakeMessage[M], owner: Any,
                   now: float, open_socket: OpenSocket[S]) -> tuple[GroupSession[M], S]:
    """A group consumer's session (not joined yet) and its DEALER. No receive limit:
    credits bound what the node sends, and a full queue would stop the I/O thread
    reading, PINGs too, so that a busy consumer would look dead. TypeError for an
    option of another type (``b"orders"`` for a topic), before anything is made."""
    check_types(subscribe)
    socket = open_socket(zmq.DEALER, {zmq.LINGER: 1000, zmq.HEARTBEAT_IVL: HEARTBEAT_IVL_MS,
                                      zmq.HEARTBEAT_TIMEOUT: HEARTBEAT_TIMEOUT_MS,
                                      zmq.RCVHWM: 0, WATCH_LINKS: 1})
    return GroupSession(subscribe, make, owner, now), socket


def check_types(subscribe: consume_wire.Subscribe) -> None:
    """TypeError naming a group consumer's option of another type: it failed inside
    the CONSUME's encoding, in Python's words ('bytes' object has no attribute
    'encode', %d format: a real number is required)."""
    for name, value in (("topic", subscribe.topic), ("group", subscribe.group),
                        ("filter", subscribe.filter)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r:.60}")
    window = subscribe.window
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be a whole number, got {type(window).__name__} "
                        f"{window!r:.60}")


def consumer(prefetch: int, make: MakeMessage[M], owner: Any,
             open_socket: OpenSocket[S]) -> tuple[ConsumerSession[M], S]:
    """A --send-dsn consumer's session and its ROUTER (``prefetch``: deliveries that
    may wait in it)."""
    # no heartbeats: a full RCVHWM stops the I/O thread reading (its PONGs too), and a
    # consumer busy for a while would be cut off, its deliveries sent again
    socket = open_socket(zmq.ROUTER, {zmq.LINGER: 1000, zmq.RCVHWM: prefetch,
                                      WATCH_LINKS: 1})
    return ConsumerSession(make, owner), socket


def join_timeout(timeout: float | None) -> float | None:
    """A group consumer's ``timeout`` for its node's answer to CONSUME, or ValueError
    before anything is made: one of 0 or below (or no number) would end the join at
    once, saying the node did not answer."""
    if timeout is not None and (isinstance(timeout, bool)
                                or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0 (None: wait for "
                         f"ever), got {timeout!r}")
    return timeout


def routed_group_options(options: dict[str, Any]) -> dict[str, Any]:
    """A routed group consumer's options for each node's consumer: each node makes the
    group when it has none (a group lives on each node), and a node that is down is
    not waited for long (it is joined when it answers again)."""
    return {**ROUTED_GROUP_OPTIONS, **options}
