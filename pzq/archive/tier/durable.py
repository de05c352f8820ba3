"""What of the archive is durable at one moment, held open for a copy (a backup).

``durable_files`` fsyncs every topic's log, so its durable end is its end, and
opens each segment up to there (and the marker of a ZPER producers' topic): a
retention that deletes a segment meanwhile cannot take it from the copy, and what
the node appends later lies past the lengths taken here. The offset indexes are
left out: a node rebuilds an index it does not find (pzq.archive.format.index).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pzq.archive.format.raw import RAW_MARKER
from pzq.archive.tier.archive import Archive


@dataclass(frozen=True)
class DurableFile:
    name: str  # its path under the archive directory, ``<topic>/<file>``
    fd: int  # open for reading; the copy closes it
    length: int  # the bytes to copy from its start


@dataclass(frozen=True)
class DurableTopic:
    start_offset: int
    durable_end: int
    raw: bool


def durable_files(archive: Archive, now: float) -> tuple[dict[str, DurableTopic],
                                                        list[DurableFile]]:
    """Every topic's durable end and its files up to there, opened; ArchiveError if the
    fsync fails, OSError if a file cannot be opened (those opened are closed)."""
    archive.sync(now)
    topics: dict[str, DurableTopic] = {}
    files: list[DurableFile] = []
    try:
        for name, log in sorted(archive.logs.items()):
            topics[name] = DurableTopic(log.start_offset, log.flushed_offset, log.raw)
            if log.raw:
                files.append(_opened(log.directory / RAW_MARKER, name, 0))
            for segment in log.segments:
                length = min(segment.size, log.flushed_offset - segment.start)
                files.append(_opened(segment.path, name, max(0, length)))
    except OSError:
        close_all(files)
        raise
    return topics, files


def _opened(path: Path, topic: str, length: int) -> DurableFile:
    return DurableFile(f"{topic}/{path.name}", os.open(path, os.O_RDONLY), length)


def close_all(files: list[DurableFile]) -> None:
    for file in files:
        try:
            os.close(file.fd)
        except OSError:
            pass  # closed already
