"""Reading archive files directly, without a node (pzq-archive, Spark executors)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pzq.archive.codec import decode_records
from pzq.archive.entry import ArchivedMessage
from pzq.archive.topiclog import list_segments


def read_segment(path: Path, start: int, begin: int = 0,
                 end: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
    """(offset, frames) of the whole records of one segment file within [begin, end)."""
    data = path.read_bytes()
    for position, frames in decode_records(data):
        offset = start + position
        if offset < begin:
            continue
        if end is not None and offset >= end:
            return
        yield offset, frames


def read_topic(directory: Path, topic: str, begin: int = 0,
               end: int | None = None) -> Iterator[tuple[int, ArchivedMessage]]:
    for segment in list_segments(Path(directory) / topic):
        for offset, frames in read_segment(segment.path, segment.start, begin, end):
            yield offset, ArchivedMessage.from_frames(frames, offset)
