"""How the handshakes of a tool's own sockets ended, as their monitors tell: taken,
the client's CURVE key refused, or failed.

A tool gives its client the watch's context; every socket made there is monitored
from the start, before it connects, so the first handshake is seen too. A consumer's
socket is monitored by its own link watch (pzq.client.link_watch), which replaces
that monitor (a socket has one): the watch asks it instead.
"""

from __future__ import annotations

import time
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.client.link_watch import LinkWatch
from pzq.zmqio import Socket

EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
          | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
TAKEN, KEY_REFUSED, FAILED = "taken", "key refused", "failed"


class _WatchedContext(zmq.Context):  # type: ignore[type-arg]
    watch: HandshakeWatch  # declared: pyzmq takes any other attribute for an option

    def __init__(self, watch: HandshakeWatch) -> None:
        super().__init__()
        self.watch = watch

    def socket(self, socket_type: int, *args: Any, **kwargs: Any) -> Socket:
        made: Socket = super().socket(socket_type, *args, **kwargs)
        if socket_type != zmq.PAIR:  # not a monitor's own socket
            self.watch.monitors.append(made.get_monitor_socket(EVENTS))
        return made

    def adopt_link_watch(self, links: LinkWatch) -> None:
        """A consumer's link watch, which now monitors the socket made here."""
        self.watch.link_watches.append(links)


class HandshakeWatch:
    def __init__(self) -> None:
        self.monitors: list[Socket] = []
        self.link_watches: list[LinkWatch] = []
        self.context: zmq.Context[Socket] = _WatchedContext(self)
        self._ended: dict[str, str] = {}  # endpoint -> how its last handshake ended
        self._ever_taken = False

    def outcome(self, dsn: str) -> str | None:
        """How the last handshake with ``dsn`` ended (TAKEN, KEY_REFUSED, FAILED); None
        before any ended."""
        self._read()
        return self._ended.get(dsn)

    def ever_taken(self) -> bool:
        """Whether any handshake of these sockets was taken: ZeroMQ sends no message
        before one is, so without one nothing sent reached a node."""
        self._read()
        return self._ever_taken

    def _read(self) -> None:
        for monitor in self.monitors:
            while monitor.poll(0):
                message = recv_monitor_message(monitor)
                self._heard(message["endpoint"].decode(errors="replace"), message["event"])
        for links in self.link_watches:
            for endpoint, event in links.handshakes(time.monotonic()).items():
                self._heard(endpoint, event)

    def _heard(self, endpoint: str, event: int) -> None:
        ended = _outcome(event)
        self._ended[endpoint] = ended
        self._ever_taken |= ended == TAKEN

    def close(self) -> None:
        """Once the client is closed: its sockets' last messages go (their linger)."""
        self.context.destroy()


def _outcome(event: int) -> str:
    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        return TAKEN
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return KEY_REFUSED  # the node's ZAP handler said no (pzq.zap)
    return FAILED
