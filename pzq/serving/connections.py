"""How many consumers are connected to an endpoint, counted from its socket's monitor
events: a DEALER does not know its peers, and the endpoint's socket is polled only
while someone is connected, and once more after one came or went (what it sent
before it left is read). Each ZeroMQ socket in the poll costs every wake an EVENTS
call; the monitor is polled by its descriptor.

The monitor is made before the socket is bound (``watch``, given to the bind), so no
connection comes before it and goes uncounted."""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.zmqio import POLLIN, Events, QuietSocket, Socket


class ConsumerCount:
    """``dsn``: the endpoint's; connections over inproc:// make no monitor events, so
    there none is ever counted (``counts`` is False)."""

    def __init__(self, dsn: str) -> None:
        self.connected = 0
        self.counts = not dsn.startswith("inproc://")
        self._events: Socket | None = None
        self._quiet: QuietSocket | None = None
        self.listening = True  # the endpoint's socket is polled this wake
        self.may_wait = True  # what it was sent may not all have been read

    def watch(self, socket: Socket) -> None:
        """Start counting ``socket``'s connections: call before it is bound."""
        self._events = socket.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._quiet = QuietSocket(self._events)

    @property
    def events(self) -> Socket:
        assert self._events is not None, "watch() the socket before binding it"
        return self._events

    @property
    def quiet(self) -> QuietSocket:
        """The monitor, polled by its descriptor."""
        assert self._quiet is not None, "watch() the socket before binding it"
        return self._quiet

    def listen(self) -> bool:
        """Whether the endpoint's socket is polled this wake (always where connections
        are not counted)."""
        self.listening = self.may_wait or not self.counts or self.connected > 0
        return self.listening

    def heard(self, took: bool) -> None:
        """After the wake read the socket (``took``: it had something): polled, what it
        said is all there was, or more may come."""
        if self.listening:
            self.may_wait = took

    def came_or_went(self, events: Events) -> bool | None:
        """Counts what the monitor said this wake, if it spoke (None: it did not); True
        if a connection went."""
        quiet = self._quiet  # (a wake asks this of each endpoint: no property, no call)
        assert quiet is not None, "watch() the socket before binding it"
        if not (quiet.unread or events.get(quiet.fd, 0) & POLLIN):
            return None
        went = self.update()
        quiet.served()
        self.may_wait = True
        return went

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
