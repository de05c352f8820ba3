"""The rule for damaged records on bytes: pzq.archive.format.records.walk."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pzq.archive.format.codec import encode_record
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.records import (
    Damaged,
    MessageRecord,
    RawRecord,
    TornTail,
    decode_records,
    parse_record,
    spans,
    walk,
)
from pzq.errors import TornRecordError
from tests.support.archive_damage import message

pytestmark = pytest.mark.timeout(30)


def records(count: int = 6) -> tuple[bytes, list[int]]:
    encoded = [encode_record(message(n).frames()) for n in range(count)]
    return b"".join(encoded), [sum(map(len, encoded[:n])) for n in range(count + 1)]


def damage_at(data: bytes, position: int, new: bytes) -> bytes:
    return data[:position] + new + data[position + len(new):]


@pytest.mark.parametrize("where", ["flag", "key length", "metadata length", "part length",
                                   "no metadata frame"])
def test_frame_damage_skips_to_the_next_whole_record(where):
    data, starts = records()
    record, key = starts[2], len(message(2).key)
    body = record + 2 + key + 2 + len(message(2).frames()[1])
    changes = {"flag": (record, b"\x80"),  # a flag byte with unknown bits
               "key length": (record + 1, b"\x05"),  # the frames that follow are misread
               "metadata length": (record + 2 + key + 1, b"\xfe"),  # runs into the next
               "part length": (body, b"\x03"),  # an 8-byte length: far past the end
               "no metadata frame": (record, b"\x00")}  # the key seems to be all there is
    position, new = changes[where]
    assert data[position:position + len(new)] != new
    items = list(walk(damage_at(data, position, new), base=1000))
    assert [item.offset for item in items if isinstance(item, MessageRecord)] == [
        1000 + start for index, start in enumerate(starts[:-1]) if index != 2]
    (damaged,) = [item for item in items if not isinstance(item, MessageRecord)]
    assert isinstance(damaged, Damaged)
    assert (damaged.offset, damaged.size) == (1000 + record, starts[3] - record)
    assert damaged.first_bad >= damaged.offset  # found where parsing went wrong


def test_a_torn_tail_is_not_damage():
    data, starts = records()
    items = list(walk(data[:-5]))
    assert isinstance(items[-1], TornTail) and items[-1].offset == starts[5]
    assert not any(isinstance(item, Damaged) for item in items)


# Sizes either side of the short frame's limit, and large enough that a walk takes
# several runs of the walker.
PART_SIZES = st.sampled_from([0, 1, 254, 255, 256, 3000, 9000])


def by_frames(data: bytes) -> tuple[list[tuple[int, ArchivedMessage]], int | None]:
    """The records of whole pzq records read frame by frame, and where a torn tail starts."""
    found, position = [], 0
    while position < len(data):
        try:
            message, following = parse_record(data, position, len(data))
        except TornRecordError:
            return found, position
        found.append((position, message))
        position = following
    return found, None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(PART_SIZES, max_size=3), min_size=1, max_size=8),
       st.floats(min_value=0, max_value=1))
def test_every_reader_finds_the_records_a_frame_by_frame_read_finds(sizes, cut_at):
    messages = [ArchivedMessage(b"k%d" % n, b"m%d" % n, "t", 1, 2, 3, 1, "o",
                                tuple(bytes([n]) * size for size in part_sizes))
                for n, part_sizes in enumerate(sizes)]
    whole = b"".join(encode_record(message.frames()) for message in messages)
    data = whole[:int(len(whole) * cut_at)] if cut_at < 1 else whole
    expected, torn = by_frames(data)
    items = list(walk(data))
    assert [(item.offset, item.message) for item in items
            if isinstance(item, MessageRecord)] == expected
    assert [item.offset for item in items if not isinstance(item, MessageRecord)] == (
        [] if torn is None else [torn])
    assert all(isinstance(item, MessageRecord | TornTail) for item in items)
    assert [span.offset for span in spans(data)] == [at for at, _ in expected] + (
        [] if torn is None else [torn])
    raw = [(item.offset, list(item.frames)) for item in walk(data, raw=True)
           if isinstance(item, RawRecord)]
    assert raw == list(decode_records(data)) == [(at, message.frames())
                                                 for at, message in expected]
