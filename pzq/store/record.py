"""The value stored for each message: a fixed header, then length-prefixed fields.

    version:1 stored_us:8 first_delivered_us:8 deliveries:4
    msg_id_len:4 msg_id  header_count:4 (len:4 header)*  part_count:4 (len:4 part)*

The delivery bookkeeping sits at a fixed offset so that a message given back by a
consumer is rewritten by splicing 12 bytes, without decoding its body.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from operator import add, getitem, itemgetter, sub
from typing import cast

from pzq.bulk import cut, low_high
from pzq.errors import DecodeError
from pzq.protocol.frame_groups import LENGTH, group_chunks, read_group

VERSION = 1
FIXED = struct.Struct(">BQQI")
HEAD = struct.Struct(">BQQII")  # the fixed fields and the msg id's length
NO_HEADERS_ONE_PART = struct.Struct(">III")  # no headers; one part, its length
BOOKKEEPING = struct.Struct(">QI")  # first_delivered_us, deliveries
BOOKKEEPING_OFFSET = 1 + 8
NEVER_DELIVERED = bytes(BOOKKEEPING.size)  # the bookkeeping of a record not yet delivered
FIRST = itemgetter(0)  # of what an unpack found
SLICE_OF = cast(Callable[[bytes, slice], bytes], getitem)  # value[a slice of it]

# A message a batch stored, with whom to ACK: producer routing id, producer msg id,
# seq, record (the intake makes them; the cluster copies them before the ACK).
Stored = tuple[bytes, bytes, int, bytes]
# A scheduled message a batch stored: the same, and its due µs before the record.
ScheduledStored = tuple[bytes, bytes, int, int, bytes]


@dataclass(frozen=True, slots=True)
class Record:
    msg_id: bytes
    headers: tuple[bytes, ...]
    parts: tuple[bytes, ...]
    stored_us: int
    first_delivered_us: int = 0
    deliveries: int = 0


def encode(msg_id: bytes, headers: tuple[bytes, ...], parts: tuple[bytes, ...],
           stored_us: int) -> bytes:
    if not headers and len(parts) == 1:  # (most messages sent alone: two packs)
        part = parts[0]
        return b"".join((HEAD.pack(VERSION, stored_us, 0, 0, len(msg_id)), msg_id,
                         NO_HEADERS_ONE_PART.pack(0, 1, len(part)), part))
    return b"".join([FIXED.pack(VERSION, stored_us, 0, 0), LENGTH.pack(len(msg_id)), msg_id,
                     *group_chunks(headers), *group_chunks(parts)])


def encode_bare(msg_id: bytes, body: bytes, stored_us: int) -> bytes:
    """``encode`` of a message with no header and one part (the same bytes)."""
    return b"".join((HEAD.pack(VERSION, stored_us, 0, 0, len(msg_id)), msg_id,
                     NO_HEADERS_ONE_PART.pack(0, 1, len(body)), body))


def fixed(stored_us: int) -> bytes:
    """A record's fixed fields: what comes before a produce batch's entry (which is
    the rest of the record, msg id first) to make it a record."""
    return FIXED.pack(VERSION, stored_us, 0, 0)


def records_of(fixed: bytes, entries: Sequence[bytes], size: int) -> Sequence[bytes]:
    """``fixed`` before each entry (all of ``size`` bytes): a produce batch's records
    made by one join and cut apart again (pzq.bulk.cut), no object a record but it."""
    return cut(fixed + fixed.join(entries), len(fixed) + size, len(entries))


def with_bookkeeping(value: bytes, first_delivered_us: int, deliveries: int) -> bytes:
    """The same record with its delivery bookkeeping replaced."""
    end = BOOKKEEPING_OFFSET + BOOKKEEPING.size
    bookkeeping = BOOKKEEPING.pack(first_delivered_us, deliveries)
    return value[:BOOKKEEPING_OFFSET] + bookkeeping + value[end:]


def bookkeeping(value: bytes) -> tuple[int, int]:
    """(first_delivered_us, deliveries) of a stored record, without decoding the rest."""
    return BOOKKEEPING.unpack_from(value, BOOKKEEPING_OFFSET)


def headers_of(value: bytes) -> tuple[bytes, ...]:
    """The producer's header frames of a stored record, without reading its parts (on
    every delivery of a topic's message)."""
    if len(value) < FIXED.size or value[0] != VERSION:
        raise DecodeError("stored record has an unknown version or is truncated")
    try:
        return read_group(value, header_group_at(value))[0]
    except (struct.error, DecodeError):
        raise DecodeError("stored record is truncated") from None


