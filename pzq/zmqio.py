"""Multipart send and receive for the hot path, with flags as plain ints.

pyzmq's send_multipart and recv_multipart combine enum flags for every frame,
which costs more than the frames themselves for small messages. These do the same
with integers. A multipart message is still all or nothing: only its first frame
can be refused (zmq.Again), after that the rest is always taken.

Measured on the machines pzq runs on, every libzmq call costs a system call, and a
refused receive (zmq.Again) costs as much as three calls in time and six polls in
instructions (pyzmq makes the exception in Python, two ``__init__`` and an import:
some 27 000 instructions; a poll of the one socket some 4 400). So a message is
received as frames (each says whether more follow, with no call to ask), and
``drain`` asks the socket whether another message waits before its second read (up to
``looks`` reads after the first), then reads until refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache, partial
from itertools import accumulate, chain, islice, repeat, takewhile
from operator import ge
from typing import Any

import zmq
from zmq.backend import Socket as CompiledSocket
from zmq.backend import zmq_poll

from pzq.hooks import nothing

# The socket and context types pzq uses everywhere: frames are bytes.
Socket = zmq.Socket[bytes]
Context = zmq.Context[Socket]
# The compiled calls below work on any pyzmq socket, zmq.asyncio's too (pzq.aio).
AnySocket = zmq.Socket[Any]
Events = dict[Socket | int, int]  # what a poll found: sockets, and plain file descriptors

NOBLOCK = int(zmq.NOBLOCK)
MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)
POLLOUT = int(zmq.POLLOUT)
# A drain looks (``readable``) before each read after its first up to ``looks`` of them,
# and reads on until refused past them. One look is the default: a wake of many
# messages (a --send-dsn consumer's ACKs, one a message) pays one refusal, where six
# looks, each a system call, made the original protocol's drain some 15 % slower. The
# consume endpoint asks for LOOK_BEFORE_EACH: its wakes hold a few ACKs (one a group,
# some 2.8 at three groups), which then end on a look, not on a refused receive.
LOOK_BEFORE_EACH = 6

# pyzmq's compiled send and recv, called past the Python layer of zmq.Socket that
# checks arguments on every call: a quarter of the cost of a small frame.
_send = CompiledSocket.send
_recv = CompiledSocket.recv
# (socket, frame, flags): for a run of frames sent by map (pzq.serving.frame_runs)
send_compiled = _send
# (socket, flags, copy): with copy False a zmq.Frame, whose buffer is ZeroMQ's own.
recv_frame = _recv


def send_frames(socket: AnySocket, frames: Sequence[bytes]) -> None:
    """Send without blocking; raises zmq.Again (nothing sent) when there is no room."""
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        _send(socket, frame, MORE_NOBLOCK if index < last else NOBLOCK)


@lru_cache(maxsize=64)
def _flags(count: int) -> tuple[int, ...]:
    """Each frame's send flags for a message of ``count`` frames."""
    return (MORE_NOBLOCK,) * (count - 1) + (NOBLOCK,)


def send_messages(socket: AnySocket, messages: Sequence[Sequence[bytes]], start: int
                  ) -> tuple[int, zmq.ZMQError | None]:
    """Each message from ``start`` on, whole, by map over the compiled send (a few
    calls however many there are); returns where the sending stopped: the index of
    the message an error refused, with it (none of its frames went: only a first
    frame is refused), or ``len(messages)`` and None when all went."""
    sent: list[object] = []
    try:
        sent.extend(map(_send, repeat(socket),
                        chain.from_iterable(islice(messages, start, None)),
                        chain.from_iterable(map(_flags, map(len, islice(messages, start,
                                                                           None))))))
    except zmq.ZMQError as exc:
        whole = takewhile(partial(ge, len(sent)),
                          accumulate(map(len, islice(messages, start, None))))
        return start + len(list(whole)), exc
    return len(messages), None


