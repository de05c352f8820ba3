"""Handshakes a CURVE node refuses before ZAP is asked: clients that offer no CURVE.

ZAP (pzq.zap) hears of every client that offers CURVE, and logs the refused ones. A
client without CURVE keys offers the NULL mechanism instead; ZeroMQ drops it at the
greeting, and only the socket's monitor tells (a mechanism mismatch). The watch
monitors every CURVE socket of one context from a thread of its own, which reads the
monitor sockets, and logs ``handshake_refused`` as ZAP does, rate-limited alike.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.zmqio import Context, Socket

WAKE_MS = 100  # how often the thread looks for sockets to watch, and for its stop
EVENTS = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
NO_CURVE = "the client offers no CURVE handshake (started without CURVE keys?)"
# A client without CURVE may also close first, as soon as it reads the node's greeting:
# the node then sees only a connection that ended mid-handshake, as from a port probe.
LEFT = ("the client closed the connection during the handshake (a client without "
        "CURVE keys, or a plain TCP probe)")
NOT_ZMTP = "the client broke the handshake's protocol (not a ZeroMQ client?)"

_watches: dict[int, HandshakeWatch] = {}  # id(context) -> its watch, while it runs
_names = itertools.count()
# (address, mechanism, client key, reason, endpoint): pzq.zap.RefusalLog.refused
Refused = Callable[[str, str, str, str, str], None]


class HandshakeWatch:
    """A thread that logs the handshakes refused on the sockets given to ``watch``."""

    def __init__(self, context: Context, refused: Refused) -> None:
        self.context = context
        self.refused = refused
        self._new: queue.SimpleQueue[Socket] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pzq-handshakes", daemon=True)

    def start(self) -> None:
        _watches[id(self.context)] = self
        self._thread.start()

    def stop(self) -> None:
        _watches.pop(id(self.context), None)
        self._stop.set()
        self._thread.join(5)

    def watch(self, socket: Socket) -> None:
        """Called by the thread that owns ``socket``: its monitor, read by the watch.

        The monitor is connected here, before the socket binds, so no event is lost
        (a client without CURVE tries once); the queue hands it to the watch's thread
        with the memory barrier ZeroMQ asks for when a socket changes threads.
        """
        address = f"inproc://pzq-handshakes-{next(_names)}"
        socket.monitor(address, EVENTS)
        monitor = self.context.socket(zmq.PAIR)
        monitor.setsockopt(zmq.LINGER, 0)
        monitor.connect(address)
        self._new.put(monitor)

    def _run(self) -> None:
        poller = zmq.Poller()
        monitors: list[Socket] = []
        try:
            while not self._stop.is_set():
                while not self._new.empty():
                    monitors.append(self._new.get())
                    poller.register(monitors[-1], zmq.POLLIN)
                for monitor, _ in poller.poll(WAKE_MS):
                    self._read(monitor)
        except zmq.ContextTerminated:
            pass  # the node is stopping
        finally:
            while not self._new.empty():  # handed over as it stopped
                monitors.append(self._new.get())
            for monitor in monitors:
                monitor.close(0)

    def _read(self, monitor: Socket) -> None:
        event = recv_monitor_message(monitor)
        endpoint = event["endpoint"].decode(errors="replace")
        # The monitor does not say who: the endpoint stands in for the address.
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self.refused("", "unknown", "", LEFT, endpoint)
        elif event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            self.refused("", "not CURVE", "", NO_CURVE, endpoint)
        elif event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            self.refused("", "unknown", "", NOT_ZMTP, endpoint)


def watch(socket: Socket) -> None:
    """Watch a CURVE socket's handshakes, when its context has a watch running."""
    running = _watches.get(id(socket.context))
    if running is not None:
        running.watch(socket)
