"""The partitions of a read of the archive, planned on the driver from the segments
and their offset indexes.

A partition is the records of one segment that start in a range of topic offsets.
A segment larger than ``partition_bytes`` is cut at index entries (record starts)
about every ``partition_bytes``, so one large segment is read by several tasks at
once, each reading only its own bytes (pzq.archive.format.windows). A segment without a
usable index is one partition: a reader must walk it from its start anyway. A read
of several archive directories plans each directory's segments apart.
"""

from __future__ import annotations

from pathlib import Path

from pzq.archive.format.raw import is_raw_topic
from pzq.archive.format.segments import Segment, list_segments
from pzq.archive.format.windows import usable_entries
from pzq.spark.archives import ArchiveDir, archive_topics
from pzq.spark.reads import PARTITION_BYTES, SegmentPartition


def plan_archive(archive: ArchiveDir, topics: tuple[str, ...], begin: int, end: int | None,
                 partition_bytes: int = PARTITION_BYTES) -> list[SegmentPartition]:
    """The partitions of one directory's topics (every topic it holds if none given)."""
    return [partition for topic in topics or archive_topics(archive.directory)
            for partition in plan_topic(archive.directory, topic, begin, end,
                                        partition_bytes, archive.node)]


def plan_topic(directory: Path, topic: str, begin: int, end: int | None,
               partition_bytes: int = PARTITION_BYTES,
               node: str = "") -> list[SegmentPartition]:
    """The partitions of one topic's records that start in [begin, end)."""
    segments = list_segments(directory / topic)
    raw = is_raw_topic(directory / topic)
    planned: list[SegmentPartition] = []
    for number, segment in enumerate(segments):
        following = segments[number + 1].start if number + 1 < len(segments) else None
        if (following is not None and following <= begin) or \
                (end is not None and segment.start >= end):
            continue
        last = following is None
        stop = end if following is None or (end is not None and end < following) else None
        for low, high in _cuts(segment, max(begin, segment.start), stop, raw,
                               partition_bytes):
            planned.append(SegmentPartition(topic, str(segment.path), segment.start, last,
                                            raw, low, high, node))
    return planned


def _cuts(segment: Segment, begin: int, end: int | None, raw: bool,
          partition_bytes: int) -> list[tuple[int, int | None]]:
    """[begin, end) in topic offsets, cut at index entries about every
    ``partition_bytes``."""
    entries = usable_entries(segment.path, raw) or [0]
    cuts: list[tuple[int, int | None]] = []
    low = begin
    for entry in entries:
        at = segment.start + entry
        if end is not None and at >= end:
            break
        if at - low >= partition_bytes:
            cuts.append((low, at))
            low = at
    cuts.append((low, end))
    return cuts
