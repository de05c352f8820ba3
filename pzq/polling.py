"""The loop's poll: what zmq.Poller does, with one system call fewer a wake.

libzmq's zmq_poll always begins with a ``poll`` that does not wait, then asks every
ZeroMQ socket for its EVENTS (a ``getpid`` and a ``poll`` of the socket's mailbox
each), and only then waits in a second ``poll``. A ZeroMQ socket's file descriptor
(ZMQ_FD, its mailbox) becomes readable when a command comes for it and stays so
until EVENTS or a send or receive reads the command; so asking each socket's EVENTS
first and then waiting on the descriptors is as safe, with the first ``poll`` left
out: a command that comes after the asking makes its descriptor readable, and the
wait ends. After the wait only the sockets whose descriptor fired are asked again.
"""

from __future__ import annotations

import math
import select
import time
from collections.abc import Callable
from typing import Protocol, cast

import zmq
from zmq.backend import Socket as CompiledSocket

from pzq.zmqio import EVENTS, Events, Socket

# (socket, option): an integer option, EVENTS here, by pyzmq's compiled call
_getsockopt = cast(Callable[[Socket, int], int], CompiledSocket.get)
_OS_POLLIN = select.POLLIN
# zmq_poll's words for a plain descriptor's events: in, out, anything else an error
_OS_TO_ZMQ = [(select.POLLIN, int(zmq.POLLIN)), (select.POLLOUT, int(zmq.POLLOUT))]
_ERROR = int(zmq.POLLERR)
_IN_OR_OUT = select.POLLIN | select.POLLOUT


class Poller(Protocol):
    """What a part registers with: a ZeroMQ socket or a plain descriptor, and the
    events it is polled for (0: out of the poll). zmq.Poller is one."""

    def register(self, socket: Socket | int, flags: int) -> None: ...


class WakePoller:
    """zmq.Poller's ``register`` and ``poll`` (the answer as a dict, the loop's Events)
    for the node's loop."""

    def __init__(self) -> None:
        self._os = select.poll()
        self._wanted: dict[Socket, int] = {}  # ZeroMQ sockets polled -> their events
        self._by_fd: dict[int, Socket] = {}  # their ZMQ_FDs
        self._fds: dict[Socket, int] = {}  # every ZeroMQ socket's ZMQ_FD, once read

    def register(self, socket: Socket | int, flags: int) -> None:
        if isinstance(socket, int):
            self._register_fd(socket, flags)
            return
        fd = self._fds.get(socket)
        if fd is None:
            fd = self._fds[socket] = int(socket.getsockopt(zmq.FD))
        if flags:
            if socket not in self._wanted:
                self._os.register(fd, _OS_POLLIN)  # a command came: ask EVENTS
                self._by_fd[fd] = socket
            self._wanted[socket] = flags
        elif self._wanted.pop(socket, None) is not None:
            self._os.unregister(fd)
            del self._by_fd[fd]

    def _register_fd(self, fd: int, flags: int) -> None:
        if flags:
            self._os.register(fd, (select.POLLIN if flags & zmq.POLLIN else 0)
                              | (select.POLLOUT if flags & zmq.POLLOUT else 0))
        else:
            try:
                self._os.unregister(fd)
            except KeyError:
                pass

    def poll(self, timeout_ms: int | None) -> Events:
        """What is ready, waiting at most ``timeout_ms`` (None: until something is)."""
        ready: Events = {}
        for socket, flags in self._wanted.items():
            found = _getsockopt(socket, EVENTS) & flags
            if found:
                ready[socket] = found
        if ready or timeout_ms == 0:
            return self._fired(ready, 0)
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            if self._fired(ready, timeout_ms):
                return ready
            # a descriptor fired for a command that changed no socket's events (a
            # connection's pipe attached, say): wait on for the rest of the time
            if deadline is not None:
                timeout_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))
                if timeout_ms == 0:
                    return ready

    def _fired(self, ready: Events, timeout_ms: int | None) -> Events:
        """Into ``ready``: the descriptors that fire within ``timeout_ms``, and the
        sockets whose descriptor fired that have events now."""
        by_fd = self._by_fd
        for fd, revents in self._os.poll(timeout_ms):
            fired = by_fd.get(fd)
            if fired is None:
                ready[fd] = revents if revents == _OS_POLLIN else _zmq_events(revents)
            elif fired not in ready:
                found = _getsockopt(fired, EVENTS) & self._wanted[fired]
                if found:
                    ready[fired] = found
        return ready


def _zmq_events(revents: int) -> int:
    events = 0
    for os_flag, zmq_flag in _OS_TO_ZMQ:
        if revents & os_flag:
            events |= zmq_flag
    return events | (_ERROR if revents & ~_IN_OR_OUT else 0)
