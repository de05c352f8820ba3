"""Multipart send and receive for the hot path, with flags as plain ints.

pyzmq's send_multipart and recv_multipart combine enum flags for every frame,
which costs more than the frames themselves for small messages. These do the same
with integers. A multipart message is still all or nothing: only its first frame
can be refused (zmq.Again), after that the rest is always taken.
"""

from __future__ import annotations

from collections.abc import Iterator

import zmq

# The socket and context types pzq uses everywhere: frames are bytes.
Socket = zmq.Socket[bytes]
Context = zmq.Context[Socket]
Events = dict[Socket | int, int]  # what a poll found: sockets, and plain file descriptors

NOBLOCK = int(zmq.NOBLOCK)
MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
RCVMORE = int(zmq.RCVMORE)


def send_frames(socket: Socket, frames: list[bytes]) -> None:
    """Send without blocking; raises zmq.Again (nothing sent) when there is no room."""
    send = socket.send
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        send(frame, MORE_NOBLOCK if index < last else NOBLOCK)


def recv_frames(socket: Socket) -> list[bytes]:
    """Receive one whole message without blocking; raises zmq.Again when none waits."""
    recv, get = socket.recv, socket.get
    frames = [recv(NOBLOCK)]
    while get(RCVMORE):
        frames.append(recv(NOBLOCK))
    return frames


def drain(socket: Socket, limit: int) -> Iterator[list[bytes]]:
    """Every message waiting on ``socket``, up to ``limit``, without blocking."""
    for _ in range(limit):
        try:
            yield recv_frames(socket)
        except zmq.Again:
            return
