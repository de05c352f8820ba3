"""Deliveries to the consumers on --send-dsn, as many as they take and the window allows.

Own messages go first (once the cluster lets this node deliver after a start), then
those of down nodes this node took over.
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

from pzq.delivery.state import DeliveryState
from pzq.delivery.window import DeliveryWindow
from pzq.zmqio import Socket, send_frames, writable

States = Callable[[float], list[DeliveryState]]  # monotonic now -> states to deliver from


class Dispatch:
    def __init__(self, socket: Socket, states: States, window: DeliveryWindow,
                 batch_size: int) -> None:
        self.socket = socket
        self.states = states
        self.window = window
        self.batch_size = batch_size

    def unacked(self, mono: float) -> int:
        return sum(len(state.inflight) for state in self.states(mono))

    def has_work(self, mono: float) -> bool:
        return (any(state.has_work() for state in self.states(mono))
                and self.window.room(self.unacked(mono)) > 0)

    def deliver(self, now_us: int, mono: float, room_known: bool | None = None) -> None:
        """``room_known``: whether the last poll found room on the socket (None when
        it did not look); without room nothing is read that could not be sent."""
        self.window.update(now_us)
        if room_known is False or (room_known is None and not writable(self.socket)):
            return
        for state in self.states(mono):
            if not state.has_work():
                continue
            room = self.window.room(self.unacked(mono))
            if room == 0:
                return
            state.deliver(self._send, now_us, min(room, self.batch_size))

    def _send(self, frames: list[bytes]) -> bool:
        try:
            send_frames(self.socket, frames)
        except zmq.Again:
            return False
        return True
