"""A backup's files, a chunk per step: copied from an open descriptor, or read where
they lie, each hashed (sha256) on the way and fsync'd at its end."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20


@dataclass(frozen=True)
class Digest:
    bytes: int
    sha256: str

    def as_json(self) -> dict[str, object]:
        return {"bytes": self.bytes, "sha256": self.sha256}


class FileCopy:
    """``length`` bytes from the start of ``source`` (an open descriptor, closed here at
    the end) into ``target``; with no ``target``, the source is only read and fsync'd
    (a file the backup itself wrote). OSError as the reads and writes raise it."""

    def __init__(self, source: int, length: int, target: Path | None = None) -> None:
        self.source = source
        self.length = length
        self.done = 0
        self._hash = hashlib.sha256()
        self._target: BinaryIO | None = None
        if target is not None:
            self._target = target.open("xb", buffering=0)

    def step(self) -> Digest | None:
        """Copy one chunk; the file's digest once it is whole (and fsync'd)."""
        want = min(CHUNK, self.length - self.done)
        chunk = os.pread(self.source, want, self.done) if want else b""
        if want and not chunk:
            raise OSError(f"the file ended after {self.done} of {self.length} bytes")
        self._hash.update(chunk)
        if self._target is not None:
            view = memoryview(chunk)
            while view:  # an unbuffered write may take part of it (a disk filling up)
                view = view[self._target.write(view):]
        self.done += len(chunk)
        if self.done < self.length:
            return None
        os.fsync(self._target.fileno() if self._target is not None else self.source)
        self.close()
        return Digest(self.length, self._hash.hexdigest())

    def close(self) -> None:
        if self._target is not None:
            self._target.close()
            self._target = None
        if self.source >= 0:
            os.close(self.source)
            self.source = -1


def digest_of(path: Path) -> Digest:
    """A whole file's digest, read at once (a restore's check)."""
    found = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            found.update(chunk)
            size += len(chunk)
    return Digest(size, found.hexdigest())
