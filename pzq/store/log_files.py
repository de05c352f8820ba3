"""fsync LevelDB's logs from outside LevelDB: the store's timed sync (--sync-interval).

LevelDB starts a new log when its write buffer fills and closes the old one
without an fsync; the old log's records reach a table (fsync'd) only once the
buffer is compacted, in the background. A ``sync=True`` write in between would
fsync the new log alone, so a power cut could keep later batches and lose earlier
ones: a store that is not any state it ever was (counters counting messages that
are gone). Fsyncing every log, oldest first, then the directory, keeps what
survives a prefix of the batches written. LevelDB writes each record to the
kernel before its write returns, so an fsync through another descriptor covers it.
"""

from __future__ import annotations

import os
from pathlib import Path

from pzq.fsync import sync_directory

LOG_SUFFIX = ".log"


def sync_log_files(directory: Path) -> None:
    """fsync each LevelDB log in ``directory`` (ascending file number), then the
    directory. OSError if one cannot be fsync'd."""
    for log in sorted(directory.glob(f"*{LOG_SUFFIX}"), key=_number):
        try:
            fd = os.open(log, os.O_RDONLY)
        except FileNotFoundError:
            continue  # compacted into a table meanwhile, and deleted
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
    sync_directory(directory)


def _number(log: Path) -> int:
    stem = log.name[:-len(LOG_SUFFIX)]
    return int(stem) if stem.isdigit() else -1