def part_groups(values: list[bytes]) -> list[bytes]:
    """``value[part_group_at(value):]`` of each record, each step a pass over the
    records done in C (a run of batched deliveries). Records of one shape (msg ids of
    one length, the same headers' lengths, as one producer's messages to a topic
    mostly are) are checked by one unpack each and cut at one place; else one more
    pass for each header the most headed of them has."""
    if values:
        shape = _shape(values[0])
        if shape is not None:
            (fields, first), at = shape
            try:
                if list(map(fields.unpack_from, values)).count(first) == len(values):
                    return list(map(itemgetter(slice(at, None)), values))
            except struct.error:
                pass  # one is truncated: said so below
    return _part_groups_each(values)


# The length fields of records of one shape, read with one unpack (the rest skipped),
# and what they hold in each.
Shape = tuple[struct.Struct, tuple[int, ...]]


def _shape(value: bytes) -> tuple[Shape, int] | None:
    """The length fields of the record (msg id, header count, each header, part count)
    as one struct, and where its part group starts; None if it is truncated."""
    unpack = LENGTH.unpack_from
    try:
        msg_id_length: int = unpack(value, FIXED.size)[0]
        at = FIXED.size + LENGTH.size + msg_id_length
        count: int = unpack(value, at)[0]
        if count > MAX_SHAPE_HEADERS:
            return None
        at += LENGTH.size
        header_lengths = []
        for _ in range(count):
            header_lengths.append(unpack(value, at)[0])
            at += LENGTH.size + header_lengths[-1]
        parts: int = unpack(value, at)[0]
    except struct.error:
        return None
    return _shape_struct(msg_id_length, tuple(header_lengths), parts), at


MAX_SHAPE_HEADERS = 8  # records with more headers are cut by the passes of each


@lru_cache(maxsize=64)
def _shape_struct(msg_id_length: int, header_lengths: tuple[int, ...], parts: int) -> Shape:
    fields = struct.Struct(f">{FIXED.size}xI{msg_id_length}xI"
                           + "".join(f"I{length}x" for length in header_lengths) + "I")
    return fields, (msg_id_length, len(header_lengths), *header_lengths, parts)


def _part_groups_each(values: list[bytes]) -> list[bytes]:
    """``part_groups`` of records of any shapes."""
    unpack, length = LENGTH.unpack_from, LENGTH.size
    header_ats = list(map(add, map(FIRST, map(unpack, values, repeat(FIXED.size))),
                          repeat(FIXED.size + length)))
    counts = list(map(FIRST, map(unpack, values, header_ats)))
    ats = list(map(add, header_ats, repeat(length)))
    fewest, most = low_high(counts) if counts else (0, 0)
    for header in range(most):
        if header < fewest:  # every record has this header (a topic's: one, TOPIC)
            ats = list(map(add, ats, map(add, map(FIRST, map(unpack, values, ats)),
                                         repeat(length))))
        else:
            ats = [at + length + unpack(value, at)[0] if header < count else at
                   for value, at, count in zip(values, ats, counts, strict=True)]
    if values and low_high(map(sub, map(len, values), ats))[0] < length:  # no part count
        raise DecodeError("stored record is truncated")
    return [value[at:] for value, at in zip(values, ats, strict=True)]


def header_groups(values: list[bytes]) -> list[bytes]:
    """The header group of each record (its count and length-prefixed headers), each
    step a pass over the records done in C: records of the same headers (one topic's,
    say) have equal groups, so what they say is read once."""
    header_ats = list(map(add, map(FIRST, map(LENGTH.unpack_from, values, repeat(FIXED.size))),
                          repeat(FIXED.size + LENGTH.size)))
    part_ats = list(map(sub, map(len, values), map(len, part_groups(values))))
    return list(map(SLICE_OF, values, map(slice, header_ats, part_ats)))