def send_headed(socket: Socket, head: list[bytes], frames: list[bytes]) -> None:
    """``head`` then ``frames`` as one message, without joining them into a new list
    (a routing id and fixed frames built once before a delivery's own frames);
    raises as send_frames does, on the first frame only."""
    for frame in head:
        _send(socket, frame, MORE_NOBLOCK)
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        _send(socket, frame, MORE_NOBLOCK if index < last else NOBLOCK)


def begin_frames(socket: Socket, frames: list[bytes]) -> None:
    """The first frames of a message whose last is sent later (send_last); raises
    zmq.Again (nothing sent) when there is no room, as send_frames does."""
    for frame in frames:
        _send(socket, frame, MORE_NOBLOCK)


def send_last(socket: Socket, frame: bytes) -> None:
    """The last frame of a message begun with begin_frames (always taken)."""
    _send(socket, frame, NOBLOCK)


def recv_frames(socket: AnySocket) -> list[bytes]:
    """Receive one whole message without blocking; raises zmq.Again when none waits."""
    frame = _recv(socket, NOBLOCK, False)
    frames = [frame.bytes]
    while frame.more:
        frame = _recv(socket, NOBLOCK, False)
        frames.append(frame.bytes)
    return frames


def recv_rest(socket: AnySocket, frame: zmq.Frame) -> list[bytes]:
    """A message whose first frame, ``frame``, was received as a zmq.Frame: every frame
    from it on, as bytes."""
    frames = [frame.bytes]
    while frame.more:
        frame = _recv(socket, NOBLOCK, False)
        frames.append(frame.bytes)
    return frames


def drain(socket: AnySocket, limit: int, looks: int = 1) -> Iterator[list[bytes]]:
    """Every message waiting on ``socket``, up to ``limit``, without blocking; the
    socket asked whether another waits before each of the first ``looks`` reads after
    the first."""
    for count in range(limit):
        if 0 < count <= looks and not readable(socket):
            return  # a few messages is the common case: no refused receive to end it
        try:
            yield recv_frames(socket)
        except zmq.Again:
            return


def drain_list(socket: AnySocket, limit: int, looks: int = 1) -> list[list[bytes]]:
    """As ``drain``, in one call: no generator resumed and no call for each message
    (a message of one or two frames, as a consumer's ACK, costs its receives and one
    append)."""
    messages: list[list[bytes]] = []
    append = messages.append
    for count in range(limit):
        if 0 < count <= looks and not readable(socket):
            break
        try:
            first = _recv(socket, NOBLOCK, False)
        except zmq.Again:
            break
        if not first.more:
            append([first.bytes])
            continue
        frame = _recv(socket, NOBLOCK, False)
        frames = [first.bytes, frame.bytes]
        while frame.more:
            frame = _recv(socket, NOBLOCK, False)
            frames.append(frame.bytes)
        append(frames)
    return messages


def drain_framed(socket: AnySocket, limit: int, looks: int = 1
                 ) -> Iterator[tuple[zmq.Frame, list[bytes]]]:
    """As ``drain``, each message with its first frame as a zmq.Frame, whose properties
    (the User-Id ZAP gave its connection) can be asked."""
    for count in range(limit):
        if 0 < count <= looks and not readable(socket):
            return
        try:
            first = _recv(socket, NOBLOCK, False)
        except zmq.Again:
            return
        yield first, recv_rest(socket, first)


