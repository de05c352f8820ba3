"""How many consumers are connected to an endpoint, counted from its socket's monitor
events: a DEALER does not know its peers, and a ROUTER is polled only while someone
is connected (each ZeroMQ socket in the poll costs every wake an EVENTS call).

The monitor is made before the socket is bound (``watch``, given to the bind), so no
connection comes before it and goes uncounted."""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.zmqio import Socket


class ConsumerCount:
    """``dsn``: the endpoint's; connections over inproc:// make no monitor events, so
    there none is ever counted (``counts`` is False)."""

    def __init__(self, dsn: str) -> None:
        self.connected = 0
        self.counts = not dsn.startswith("inproc://")
        self._events: Socket | None = None

    def watch(self, socket: Socket) -> None:
        """Start counting ``socket``'s connections: call before it is bound."""
        self._events = socket.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)

    @property
    def events(self) -> Socket:
        assert self._events is not None, "watch() the socket before binding it"
        return self._events

    def update(self) -> bool:
        """Counts what the monitor said since the last call; True if a connection went."""
        went = False
        while self.events.poll(0):
            if recv_monitor_message(self.events)["event"] == zmq.EVENT_ACCEPTED:
                self.connected += 1
            else:
                self.connected -= 1
                went = True
        return went

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
