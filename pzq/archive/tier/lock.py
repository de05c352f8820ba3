"""One node per archive directory: a lock file held for the node's life.

Two nodes appending to one topic log would interleave their offsets and break the
index's order, so the second node is refused, as LevelDB refuses a second opener of
a store. The lock is an ``flock`` on ``.lock`` in the directory: the kernel releases it
when the holder exits, even by SIGKILL, so a crash never leaves a stale lock. Its name
starts with '.', which no topic name may, so the archive never takes it for a topic.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from pzq.archive.format.archive_dir import LOCK_NAME
from pzq.errors import ArchiveError
from pzq.fsync import make_directories


class ArchiveLock:
    """The exclusive right to write an archive directory, until ``release``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; ArchiveError naming the cause when it cannot be taken."""
        refuse_unusable(self.directory)
        try:
            make_directories(self.directory)  # its name survives a power cut
        except OSError as exc:
            raise ArchiveError(f"cannot create archive directory {self.directory}: "
                               f"{exc.strerror}") from None
        try:
            fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ArchiveError(f"cannot open the lock file {LOCK_NAME} of archive directory "
                               f"{self.directory}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ArchiveError(f"archive directory {self.directory} is in use by another "
                               f"node (its lock {LOCK_NAME} is held)") from None
        except OSError as exc:
            os.close(fd)
            raise ArchiveError(f"cannot lock archive directory {self.directory}: "
                               f"{exc.strerror}") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


def refuse_unusable(directory: Path) -> None:
    """ArchiveError, saying what is wrong, for an existing archive directory this user may
    not read and write (or a folder above it may not be passed): 'cannot create' would
    send the operator after a folder that is already there."""
    try:
        if not directory.exists():
            return  # make_directories creates it, or says why it cannot
        if not directory.is_dir():
            raise ArchiveError(f"archive directory {directory} exists and is not a directory")
    except PermissionError:
        raise ArchiveError(f"archive directory {directory} cannot be reached by this user "
                           "(permission denied on a folder above it)") from None
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
        raise ArchiveError(f"archive directory {directory} is not readable and writable by "
                           "this user (permission denied): give it to the node's user")