def drain_some(socket: AnySocket, limit: int, taken: int, stop_after: bytes | None,
               framed: bool = True, look: bool = True
               ) -> tuple[list[zmq.Frame], list[list[bytes]], bool]:
    """Up to ``limit`` messages as ``drain_framed`` reads them, in one call: their first
    frames as zmq.Frames (none unless ``framed``), the messages as bytes, and whether
    the socket had no more. ``taken``: messages this drain read before (the socket is
    asked once whether a second waits); ``stop_after``: the reading ends after a
    message whose third frame starts with it. A message of up to four frames (a
    producer's alone on a ROUTER) is made in one step, and the third frame looked at
    by slices: no call for each message but its receives and one append. Not
    ``look``: the socket is not asked whether a second waits (the reading ends after
    the first, as if none did; the caller's poll sees one that does).

    ``socket`` is a ROUTER (the producers'): a message's first frame is the routing id
    ZeroMQ puts before the frames the peer sent, never its last. Not ``framed``, it is
    received as bytes, not as a zmq.Frame (whose ``more`` says whether a frame
    follows): pyzmq makes each zmq.Frame by a call with keywords, some 4 200
    instructions a frame more than a copy received as bytes."""
    firsts: list[zmq.Frame] = []
    messages: list[list[bytes]] = []
    append = messages.append
    mark = b"" if stop_after is None else stop_after
    cut = len(mark)
    for count in range(taken, taken + limit):
        if count == 1 and not (look and readable(socket)):
            return firsts, messages, True
        try:
            if framed:
                first = _recv(socket, NOBLOCK, False)
                firsts.append(first)
                routing_id = first.bytes
            else:
                routing_id = _recv(socket, NOBLOCK, True)
        except zmq.Again:
            return firsts, messages, True
        second = _recv(socket, NOBLOCK, False)
        if not second.more:
            append([routing_id, second.bytes])
            continue
        third = _recv(socket, NOBLOCK, False)
        head = third.bytes
        if not third.more:
            frames = [routing_id, second.bytes, head]
        else:
            frame = _recv(socket, NOBLOCK, False)
            frames = [routing_id, second.bytes, head, frame.bytes]
            while frame.more:
                frame = _recv(socket, NOBLOCK, False)
                frames.append(frame.bytes)
        append(frames)
        if cut and head[:cut] == mark:
            break
    return firsts, messages, False


def readable(socket: AnySocket) -> bool:
    """Whether input waits: libzmq's poll of the one socket without a wait, which asks
    the socket's EVENTS in C. (pyzmq's ``get`` makes a ``SocketOption`` enum of the
    option each call: some 9 000 instructions against 3 100 for the poll, which costs
    one system call more, a poll of the socket's descriptor that returns at once.)"""
    return bool(zmq_poll([(socket, POLLIN)], 0))


def wait_readable(socket: AnySocket, timeout_ms: int) -> bool:
    """Wait up to ``timeout_ms`` for input: libzmq's poll of the one socket, without
    the Poller (and its dict) that ``Socket.poll`` makes for each wait."""
    return bool(zmq_poll([(socket, POLLIN)], timeout_ms))


def writable(socket: Socket) -> bool:
    """Whether a send would not block: the same poll as ``readable``'s, for room."""
    return bool(zmq_poll([(socket, POLLOUT)], 0))


class PollEntry:
    """A socket's place in the loop's poller, registered again only when what it is
    polled for changes (or the poller does): a register is a dict update behind a
    Python call, and every wake asks each part what it wants polled."""

    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.flags = -1  # what it is registered for in ``poller`` (-1: nothing yet)
        self.poller: zmq.Poller | None = None

    def poll_for(self, poller: zmq.Poller, flags: int) -> None:
        """Polled for ``flags`` (0: out of the poll) from this wake on."""
        if flags != self.flags or poller is not self.poller:
            poller.register(self.socket, flags)
            self.flags, self.poller = flags, poller


class QuietSocket:
    """A socket that is seldom busy, polled by its file descriptor so that a wake costs
    it no EVENTS call (which is a system call or two in libzmq).

    The descriptor only says that something changed, once: so once it fires the
    socket is served until it reports no more input, and any input left (a read cut
    short by its limit, or one that came during a send or just before ``served``
    looked, which takes the descriptor's signal) is served on the next wake, which
    must then come at once (``unread``: the part's ``timeout_ms`` is 0, and
    ``on_unread`` tells the loop so).
    """

    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.fd = int(socket.getsockopt(zmq.FD))
        # input is known to wait, and the descriptor will not say so again (unknown at
        # the start: look once)
        self.unread = True
        self.on_unread: Callable[[], None] = nothing

    def due(self, events: Events) -> bool:
        return self.unread or bool(events.get(self.fd, 0) & POLLIN)

    def served(self) -> None:
        """Call after serving: whether input is left decides the next wake's ``due``."""
        self.unread = readable(self.socket)
        if self.unread:
            self.on_unread()
