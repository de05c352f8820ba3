"""Where pzq-consume hands its lines on, and when a line counts as handed on.

A line written to a file or a terminal is handed on. A line written into a pipe is
not yet: the reader may stop (``| head -3``) and leave it unread in the pipe, or
read every line waiting there in one read and use only the first. So into a pipe
lines go one at a time: each counts as handed on once the reader has taken it out
of the pipe, and the next one goes only then. A reader that stops never took more
than the line it was given, and a delivery is ACKed only once its line is taken.
"""

from __future__ import annotations

import array
import errno
import fcntl
import io
import os
import select
import stat
import termios
import time
from typing import TextIO

SPIN_S = 0.0001  # a reader at work takes a line within microseconds: no sleep before this
MOST_SLEEP_MS = 20  # then the wait sleeps, twice as long each time, up to this
GONE = select.POLLERR | select.POLLHUP  # a pipe whose reader has gone, a terminal hung up


class LineOutput:
    """A file or a terminal: a line is handed on once written."""

    def __init__(self, stream: TextIO, fd: int | None) -> None:
        self.stream = stream
        self._watch = select.poll()  # asks for no event: only an error or a hang-up shows
        if fd is not None:
            self._watch.register(fd, 0)

    def hand_on(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def closed(self) -> bool:
        """Whether the reader has gone (of a pipe) or the terminal hung up."""
        return any(events & GONE for _, events in self._watch.poll(0))


class PipeOutput(LineOutput):
    """A pipe: a line is handed on once the reader has taken it out of the pipe."""

    def __init__(self, stream: TextIO, fd: int) -> None:
        super().__init__(stream, fd)
        self._fd = fd
        self._unread = array.array("i", [0])

    def hand_on(self, line: str) -> None:
        super().hand_on(line)
        spin_until = time.monotonic() + SPIN_S
        sleep_ms = 0
        while self._bytes_unread():
            if time.monotonic() < spin_until:
                os.sched_yield()
                continue
            # the poll ends early only when the reader has gone: it may have taken the
            # line just before
            if self._watch.poll(sleep_ms) and self._bytes_unread():
                raise BrokenPipeError(errno.EPIPE, "the reader left a line in the pipe")
            sleep_ms = min(MOST_SLEEP_MS, max(1, sleep_ms * 2))

    def _bytes_unread(self) -> int:
        fcntl.ioctl(self._fd, termios.FIONREAD, self._unread)
        return self._unread[0]


def output_for(stream: TextIO) -> LineOutput:
    """A pipe's output, or the plain one for anything else (a file, a terminal)."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, io.UnsupportedOperation):  # no file behind the stream
        return LineOutput(stream, None)
    return PipeOutput(stream, fd) if stat.S_ISFIFO(mode) else LineOutput(stream, fd)
