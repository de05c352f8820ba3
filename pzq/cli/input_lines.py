"""A tool's input lines as they come: all the lines one read brings, and whether input
is there to read, so that a tool can do its other work while a person types.

Python's buffered reader hides what it holds from ``select``: this reads the file
descriptor itself, one read at a time.
"""

from __future__ import annotations

import os
import select
from typing import BinaryIO

CHUNK = 65536  # bytes a read takes, so at most this many lines come at once


class InputLines:
    def __init__(self, file: BinaryIO) -> None:
        self._fd = file.fileno()
        self._begun: list[bytes] = []  # the start of a line whose newline has not come
        self.ended = False
        self.count = 0  # lines returned so far: the next one is line count + 1

    def ready(self, timeout: float) -> bool:
        """Whether ``read`` would return at once (input or its end is there), waiting up
        to ``timeout`` seconds for it."""
        readable, _, _ = select.select([self._fd], [], [], timeout)
        return bool(readable)

    def read(self) -> list[bytes]:
        """The lines one read ends, without their newlines (waits for input); at the
        end of the input its last line, also without a newline."""
        chunk = os.read(self._fd, CHUNK)
        if not chunk:
            self.ended = True
            last = b"".join(self._begun)
            self._begun = []
            lines = [last] if last else []
        else:
            lines = chunk.split(b"\n")
            rest = lines.pop()  # after the last newline: a line begun
            if lines and self._begun:
                lines[0] = b"".join([*self._begun, lines[0]])
                self._begun = []
            if rest:
                self._begun.append(rest)
        self.count += len(lines)
        return lines
