"""The rule for damaged records on bytes: pzq.archive.format.records.walk."""

from __future__ import annotations

import pytest

from pzq.archive.format.codec import encode_record
from pzq.archive.format.records import Damaged, MessageRecord, TornTail, walk
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
