"""A consume BATCH read in columns (pzq.protocol.batch_columns) against the entry by
entry reader (pzq.protocol.consume.decode_batch): a batch of one shape is read in C,
any other falls back, and either way the deliveries, or the DecodeError, are the
same."""

from __future__ import annotations

import pytest

from pzq.bulk import CUT_AT_ONCE
from pzq.errors import DecodeError
from pzq.protocol import consume as wire
from pzq.protocol.batch_columns import BatchColumns, decode_batch_columns
from pzq.protocol.frame_groups import group_chunks

pytestmark = pytest.mark.timeout(30)

Entry = tuple[bytes, tuple[bytes, ...], tuple[bytes, ...]]


def entries_frame(entries: list[Entry]) -> bytes:
    return b"".join(wire.batch_entry(key, b"".join(group_chunks(headers)),
                                     b"".join(group_chunks(parts)))
                    for key, headers, parts in entries)


def batch(data: bytes) -> list[bytes]:
    return [wire.BATCH, b"orders", b"g", b"5", b"7", data]


def rows(columns: BatchColumns) -> list[Entry]:
    parts = columns.parts if columns.parts is not None else [(body,) for body in
                                                              columns.bodies]
    headers = columns.headers or [()] * len(columns.keys)
    return list(zip(columns.keys, headers, parts, strict=True))


def read_both(data: bytes) -> list[Entry] | str:
    """What both readers make of ``data``: its entries, or the error's text (they must
    agree)."""
    try:
        expected = list(wire.decode_batch(batch(data)).entries)
    except DecodeError as error:
        with pytest.raises(DecodeError) as found:
            decode_batch_columns(batch(data))
        assert str(found.value) == str(error)
        return str(error)
    columns = decode_batch_columns(batch(data))
    assert (columns.sent_us, columns.ack_timeout_us) == (5, 7)
    assert rows(columns) == expected
    return expected


def one_shape(count: int, key_size: int = 25, part_size: int = 20) -> list[Entry]:
    return [(b"%0*d" % (key_size, n), (), (b"%0*d" % (part_size, n * 7),))
            for n in range(count)]


@pytest.mark.parametrize("count", [1, 3, CUT_AT_ONCE - 1, CUT_AT_ONCE, CUT_AT_ONCE + 1,
                                   2 * CUT_AT_ONCE, 3 * CUT_AT_ONCE + 5])
def test_entries_of_one_shape_are_read_in_columns(count):
    entries = one_shape(count)
    assert read_both(entries_frame(entries)) == entries
    columns = decode_batch_columns(batch(entries_frame(entries)))
    assert columns.parts is None and columns.headers is None  # read by the fast path


def test_empty_keys_and_parts_are_a_shape_too():
    entries: list[Entry] = [(b"", (), (b"",))] * 4
    assert read_both(entries_frame(entries)) == entries
    assert decode_batch_columns(batch(entries_frame(entries))).parts is None


@pytest.mark.parametrize("entries", [
    [(b"k1", (), (b"abc",)), (b"key", (), (b"ab",))],  # as long, the key's length differs
    [(b"k1", (), (b"abcdefgh",)), (b"k2", (b"T",), (b"a",))],  # one header instead
    [(b"k1", (), (b"abcdef",)), (b"k2", (), (b"a", b"b"))],  # two parts instead
    [(b"k1", (), (b"ab",)), (b"k2", (), (b"ab",)), (b"k3", (b"TAG:x",), (b"ab",))],
    [(b"k1", (b"TAG:x",), (b"ab",)), (b"k2", (b"TAG:x",), (b"ab",))],  # headers in all
    [(b"k1", (), (b"a", b"b")), (b"k2", (), (b"c", b"d"))],  # two parts in all
])
def test_a_batch_of_mixed_shapes_is_read_entry_by_entry(entries):
    assert read_both(entries_frame(entries)) == entries
    assert decode_batch_columns(batch(entries_frame(entries))).parts is not None


def test_any_byte_changed_in_an_entry_s_fixed_fields_is_read_as_entry_by_entry():
    """A batch of one shape whose middle entry has one of its fixed bytes (the key's
    length, the header and part counts, the part's length) changed: the columns must
    see it, and read what the entries say (another shape, or truncated)."""
    entries = one_shape(3, key_size=4, part_size=30)
    data = entries_frame(entries)
    size = len(data) // 3
    fixed = [size, *range(size + 5, size + 17)]  # the middle entry's 13 fixed bytes
    for at in fixed:
        for value in (0, 1, 2, 4, 5, 29, 31, 255):
            changed = data[:at] + bytes([value]) + data[at + 1:]
            if changed != data:
                assert read_both(changed) != entries


@pytest.mark.parametrize("count", [2, CUT_AT_ONCE + 3])
def test_a_truncated_batch_is_the_same_decode_error(count):
    data = entries_frame(one_shape(count, key_size=3, part_size=5))
    size = len(data) // count
    for end in range(max(1, len(data) - 3 * size), len(data)):
        if end % size:  # (else whole entries: a shorter batch)
            assert read_both(data[:end]) == "BATCH's entries are truncated"


def test_bytes_after_the_last_entry_are_a_decode_error():
    data = entries_frame(one_shape(4))
    assert read_both(data + data[:1]) == "BATCH's entries are truncated"
