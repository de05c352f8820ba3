"""The monitor socket: one table of verbs, each answered from counters, never a scan.

A request's last frame is the command, ``VERB [argument...]``; the reply goes back
along the request's envelope (REQ and DEALER alike): ``(envelope), (empty), text``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import zmq

from pzq.admin.node_admin import Admin, Verb
from pzq.clock import Now
from pzq.counters import Counters
from pzq.errors import DecodeError
from pzq.parts import Part
from pzq.protocol import frames
from pzq.protocol.monitor_text import monitor_text
from pzq.zmqio import Events, QuietSocket, Socket, drain

MONITOR_BATCH = 64

Figures = Callable[[], dict[str, Any]]


class Monitor(Part):
    """Polled by the socket's descriptor, not the socket (it is seldom busy, and its
    edge-triggered descriptor must be drained when it fires)."""

    def __init__(self, socket: Socket, figures: Figures, admin: Admin,
                 counters: Counters) -> None:
        self.socket = socket
        self.quiet = QuietSocket(socket)
        self.counters = counters
        self.verbs: dict[bytes, Verb] = {
            b"MONITOR": lambda arguments: monitor_text(figures()),
            b"STATS": lambda arguments: json.dumps(figures(), sort_keys=True).encode(),
            b"PING": lambda arguments: b"PONG",
            **admin.verbs(),
        }

    def bound(self) -> dict[str, Socket]:
        return {"monitor": self.socket}

    def polled(self) -> list[Socket | int]:
        return [self.quiet.fd]

    def close(self) -> None:
        self.socket.close()

    def answer(self, events: Events, now: Now) -> None:
        if self.quiet.due(events):
            self.answer_waiting()
            self.quiet.served()

    def answer_waiting(self) -> None:
        for request in drain(self.socket, MONITOR_BATCH):
            self.counters.monitor_requests += 1
            try:
                envelope, verb, arguments = frames.decode_monitor_request(request)
            except DecodeError as exc:
                envelope, reply = request[:1], f"ERROR: {exc}".encode()
            else:
                reply = self.reply(verb, arguments)
            try:
                self.socket.send_multipart(frames.encode_monitor_reply(envelope, reply),
                                           zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # the asker is gone or not reading; a monitor reply is not owed

    def reply(self, verb: bytes, arguments: list[bytes]) -> bytes:
        handler = self.verbs.get(verb)
        if handler is not None:
            return handler(arguments)
        known = ", ".join(name.decode() for name in self.verbs)
        shown = verb[:40].decode(errors="replace")
        return f"ERROR: unknown command {shown!r}; known commands: {known}".encode()

