"""Reading archive files directly, without a node (pzq-archive, Spark executors).

Damaged records are skipped under the rule of ``pzq.archive.format.records`` and handed to
an ``on_damage`` handler (default: one warning line each). A torn tail of a topic's
last segment is a crash or a write in progress and is left quietly; one in an
earlier segment, which the node closed whole, is damage. A read from an offset
seeks with the segment's offset index (pzq.archive.format.index) when it is whole, and
walks the segment from its start when it is missing or torn (it is never written
here). A topic written by ZPER producers yields RawRecords (pzq.archive.format.raw).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from pzq.archive.damage import DamagedRecord, DamageHandler, log_damage
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.index import OffsetIndex, read_index
from pzq.archive.format.raw import is_raw_topic
from pzq.archive.format.records import Damaged, MessageRecord, RawRecord, TornTail, walk
from pzq.archive.format.segments import Segment, list_segments, segment_name
from pzq.archive.format.windows import read_window

Item = MessageRecord | RawRecord | DamagedRecord
CLOSED_TORN = "the segment ends inside a record, yet the node closes segments whole"


def segment_items(topic: str, segment: Segment, last: bool, begin: int = 0,
                  raw: bool = False) -> Iterator[Item]:
    """The records of one segment file and its damaged records, in offset order, from
    the indexed record start at or before ``begin`` (a topic offset) on."""
    # Read, not mapped: a node cutting a torn tail at its start would fault a mapping.
    data = segment.path.read_bytes()
    index = read_index(segment.path, data, raw)
    for item in walk(data, segment.start, seek(data, index, begin - segment.start, raw),
                     raw=raw, resume_at=index.entries if index else None):
        if isinstance(item, MessageRecord | RawRecord):
            yield item
        elif isinstance(item, Damaged):
            yield DamagedRecord(topic, segment_name(segment.start), item.offset,
                                item.size, item.first_bad, item.reason)
        elif not last:
            yield _torn_in_closed(topic, segment, item)


def seek(data: bytes, index: OffsetIndex | None, position: int, raw: bool) -> int:
    """Where to start walking to meet the record at ``position`` as a walk from the
    segment's start would: the indexed start at or before it, moved back while a
    walk from there opens with damage (damage that began earlier would be reported
    from a later offset)."""
    if index is None or position <= 0:
        return 0
    start = index.floor(position)
    while start and not raw:
        first = next(walk(data, 0, start), None)
        if isinstance(first, MessageRecord):
            break
        start = index.before(start) or 0
    return start


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
    raw = is_raw_topic(Path(directory) / topic)
    for index, segment in enumerate(segments):
        if index + 1 < len(segments) and segments[index + 1].start <= begin:
            continue  # wholly before begin
        if end is not None and segment.start >= end:
            return
        yield from within(segment_items(topic, segment, index + 1 == len(segments), begin,
                                        raw), begin, end)


def read_topic(directory: Path, topic: str, begin: int = 0, end: int | None = None,
               on_damage: DamageHandler = log_damage) -> Iterator[tuple[int, ArchivedMessage]]:
    """(offset, message) of each whole pzq record from ``begin`` to ``end`` (exclusive);
    a raw topic's records are in ``topic_items``."""
    for item in topic_items(directory, topic, begin, end):
        if isinstance(item, DamagedRecord):
            on_damage(item)
        elif isinstance(item, MessageRecord):
            yield item.offset, item.message


def whole_end(directory: Path, topic: str) -> tuple[int, int, int]:
    """(first offset, end of the whole records, end of the bytes) of a topic's log:
    its last segment walked from the last entry of its index, if usable, reading
    only the bytes from there (a stream asks at every micro-batch)."""
    topic_dir = Path(directory) / topic
    segments = list_segments(topic_dir)
    if not segments:
        return 0, 0, 0
    last = segments[-1]
    raw = is_raw_topic(topic_dir)
    window = read_window(last.path, last.size, None, raw)
    index = OffsetIndex()
    index.extend(window.data, raw)
    return (segments[0].start, last.start + window.start + index.covered,
            last.start + window.start + len(window.data))
