"""How the handshakes of a tool's own sockets ended, as their monitors tell: taken,
the client's CURVE key refused, or failed.

A tool gives its client the watch's context; every socket made there is monitored
from the start, before it connects, so the first handshake is seen too.
"""

from __future__ import annotations

from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

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


class HandshakeWatch:
    def __init__(self) -> None:
        self.monitors: list[Socket] = []
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
                event = recv_monitor_message(monitor)
                ended = _outcome(event["event"])
                self._ended[event["endpoint"].decode(errors="replace")] = ended
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