def header_group_at(value: bytes) -> int:
    """Where the header group (count, then length-prefixed headers) starts: the tail
    from there is the record's headers and parts as a delivery's batch carries them."""
    msg_id_length: int = LENGTH.unpack_from(value, FIXED.size)[0]
    return FIXED.size + LENGTH.size + msg_id_length


def part_group_at(value: bytes) -> int:
    """Where the part group (count, then length-prefixed parts) starts, without copying
    anything (on every batched delivery)."""
    unpack = LENGTH.unpack_from
    msg_id_length: int = unpack(value, FIXED.size)[0]
    offset = FIXED.size + LENGTH.size + msg_id_length  # header_group_at, written out
    count: int = unpack(value, offset)[0]
    offset += LENGTH.size
    for _ in range(count):
        offset += LENGTH.size + unpack(value, offset)[0]
    if offset + LENGTH.size > len(value):
        raise DecodeError("stored record is truncated")
    return offset


def stored_us_of(value: bytes) -> int:
    stored_us: int = FIXED.unpack_from(value, 0)[1]
    return stored_us


def decode(value: bytes) -> Record:
    stored_us, first_delivered_us, deliveries, msg_id, headers, parts = fields(value)
    return Record(msg_id, headers, parts, stored_us, first_delivered_us, deliveries)


def fields(value: bytes) -> tuple[int, int, int, bytes, tuple[bytes, ...], tuple[bytes, ...]]:
    """stored_us, first_delivered_us, deliveries, msg_id, headers and parts, with no
    Record made (the archive's bulk writes); DecodeError for a record that is not one."""
    if len(value) < FIXED.size or value[0] != VERSION:
        raise DecodeError("stored record has an unknown version or is truncated")
    _, stored_us, first_delivered_us, deliveries = FIXED.unpack_from(value, 0)
    msg_id_at = FIXED.size + LENGTH.size
    try:
        msg_id_end = msg_id_at + LENGTH.unpack_from(value, FIXED.size)[0]
        if msg_id_end > len(value):
            raise DecodeError("stored record is truncated")
        headers, offset = read_group(value, msg_id_end)
        parts, offset = read_group(value, offset)
    except (struct.error, DecodeError):
        raise DecodeError("stored record is truncated") from None
    if offset != len(value):
        raise DecodeError("stored record has trailing bytes")
    return (stored_us, first_delivered_us, deliveries, value[msg_id_at:msg_id_end], headers,
            parts)


Fields = tuple[int, int, int, bytes, tuple[bytes, ...], tuple[bytes, ...]]


def fields_all(values: list[bytes]) -> list[Fields]:
    """``fields`` of each record, read in one pass with no call per record (the
    messages of an ACK, archived); DecodeError for one that is not a record."""
    unpack_fixed, unpack = FIXED.unpack_from, LENGTH.unpack_from
    fixed_size, length_size = FIXED.size, LENGTH.size
    found: list[Fields] = []
    for value in values:
        if len(value) < fixed_size or value[0] != VERSION:
            raise DecodeError("stored record has an unknown version or is truncated")
        _, stored_us, first_delivered_us, deliveries = unpack_fixed(value, 0)
        try:
            at = fixed_size + length_size
            end = at + unpack(value, fixed_size)[0]
            msg_id = value[at:end]
            groups: list[tuple[bytes, ...]] = []
            for _ in (0, 1):  # the headers, then the parts (frame_groups.read_group)
                count = unpack(value, end)[0]
                end += length_size
                items = []
                for _ in range(count):
                    length = unpack(value, end)[0]
                    end += length_size + length
                    items.append(value[end - length:end])
                groups.append(tuple(items))
        except struct.error:
            raise DecodeError("stored record is truncated") from None
        if end != len(value):
            raise DecodeError("stored record is truncated" if end > len(value)
                              else "stored record has trailing bytes")
        found.append((stored_us, first_delivered_us, deliveries, msg_id, *groups))
    return found
