"""Creating and binding the node's sockets, with the options each one needs."""

from __future__ import annotations

import zmq

from pzq import reach
from pzq.errors import PzqError
from pzq.security import KeyPair, serve_curve

# Producer ACKs must never be dropped: the receive ROUTER reports a full or gone
# peer (ROUTER_MANDATORY) instead of discarding silently, and has room for the
# ACKs of many producers' full windows before it says so.
RECEIVE_SNDHWM = 100_000
# Deliveries queued towards one consumer are already in flight with a deadline;
# keep that queue short so its ack timeouts do not run out while it waits.
SEND_SNDHWM = 256
LINGER_MS = 1000


class BindError(PzqError):
    """An endpoint could not be bound."""


def bind(context: zmq.Context, kind: int, dsn: str, flag: str,
         curve: KeyPair | None = None) -> zmq.Socket:
    refuse_live_ipc(dsn, flag)
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, LINGER_MS)
    socket.setsockopt(zmq.IPV6, wants_ipv6(dsn))
    if curve is not None:
        serve_curve(socket, curve)
    try:
        socket.bind(dsn)
    except zmq.ZMQError as exc:
        socket.close(0)
        raise BindError(f"cannot bind {flag} {dsn}: {zmq.strerror(exc.errno or 0)}") from None
    return socket


def refuse_live_ipc(dsn: str, flag: str) -> None:
    """ZeroMQ replaces an ipc socket file without asking: refuse when a process answers there.

    A file left behind by a process that is gone refuses connections, and is taken over.
    """
    if reach.ipc_path(dsn) is not None and reach.accepts_connections(dsn):
        raise BindError(f"cannot bind {flag} {dsn}: another process answers there "
                        "(another node running?)")


def wants_ipv6(dsn: str) -> bool:
    """IPv6 for a bracketed address, and dual-stack for a wildcard host."""
    return dsn.startswith("tcp://[") or dsn.startswith("tcp://*")


def bound_endpoint(socket: zmq.Socket) -> str:
    """The endpoint actually bound, with a wildcard port resolved."""
    return socket.getsockopt_string(zmq.LAST_ENDPOINT)


def bind_receive(context: zmq.Context, dsn: str, curve: KeyPair | None) -> zmq.Socket:
    socket = bind(context, zmq.ROUTER, dsn, "--receive-dsn", curve)
    socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
    socket.setsockopt(zmq.SNDHWM, RECEIVE_SNDHWM)
    return socket


def bind_send(context: zmq.Context, dsn: str, curve: KeyPair | None) -> zmq.Socket:
    # Options set after bind still apply: a bound socket makes a pipe per peer
    # when the peer connects.
    socket = bind(context, zmq.DEALER, dsn, "--send-dsn", curve)
    socket.setsockopt(zmq.SNDHWM, SEND_SNDHWM)
    socket.setsockopt(zmq.LINGER, 0)  # what was not sent yet is still stored
    return socket


def bind_monitor(context: zmq.Context, dsn: str, curve: KeyPair | None) -> zmq.Socket:
    return bind(context, zmq.ROUTER, dsn, "--monitor-dsn", curve)
