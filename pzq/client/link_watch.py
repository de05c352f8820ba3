"""Whether a consumer's node answers, from its socket's connection events (a ZeroMQ
socket monitor, set before the socket connects), for the sync and asyncio consumers
alike.

``receive()`` with no timeout waits for ever, and a node that is down, stopped or
refusing the client's key looks the same as one with nothing to deliver. So an
endpoint that has had no working connection for SILENT_WARN_S is logged once as a
warning on the standard ``logging`` logger ``pzq.client`` (naming the endpoint and
why), and again, at ``info``, once it answers; ``connected`` says the same at any
moment. The consumer looks at the events whenever it wakes, and wakes for the
warning's moment while it waits.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

SILENT_WARN_S = 5.0  # an endpoint without a working connection this long is logged
# Not CONNECT_RETRIED: ten a second while the node is down, each queued until read
EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
          | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
WHY: dict[int, str] = {
    zmq.EVENT_DISCONNECTED: "its connection was lost (the node stopped, or did not answer "
                            "the connection's heartbeats)",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the node refused this client's CURVE key",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the handshake failed (CURVE on one side only?)",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the handshake failed (CURVE on one side only?)",
}
NOT_YET = "no connection yet (the node may be starting, down or stopped)"

links_log = logging.getLogger("pzq.client")
_numbers = itertools.count()


def monitor(socket: Any) -> zmq.Socket[bytes]:
    """The plain PAIR socket that hears ``socket``'s EVENTS. libzmq sends each event
    from the thread that has it, the context's I/O thread mostly, and waits while the
    event has no room: so the PAIR takes any number (no receive limit), and
    ``stop_monitor`` ends the monitor before the PAIR is closed; either missing, one
    unread or unheard event would stop every socket of the context."""
    address = f"inproc://pzq-links.{next(_numbers)}"
    socket.monitor(address, EVENTS)
    # A plain socket of the socket's own context object (an asyncio one's too), so
    # that its destroy() closes the PAIR with the rest: one made on another object of
    # the same context (a shadow) kept destroy()'s term() waiting for ever
    pair: zmq.Socket[bytes] = socket.context.socket(zmq.PAIR, socket_class=zmq.Socket)
    pair.setsockopt(zmq.RCVHWM, 0)
    pair.setsockopt(zmq.LINGER, 0)
    pair.connect(address)
    return pair


def stop_monitor(socket: Any, pair: zmq.Socket[bytes]) -> None:
    if not socket.closed:
        socket.disable_monitor()
    pair.close(0)


@dataclass
class Link:
    """One endpoint: connected or not, since when (monotonic seconds), and why not."""

    up: bool
    since: float
    why: str = NOT_YET
    warned: bool = False
    handshake: int | None = None  # how the last handshake ended (its event), None: none yet


class LinkWatch:
    def __init__(self, socket: Any, pair: zmq.Socket[bytes], endpoints: list[str],
                 now: float) -> None:
        """``pair``: ``monitor(socket)``, made before ``socket`` connected."""
        self._socket = socket
        self._monitor = pair
        self.links = {endpoint: Link(False, now) for endpoint in endpoints}
        # A socket has one monitor: this one replaced any its context gave it (a tool's
        # pzq.cli.handshake_watch), which asks this watch instead.
        adopt = getattr(socket.context, "adopt_link_watch", None)
        if callable(adopt):
            adopt(self)

    def handshakes(self, now: float) -> dict[str, int]:
        """How each endpoint's last handshake ended (its event), once ``look`` took
        what came."""
        self.look(now)
        return {endpoint: link.handshake for endpoint, link in self.links.items()
                if link.handshake is not None}

    def connected(self, now: float) -> bool:
        """Every endpoint has a working connection, once ``look`` took what came (each
        consumer's ``connected``)."""
        self.look(now)
        return all(link.up for link in self.links.values())

    def look(self, now: float) -> None:
        """Take the events that came, then warn of each endpoint away SILENT_WARN_S."""
        while not self._monitor.closed and self._monitor.poll(0):
            event = recv_monitor_message(self._monitor)
            link = self._link(event["endpoint"].decode(errors="replace"))
            if link is not None:
                self._changed(link, event["event"], now)
        for endpoint, link in self.links.items():
            if not link.up and not link.warned and now - link.since >= SILENT_WARN_S:
                link.warned = True
                links_log.warning("pzq consumer: %s: no connection for %.1f s: %s; trying on",
                                  endpoint, now - link.since, link.why)

    def looked(self, now: float, until: float | None) -> float | None:
        """``look``, then when a wait that was to end at ``until`` (monotonic, None:
        never) is to end now: sooner if a warning is due before."""
        self.look(now)
        due = [link.since + SILENT_WARN_S for link in self.links.values()
               if not link.up and not link.warned]
        if until is not None:
            due.append(until)
        return min(due) if due else None

    def _link(self, endpoint: str) -> Link | None:
        """The endpoint's link; one given by a name the event spells otherwise (a host
        resolved) is the only one, or the one of the same port."""
        if endpoint in self.links:
            return self.links[endpoint]
        if len(self.links) == 1:
            return next(iter(self.links.values()))
        port = endpoint.rpartition(":")[2]
        same = [link for name, link in self.links.items() if name.rpartition(":")[2] == port]
        return same[0] if len(same) == 1 else None

    def _changed(self, link: Link, event: int, now: float) -> None:
        if event != zmq.EVENT_DISCONNECTED:
            link.handshake = event
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if link.warned:
                endpoint = next(name for name, each in self.links.items() if each is link)
                links_log.info("pzq consumer: %s answers again (no connection for %.1f s)",
                               endpoint, now - link.since)
            link.up, link.since, link.warned = True, now, False
            return
        if event == zmq.EVENT_DISCONNECTED and not link.up:
            return  # a connection whose handshake failed going: that failure is why
        if link.up:
            link.up, link.since = False, now
        link.why = WHY.get(event, link.why)

    def close(self) -> None:
        """Before the socket is closed."""
        if not self._monitor.closed:
            stop_monitor(self._socket, self._monitor)
