"""A pipe that other threads and signal handlers write to, to wake the loop.

ZeroMQ sockets must stay on the loop's thread; signal handlers (and a test's
thread that stops its node) only write a byte here, and the loop's poller sees it readable.
"""

from __future__ import annotations

import os

from pzq.parts import HEARTBEAT, REAP, RELAY_POLL, RETENTION

__all__ = ["HEARTBEAT", "REAP", "RELAY_POLL", "RETENTION", "Waker"]


class Waker:
    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        return self._read_fd

    @property
    def write_fd(self) -> int:
        return self._write_fd

    def wake(self, reason: bytes) -> None:
        try:
            os.write(self._write_fd, reason)
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already; the loop will see them

    def drain(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self._read_fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
