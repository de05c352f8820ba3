"""The range a replay asks for, as archive offsets of one topic's log.

``from=`` is ``earliest``, a time or an offset; ``to=`` a time or an offset (none: the
archive's end as the replay begins). A time is ISO 8601 or µs since the epoch and
names the message's store time (when the node took it from its producer, as SEEK's
time does): a record is in the range when that time lies in [from, to). Records are
in archive order (the order groups were done with them), which store times follow
but for redeliveries, so a time range is a filter on the walk, and the walk starts
at the first segment written to at or after ``from`` (a segment last written before
it holds no record of the range; its mtime is given a second's slack). An offset is
a byte position of the log, as ZPER's readers use them, each a record's start (the
log's end too, for ``to=``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.files import segment_items
from pzq.archive.format.raw import is_raw_topic
from pzq.archive.format.records import MessageRecord, walk
from pzq.archive.tier.topiclog import TopicLog
from pzq.protocol.headers import topic_and_tag
from pzq.protocol.numbers import whole_number

Takes = Callable[[bytes], bool]  # whether the group's filter takes a tag

EARLIEST = "earliest"
# A range of at most this many bytes is counted exactly when the replay begins;
# a longer one is estimated from the first records' sizes.
COUNT_EXACT_BYTES = 8 << 20
SAMPLE_BYTES = 1 << 20
# An offset and a time in µs are told apart by size: µs since the epoch are 16
# digits from 2001 on; an archive offset that large is 1 PB into one topic's log.
TIME_DIGITS_AT_LEAST = 16
MTIME_SLACK_US = 1_000_000


@dataclass(frozen=True)
class Bound:
    """One end of a range as asked: an offset, or a time in µs since the epoch."""

    offset: int | None = None
    time_us: int | None = None


def parse_bound(text: str, name: str, earliest_ok: bool) -> Bound:
    """``from=``/``to=``'s value; ValueError in one line naming what is taken."""
    if earliest_ok and text == EARLIEST:
        return Bound(offset=0)
    number = whole_number(text)
    if number is not None:
        if len(text) >= TIME_DIGITS_AT_LEAST:
            return Bound(time_us=number)
        return Bound(offset=number)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        words = "earliest, " if earliest_ok else ""
        raise ValueError(f"{name}={text[:40]} is not {words}an ISO 8601 time, µs since the "
                         "epoch or an archive offset") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Bound(time_us=round(moment.timestamp() * 1_000_000))


@dataclass(frozen=True)
class Resolved:
    """Offsets [start, end) of the log, the store times a record must lie in (0: any),
    and how many records that holds (exactly, or an estimate)."""

    start: int
    end: int
    from_us: int
    to_us: int
    expected: int
    estimated: bool


def resolve(log: TopicLog, first: Bound, last: Bound | None, takes: Takes) -> Resolved:
    """The offsets a range covers in ``log``; ValueError for an offset outside the log
    or not at a record's start."""
    begin, end = log.start_offset, log.end_offset
    from_us = first.time_us or 0
    if first.offset is not None:
        start = max(begin, first.offset) if first.offset == 0 else first.offset
        _check_offset(log, start, "from")
    else:
        start = _first_segment_since(log, from_us)
    to_us = 0
    if last is not None and last.offset is not None:
        _check_offset(log, last.offset, "to")
        end = last.offset
        if first.offset is not None and end <= start:  # offsets both: an empty range asked
            raise ValueError(f"to={end} must be later than from={start}")
    elif last is not None:
        to_us = last.time_us or 0
    if from_us and to_us and to_us <= from_us:
        raise ValueError("to= must be later than from=")
    expected, estimated = count(log, start, end, from_us, to_us, takes)
    return Resolved(start, max(start, end), from_us, to_us, expected, estimated)


def _check_offset(log: TopicLog, offset: int, name: str) -> None:
    if not log.start_offset <= offset <= log.end_offset:
        raise ValueError(f"{name}={offset} is outside the archive of this topic (offsets "
                         f"{log.start_offset} to {log.end_offset})")
    if offset < log.end_offset:
        try:
            log.read(offset, 1)
        except ValueError:
            raise ValueError(f"{name}={offset} is not the start of an archived record"
                             + _record_around(log, offset)) from None


def _record_around(log: TopicLog, offset: int) -> str:
    """The record ``offset`` falls inside, as the offsets to give instead (as
    ``pzq-archive dump --from`` names them); nothing when the walk finds none."""
    segments = log.segments
    number = max(n for n, segment in enumerate(segments) if segment.start <= offset)
    try:
        for item in segment_items(log.directory.name, segments[number],
                                  number + 1 == len(segments), offset,
                                  is_raw_topic(log.directory)):
            if item.offset < offset < item.offset + item.size:
                end = item.offset + item.size
                return f": the record at {item.offset} runs to {end}; give {item.offset} or {end}"
            if item.offset > offset:
                break
    except OSError:
        pass  # the file went (retention): the refusal stands without the hint
    return ""


def _first_segment_since(log: TopicLog, from_us: int) -> int:
    """The start of the first segment last written at or after ``from_us`` (less
    MTIME_SLACK_US: a file's modification time is the kernel's coarse clock, which
    runs milliseconds behind the one a store time is read from)."""
    for segment in log.segments:
        try:
            modified_us = os.stat(segment.path).st_mtime_ns // 1000
        except OSError:
            continue  # gone with retention
        if modified_us >= from_us - MTIME_SLACK_US:
            return segment.start
    return log.end_offset


def wanted(message: ArchivedMessage, from_us: int, to_us: int, takes: Takes) -> bool:
    """Whether a record is the replay's: its store time in [from, to), its tag one the
    group's filter takes."""
    stored_us = message.stored_us
    return (stored_us >= from_us and (not to_us or stored_us < to_us)
            and takes(topic_and_tag(message.headers, message.topic, (message.topic,))[1]))


def count(log: TopicLog, start: int, end: int, from_us: int, to_us: int,
          takes: Takes) -> tuple[int, bool]:
    """(records in range, whether that is an estimate)."""
    if end <= start:
        return 0, False
    limit = end - start if end - start <= COUNT_EXACT_BYTES else SAMPLE_BYTES
    found = walked = 0
    position = start
    while position < min(end, start + limit):
        data = log.read(position, SAMPLE_BYTES, up_to=end)
        if not len(data):
            break
        for item in walk(data, base=position):
            if isinstance(item, MessageRecord):
                walked += 1
                found += wanted(item.message, from_us, to_us, takes)
        position += len(data)
    if limit == end - start:
        return found, False
    if not walked:
        return 0, True
    return round(found * (end - start) / (position - start)), True
