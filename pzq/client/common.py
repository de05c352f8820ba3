"""What the clients share: connecting, with pzq's one IPv6 rule, deadlines, and the
one error of a client used after its ``close()``."""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import zmq

from pzq.client import link_watch
from pzq.security import ClientSecurity, plain_if_none
from pzq.sockets import dual_stack
from pzq.zmqio import AnySocket, send_frames

NOTICE_AFTER_S = 1.0  # silence after which a waiting tool says what it waits for
WaitNotice = Callable[[], None]  # called once a wait has lasted NOTICE_AFTER_S


SocketOptions = dict[int, int | bytes]  # socket option -> its value
WATCH_LINKS = -1  # not a ZeroMQ option: monitor the socket's connections from the start
_monitors: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def open_socket(context: zmq.Context[Any], kind: int, dsn: str | Sequence[str],
                curve: ClientSecurity | None, options: SocketOptions,
                socket_class: type[AnySocket] | None = None) -> Any:
    """A socket of ``context`` (of ``socket_class``: the context's own by default), its
    ``options`` set, connected to ``dsn`` (a list: the socket spreads over them)."""
    socket = context.socket(kind, socket_class=socket_class)
    try:
        for option, value in options.items():
            if option != WATCH_LINKS:
                socket.setsockopt(option, value)
        if WATCH_LINKS in options:  # before it connects: its first handshake is seen too
            _monitors[socket] = link_watch.monitor(socket)
        connect(socket, dsn, curve)
    except BaseException:
        if socket in _monitors:
            link_watch.stop_monitor(socket, _monitors.pop(socket))
        socket.close(0)
        raise
    return socket


def watch_links(socket: Any, dsn: str | Sequence[str]) -> link_watch.LinkWatch:
    """The watch of a socket opened with WATCH_LINKS among its options."""
    endpoints = [dsn] if isinstance(dsn, str) else list(dsn)
    return link_watch.LinkWatch(socket, _monitors.pop(socket), endpoints, time.monotonic())


def opener(context: zmq.Context[zmq.Socket[bytes]] | None, dsn: str | Sequence[str],
           curve: ClientSecurity | None) -> Callable[[int, SocketOptions], zmq.Socket[bytes]]:
    """A sync shell's ``open_socket`` for pzq.client.setup: plain sockets of ``context``
    (default: the process's), connected to ``dsn``."""
    def open_plain(kind: int, options: SocketOptions) -> zmq.Socket[bytes]:
        return cast(zmq.Socket[bytes], open_socket(context or zmq.Context.instance(), kind,
                                                   dsn, curve, options))
    return open_plain


def connect(socket: AnySocket, dsn: str | Sequence[str],
            curve: ClientSecurity | None = None) -> None:
    """Connect to one endpoint, or to several (a list: the socket spreads over them)."""
    plain_if_none(curve).apply(socket)
    endpoints = [dsn] if isinstance(dsn, str) else list(dsn)
    if not endpoints:  # else a client would wait out its timeout, connected to nothing
        raise ValueError("no endpoint given: give the node's, e.g. tcp://127.0.0.1:11131")
    dual_stack(socket, *endpoints)
    for endpoint in endpoints:
        try:
            socket.connect(endpoint)
        except zmq.ZMQError:  # (pyzmq says "Invalid argument (addr='bogus')")
            raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint such as "
                             "tcp://127.0.0.1:11131 or ipc:///tmp/pzq") from None


FORKED = ("{} was made before this process forked: its socket is the parent's, which "
          "ZeroMQ cannot use in a child (make the client in the child)")
_open_clients: weakref.WeakSet[Closable] = weakref.WeakSet()


class Closable(Protocol):
    _closed: str  # why the client may no more be used ("" while it may)


def mark_open(client: Closable) -> None:
    """``client`` is open, and closed for a child this process forks: a socket of the
    parent's waits for ever there (ZeroMQ's I/O thread is not in the child)."""
    client._closed = ""
    _open_clients.add(client)


def mark_closed(client: Closable, name: str) -> None:
    """``client`` closed: every call after raises ClientClosed (as pzq.aio's do)."""
    client._closed = f"the {name} is closed"
    _open_clients.discard(client)


def _forked() -> None:
    for client in list(_open_clients):
        client._closed = FORKED.format(f"this {type(client).__name__}")
    _open_clients.clear()


os.register_at_fork(after_in_child=_forked)


def remaining_ms(deadline: float | None) -> int | None:
    """Milliseconds left until a monotonic ``deadline``; None waits for ever."""
    if deadline is None:
        return None
    return max(0, int((deadline - time.monotonic()) * 1000))


def send_before(socket: zmq.Socket[bytes], frames: list[bytes],
                deadline: float | None) -> bool:
    """Send ``frames`` once the socket takes them, waiting until a monotonic
    ``deadline`` (None: for ever); False when it did not take them in time.

    A DEALER whose handshake failed (a CURVE key refused, a node without CURVE) drops
    its connection's pipe and has none to send on until it connects again: a blocking
    send would wait for one for ever, past every timeout its caller gave.
    """
    while True:
        try:
            send_frames(socket, frames)
            return True
        except zmq.Again:
            left = remaining_ms(deadline)
            if left == 0:
                return False
            socket.poll(left, zmq.POLLOUT)


def messages(number: int) -> str:
    """``1 message``, ``2 messages``: a count of messages as a sentence says it."""
    return f"{number} message" if number == 1 else f"{number} messages"
