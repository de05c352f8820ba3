"""Reading archive files directly, without a node (pzq-archive, Spark executors).

Damaged records are skipped under the rule of ``pzq.archive.records`` and handed to
an ``on_damage`` handler (default: one warning line each). A torn tail of a topic's
last segment is a crash or a write in progress and is left quietly; one in an
earlier segment, which the node closed whole, is damage.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from pzq.archive.damage import DamagedRecord, DamageHandler, log_damage
from pzq.archive.entry import ArchivedMessage
from pzq.archive.records import Damaged, Record, TornTail, walk
from pzq.archive.segments import Segment, list_segments, segment_name

Item = Record | DamagedRecord
CLOSED_TORN = "the segment ends inside a record, yet the node closes segments whole"


def segment_items(topic: str, segment: Segment,
                  last: bool) -> Iterator[Item]:
    """The records of one segment file and its damaged records, in offset order."""
    # Read, not mapped: a node cutting a torn tail at its start would fault a mapping.
    for item in walk(segment.path.read_bytes(), base=segment.start):
        if isinstance(item, Record):
            yield item
        elif isinstance(item, Damaged):
            yield DamagedRecord(topic, segment_name(segment.start), item.offset,
                                item.size, item.first_bad, item.reason)
        elif not last:
            yield _torn_in_closed(topic, segment, item)


def _torn_in_closed(topic: str, segment: Segment, tail: TornTail) -> DamagedRecord:
    return DamagedRecord(topic, segment_name(segment.start), tail.offset, tail.size,
                         tail.offset, CLOSED_TORN)


def within(items: Iterable[Item], begin: int, end: int | None) -> Iterator[Item]:
    """The records that start in [begin, end) and the damaged records overlapping it."""
    for item in items:
        if end is not None and item.offset >= end:
            return
        if item.offset >= begin or (isinstance(item, DamagedRecord)
                                    and item.offset + item.size > begin):
            yield item


def topic_items(directory: Path, topic: str, begin: int = 0,
                end: int | None = None) -> Iterator[Item]:
    """Records and damaged records of a topic within [begin, end), as ``within``."""
    segments = list_segments(Path(directory) / topic)
    for index, segment in enumerate(segments):
        if index + 1 < len(segments) and segments[index + 1].start <= begin:
            continue  # wholly before begin
        if end is not None and segment.start >= end:
            return
        yield from within(segment_items(topic, segment, last=index + 1 == len(segments)),
                          begin, end)


def read_topic(directory: Path, topic: str, begin: int = 0, end: int | None = None,
               on_damage: DamageHandler = log_damage) -> Iterator[tuple[int, ArchivedMessage]]:
    """(offset, message) of each whole record from ``begin`` to ``end`` (exclusive)."""
    for item in topic_items(directory, topic, begin, end):
        if isinstance(item, DamagedRecord):
            on_damage(item)
        else:
            yield item.offset, item.message
