"""How many consumers are connected: a DEALER does not know its peers, so the node
counts connections from the send socket's monitor events."""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.zmqio import Socket


class ConsumerCount:
    def __init__(self, send: Socket) -> None:
        self.events = send.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.connected = 0
        # connections over inproc:// make no monitor events: none is ever counted
        self.counts = not bytes(send.getsockopt(zmq.LAST_ENDPOINT)).startswith(b"inproc://")

    def update(self) -> None:
        while self.events.poll(0):
            event = recv_monitor_message(self.events)["event"]
            self.connected += 1 if event == zmq.EVENT_ACCEPTED else -1

    def close(self) -> None:
        self.events.close()
